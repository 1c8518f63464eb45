import { InvalidArgumentError, type Command } from 'commander';
import { parseTime } from './prometheus/time-arg.js';
import { inertJson, inertText } from './protocol/terminal-text.js';

/** `stepscope top --prometheus URL`: the fleet's jobs ranked by GPU time wasted, per cause, over a range. */

interface TopOptions {
  prometheus: string;
  from?: number;
  to?: number;
  gpuHourPrice?: number;
  grafana?: string;
  limit?: number;
  json?: boolean;
}

function positive(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number from 1');
  return n;
}

function price(text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a price of 0 or more (per GPU-hour, in your currency)');
  return n;
}

export function registerTopCommand(program: Command): void {
  program
    .command('top')
    .description('the fleet: jobs ranked by GPU-hours (and money) wasted per cause over a range, from Prometheus')
    .requiredOption('--prometheus <url>', 'the Prometheus (or Thanos, Mimir) that scrapes the sidecars')
    .option('--from <time>', 'start of the range: now, a duration back (24h), RFC 3339 or Unix seconds (default 24h)', (v: string) => parseTime(v))
    .option('--to <time>', 'end of the range (default now)', (v: string) => parseTime(v))
    .option('--gpu-hour-price <price>', 'what a GPU-hour costs, to price the waste', price)
    .option('--grafana <url>', "Grafana's address: each job gets a link to its view (the stepscope-job dashboard)")
    .option('--limit <n>', 'at most this many jobs', positive)
    .option('--json', 'print the ranking as JSON')
    .action(async (options: TopOptions) => {
      // Imported here, not at start: the CLI declares `top` without loading it.
      const [{ PrometheusClient }, { fleetText, fleetWaste }] = await Promise.all([import('./prometheus/client.js'), import('./prometheus/fleet.js')]);
      const to = options.to ?? Date.now() / 1000;
      const from = options.from ?? to - 86_400;
      const jobs = await fleetWaste(new PrometheusClient(options.prometheus), { from, to, gpuHourPrice: options.gpuHourPrice ?? null, grafana: options.grafana, limit: options.limit });
      // Job names come from the hooks: printed inert.
      process.stdout.write(options.json ? inertJson(JSON.stringify({ from, to, jobs }, null, 2)) + '\n' : inertText(fleetText(jobs, from, to)));
    });
}
