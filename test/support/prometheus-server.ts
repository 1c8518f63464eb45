import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { freePort } from './listening.js';
import { ROOT, waitFor } from './sidecar.js';

/**
 * The real Prometheus server (Debian's `prometheus` package, which .ci/run installs for promtool),
 * on loopback, with a config generated in a temp folder: the stepscope rules (their group interval
 * shortened to the test's evaluation interval), and scrape targets, each with the `pod` label a
 * PodMonitor would give it. Optionally on a TSDB made beforehand (promtool tsdb create-blocks-from).
 */

export const PROMETHEUS = (() => {
  const found = spawnSync('sh', ['-c', 'command -v prometheus'], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : null;
})();
export const WITHOUT_PROMETHEUS = 'the prometheus server is not on PATH (Debian: apt-get install prometheus; .ci/run installs it)';

export const RULES = path.join(ROOT, 'deploy', 'prometheus', 'stepscope-rules.yml');

export interface PrometheusServer {
  url: string;
  process: ChildProcess;
  stderr: string[];
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  dir: string;
  /** host:port of each sidecar, with its pod's name. */
  targets?: Array<{ target: string; pod: string }>;
  /** Scrape and rule evaluation interval, s. */
  intervalS?: number;
  /** Load the stepscope rules. */
  rules?: boolean;
  /** A TSDB folder to start from (its blocks are moved in). */
  storage?: string;
}

export async function startPrometheus({ dir, targets = [], intervalS = 1, rules = true, storage }: PrometheusOptions): Promise<PrometheusServer> {
  if (!PROMETHEUS) throw new Error(WITHOUT_PROMETHEUS);
  mkdirSync(dir, { recursive: true });
  if (rules) {
    const source = parse(readFileSync(RULES, 'utf8')) as { groups: Array<{ interval?: string }> };
    for (const group of source.groups) if (group.interval) group.interval = `${intervalS}s`;
    writeFileSync(path.join(dir, 'stepscope-rules.yml'), stringify(source));
  }
  const config = {
    global: { scrape_interval: `${intervalS}s`, evaluation_interval: `${intervalS}s`, scrape_timeout: `${intervalS}s` },
    rule_files: rules ? ['stepscope-rules.yml'] : [],
    scrape_configs: [{ job_name: 'stepscope', static_configs: targets.map(({ target, pod }) => ({ targets: [target], labels: { pod } })) }],
  };
  writeFileSync(path.join(dir, 'prometheus.yml'), stringify(config));
  const port = await freePort();
  const child = spawn(
    PROMETHEUS,
    [
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${storage ?? path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
      // Backfilled blocks may be old: keep them.
      '--storage.tsdb.retention.time=3650d',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const stderr: string[] = [];
  child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    await waitFor(async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}: ${stderr.join('')}`);
      const ready = await fetch(`${url}/-/ready`).catch(() => null);
      return ready?.ok ?? false;
    }, 60_000, 100);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, process: child, stderr, stop };
}

/** An instant query's result, for tests. */
export async function promQuery(url: string, expr: string, at?: number): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> {
  const params = new URLSearchParams({ query: expr, ...(at === undefined ? {} : { time: String(at) }) });
  const body = (await (await fetch(`${url}/api/v1/query?${params}`)).json()) as { status: string; error?: string; data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } };
  if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
  return body.data.result;
}

/** A range query's result, for tests. */
export async function promRange(url: string, expr: string, from: number, to: number, step: number): Promise<Array<{ metric: Record<string, string>; values: Array<[number, string]> }>> {
  const params = new URLSearchParams({ query: expr, start: String(from), end: String(to), step: String(step) });
  const body = (await (await fetch(`${url}/api/v1/query_range?${params}`)).json()) as { status: string; error?: string; data: { result: Array<{ metric: Record<string, string>; values: Array<[number, string]> }> } };
  if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
  return body.data.result;
}
