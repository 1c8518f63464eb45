import { round } from '../model/round.js';
import { LIMITERS, type Limiter } from '../model/verdict.js';
import { PrometheusError, value, type PrometheusClient } from './client.js';

/**
 * The fleet ranked by waste: every job's GPU time lost to each cause over a range, from the
 * counters the sidecars already export (stepscope_wasted_gpu_seconds_total, and the steps' seconds
 * for the GPU time each job held, one GPU per rank). Nothing is stored beside Prometheus.
 */

export interface FleetJob {
  job: string;
  /** GPU-hours lost over the range, all causes. */
  wasted_gpu_hours: number;
  /** GPU-hours its ranks stepped over the range (one GPU per rank); null where Prometheus has no steps of it. */
  gpu_hours: number | null;
  /** wasted / held; null where the GPU time is unknown. */
  share: number | null;
  /** At --gpu-hour-price; null without a price. */
  cost: number | null;
  /** Most first. */
  by_cause: Array<{ cause: Limiter; gpu_hours: number; cost: number | null }>;
  /** Its job view in Grafana, where --grafana is given. */
  link: string | null;
}

export interface FleetQuery {
  from: number;
  to: number;
  gpuHourPrice: number | null;
  /** Grafana's address, for links to each job's dashboard (deploy/grafana/stepscope.json, uid stepscope-job). */
  grafana?: string;
  /** At most this many jobs. */
  limit?: number;
}

/**
 * Each series' growth over [from, to] (its last value at `to` less its last at `from`; 0 where it
 * began within), the series told apart by sidecar and `series` labels, added up by `group` labels.
 */
async function growthBy(client: PrometheusClient, metric: string, series: string[], group: string[], from: number, to: number): Promise<Map<string, number>> {
  const range = Math.max(1, Math.ceil(to - from));
  const identity = ['instance', 'pod', ...series];
  const expr = `max by (${identity.join(', ')}) (last_over_time(${metric}[${range}s]))`;
  const [end, start] = await Promise.all([client.query(expr, to), client.query(expr, from)]);
  const key = (m: Record<string, string>, labels: string[]) => labels.map((l) => m[l] ?? '').join('\u0000');
  const before = new Map(start.map((s) => [key(s.metric, identity), value(s.value)]));
  const out = new Map<string, number>();
  for (const s of end) {
    const grouped = key(s.metric, group);
    out.set(grouped, (out.get(grouped) ?? 0) + Math.max(0, value(s.value) - (before.get(key(s.metric, identity)) ?? 0)));
  }
  return out;
}

export async function fleetWaste(client: PrometheusClient, query: FleetQuery): Promise<FleetJob[]> {
  const { from, to, gpuHourPrice } = query;
  if (!(to > from)) throw new PrometheusError(`an empty range: --from (${new Date(from * 1000).toISOString()}) must be before --to (${new Date(to * 1000).toISOString()})`);
  const [lost, held] = await Promise.all([
    growthBy(client, 'stepscope_wasted_gpu_seconds_total', ['training_job', 'cause'], ['training_job', 'cause'], from, to),
    growthBy(client, 'stepscope_step_duration_seconds_sum', ['training_job', 'rank'], ['training_job'], from, to),
  ]);
  const jobs = new Map<string, Map<Limiter, number>>();
  for (const [key, seconds] of lost) {
    const [job, cause] = key.split('\u0000') as [string, string];
    if (!(LIMITERS as readonly string[]).includes(cause)) continue;
    const causes = jobs.get(job) ?? new Map<Limiter, number>();
    causes.set(cause as Limiter, (causes.get(cause as Limiter) ?? 0) + seconds);
    jobs.set(job, causes);
  }
  const priced = (hours: number) => (gpuHourPrice === null ? null : round(hours * gpuHourPrice, 2));
  const ranked = [...jobs.entries()].map(([job, causes]): FleetJob => {
    const wasted = [...causes.values()].reduce((a, b) => a + b, 0) / 3600;
    const gpuSeconds = held.get(job);
    const grafana = query.grafana?.replace(/\/$/, '');
    return {
      job,
      wasted_gpu_hours: round(wasted, 3),
      gpu_hours: gpuSeconds === undefined ? null : round(gpuSeconds / 3600, 3),
      share: gpuSeconds ? round(wasted / (gpuSeconds / 3600), 4) : null,
      cost: priced(wasted),
      by_cause: [...causes.entries()]
        .filter(([, s]) => s > 0)
        .map(([cause, s]) => ({ cause, gpu_hours: round(s / 3600, 3), cost: priced(s / 3600) }))
        .sort((a, b) => b.gpu_hours - a.gpu_hours),
      link: grafana ? `${grafana}/d/stepscope-job/?var-training_job=${encodeURIComponent(job)}&from=${Math.round(from * 1000)}&to=${Math.round(to * 1000)}` : null,
    };
  });
  return ranked
    .filter((j) => j.wasted_gpu_hours > 0)
    .sort((a, b) => b.wasted_gpu_hours - a.wasted_gpu_hours || a.job.localeCompare(b.job))
    .slice(0, query.limit ?? Infinity);
}

const hours = (h: number) => (h >= 0.1 ? `${h.toFixed(1)} GPU-h` : `${(h * 60).toFixed(1)} GPU-min`);

/** The ranking as a table for a terminal: job, waste, share, cost, causes, link. */
export function fleetText(jobs: readonly FleetJob[], from: number, to: number): string {
  const range = `${new Date(from * 1000).toISOString().slice(0, 16).replace('T', ' ')} to ${new Date(to * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  if (jobs.length === 0) return `No job lost GPU time from ${range}.\n`;
  const rows = jobs.map((j, i) => [
    String(i + 1),
    j.job,
    hours(j.wasted_gpu_hours),
    j.share === null ? 'n/a' : `${Math.round(j.share * 100)}%`,
    j.cost === null ? '' : j.cost.toFixed(2),
    j.by_cause.map((c) => `${c.cause} ${hours(c.gpu_hours)}`).join(', '),
  ]);
  const header = ['#', 'job', 'wasted', 'of its GPU time', 'cost', 'by cause'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  const links = jobs.flatMap((j, i) => (j.link ? [`${i + 1}. ${j.job}: ${j.link}`] : []));
  return [`Jobs by GPU time wasted, ${range}:`, line(header), ...rows.map(line), ...(links.length ? ['', ...links] : [])].join('\n') + '\n';
}
