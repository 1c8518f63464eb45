import { PHASES } from '../protocol/state.js';
import type { Cause, Limiter, Verdict } from '../model/verdict.js';
import { PrometheusError, promString, value, type PrometheusClient, type Vector } from './client.js';

/**
 * What Prometheus holds of one job over a range, fetched by range and instant queries over the
 * sidecars' own families (the recording rules are not needed): each rank's totals over the range,
 * and at every step of the range each rank's verdict and own delays, from which job-summary.ts
 * makes the summary a sidecar would.
 */

export type Phase = (typeof PHASES)[number];

export interface RankTotals {
  rank: number;
  /** The sidecar that reported it: its `pod` label where a PodMonitor gives one, else its `instance`. */
  pod: string;
  steps: number;
  /** Seconds of steps. */
  stepSeconds: number;
  phases: Record<Phase, number>;
  /** null where the loop passes no samples. */
  samples: number | null;
  /** Cumulative step-duration bucket counts over the range: [upper bound s, count], ascending. */
  buckets: Array<[number, number]>;
}

/** One rank at one step of the range. */
export interface RankPoint {
  verdict: { verdict: Verdict; cause: Cause } | null;
  /** Its mean step and phase shares over the window ending there; null without steps in it. */
  window: { step_ms_mean: number; breakdown: Record<Phase, number>; steps_per_s: number } | null;
}

export interface JobData {
  job: string;
  from: number;
  to: number;
  step: number;
  /** When the job's first and last samples in the range were taken (Unix s). */
  firstAt: number;
  lastAt: number;
  worldSize: number | null;
  ranks: RankTotals[];
  /** The range's step times, and each rank's point at each. */
  times: number[];
  points: Map<number, RankPoint[]>;
  /** GPU-seconds lost per cause over the range. */
  waste: Array<{ cause: Limiter; gpuSeconds: number }>;
  /** Pods whose sidecar Prometheus failed to scrape during the range. */
  unscraped: string[];
}

export interface JobQuery {
  job: string;
  from: number;
  to: number;
  /** Resolution of the timeline, s (default: the range in about 300 steps). */
  step?: number;
  /** Window of the rates each step's straggler and verdicts are judged over, s (default 60). */
  window?: number;
}

const podOf = (metric: Record<string, string>) => metric.pod ?? metric.instance ?? 'unknown';
const keyOf = (metric: Record<string, string>, extra: string[]) => [podOf(metric), metric.rank ?? '', ...extra.map((label) => metric[label] ?? '')].join('\u0000');
const iso = (s: number) => new Date(s * 1000).toISOString();

/** A counter's growth over [from, to] per series: its last value at `to` less its last value at `from` (0 where it began within the range). */
async function growth(client: PrometheusClient, selector: string, by: string[], from: number, to: number): Promise<Array<{ metric: Record<string, string>; delta: number }>> {
  const range = Math.max(1, Math.ceil(to - from));
  const labels = ['instance', 'pod', 'rank', ...by].join(', ');
  const expr = `max by (${labels}) (last_over_time(${selector}[${range}s]))`;
  const [end, start] = await Promise.all([client.query(expr, to), client.query(expr, from)]);
  const before = new Map(start.map((s) => [keyOf(s.metric, by), value(s.value)]));
  return end.map((s) => ({ metric: s.metric, delta: Math.max(0, value(s.value) - (before.get(keyOf(s.metric, by)) ?? 0)) }));
}

function rankOf(metric: Record<string, string>): number | null {
  const rank = Number(metric.rank);
  return metric.rank !== undefined && Number.isInteger(rank) && rank >= 0 ? rank : null;
}

/** The job's data over the range; a job Prometheus has no series of there is an error that says which jobs it has. */
export async function fetchJobData(client: PrometheusClient, query: JobQuery): Promise<JobData> {
  const { job, from, to } = query;
  if (!(to > from)) throw new PrometheusError(`an empty range: --from (${iso(from)}) must be before --to (${iso(to)})`);
  const sel = (metric: string, extra = '') => `${metric}{training_job=${promString(job)}${extra}}`;
  const jobs = await client.labelValues('training_job', 'stepscope_step_duration_seconds_count', from, to);
  if (!jobs.includes(job)) {
    const known = jobs.slice(0, 20).join(', ');
    throw new PrometheusError(
      `Prometheus at ${client.url} has no steps of job ${promString(job)} from ${iso(from)} to ${iso(to)}; ` +
        (jobs.length ? `the jobs it has then: ${known}${jobs.length > 20 ? ', …' : ''}` : 'it has no stepscope job then (a range before the job, or sidecars it does not scrape)'),
    );
  }
  const step = query.step ?? Math.max(1, Math.ceil((to - from) / 300));
  const window = Math.max(query.window ?? 60, 2 * step);
  const by = 'instance, pod, rank';

  const [counts, sums, phases, samples, buckets, waste, worldSize, stepped, verdicts, phaseRates, countRates, sumRates] = await Promise.all([
    growth(client, sel('stepscope_step_duration_seconds_count'), [], from, to),
    growth(client, sel('stepscope_step_duration_seconds_sum'), [], from, to),
    growth(client, sel('stepscope_phase_seconds_total'), ['phase'], from, to),
    growth(client, sel('stepscope_samples_total'), [], from, to),
    growth(client, sel('stepscope_step_duration_seconds_bucket'), ['le'], from, to),
    // Waste is per job, not per rank: each sidecar counts its own ranks' loss.
    growth(client, sel('stepscope_wasted_gpu_seconds_total'), ['cause'], from, to),
    client.query(`max(last_over_time(${sel('stepscope_job_world_size')}[${Math.ceil(to - from)}s]))`, to),
    client.queryRange(`max by (${by}) (${sel('stepscope_step_duration_seconds_count')})`, from, to, step),
    client.queryRange(`max by (${by}, verdict, cause) (${sel('stepscope_rank_verdict')} == 1)`, from, to, step),
    client.queryRange(`sum by (${by}, phase) (rate(${sel('stepscope_phase_seconds_total')}[${window}s]))`, from, to, step),
    client.queryRange(`sum by (${by}) (rate(${sel('stepscope_step_duration_seconds_count')}[${window}s]))`, from, to, step),
    client.queryRange(`sum by (${by}) (rate(${sel('stepscope_step_duration_seconds_sum')}[${window}s]))`, from, to, step),
  ]);

  // Each rank once: a rank reported by two sidecars (a pod replaced) is the one with more steps.
  const ranks = new Map<number, RankTotals>();
  for (const { metric, delta } of counts) {
    const rank = rankOf(metric);
    if (rank === null || (ranks.get(rank)?.steps ?? -1) >= delta) continue;
    ranks.set(rank, { rank, pod: podOf(metric), steps: delta, stepSeconds: 0, phases: { data: 0, h2d: 0, compute: 0, other: 0 }, samples: null, buckets: [] });
  }
  const own = (metric: Record<string, string>) => {
    const rank = rankOf(metric);
    const totals = rank === null ? undefined : ranks.get(rank);
    return totals && totals.pod === podOf(metric) ? totals : undefined;
  };
  for (const { metric, delta } of sums) if (own(metric)) own(metric)!.stepSeconds = delta;
  for (const { metric, delta } of phases) if (own(metric) && (PHASES as readonly string[]).includes(metric.phase ?? '')) own(metric)!.phases[metric.phase as Phase] = delta;
  for (const { metric, delta } of samples) if (own(metric)) own(metric)!.samples = delta;
  for (const { metric, delta } of buckets) if (own(metric)) own(metric)!.buckets.push([metric.le === '+Inf' ? Infinity : Number(metric.le), delta]);
  for (const totals of ranks.values()) totals.buckets.sort((a, b) => a[0] - b[0]);

  const byCause = new Map<Limiter, number>();
  for (const { metric, delta } of waste) byCause.set(metric.cause as Limiter, (byCause.get(metric.cause as Limiter) ?? 0) + delta);

  const times = new Set<number>();
  for (const series of stepped) for (const [t] of series.values) times.add(t);
  const sorted = [...times].sort((a, b) => a - b);
  if (sorted.length === 0 || ranks.size === 0) throw new PrometheusError(`Prometheus at ${client.url} has no steps of job ${promString(job)} from ${iso(from)} to ${iso(to)}`);
  const index = new Map(sorted.map((t, i) => [t, i]));
  const points = new Map<number, RankPoint[]>();
  for (const rank of ranks.keys()) points.set(rank, sorted.map(() => ({ verdict: null, window: null })));
  const at = (metric: Record<string, string>) => (own(metric) ? points.get(rankOf(metric)!) : undefined);
  for (const series of verdicts) {
    const own = at(series.metric);
    for (const [t] of series.values) if (own && index.has(t)) own[index.get(t)!]!.verdict = { verdict: series.metric.verdict as Verdict, cause: (series.metric.cause || null) as Cause };
  }
  const rates = new Map<string, Map<number, number>>();
  const keep = (matrix: typeof phaseRates, name: (metric: Record<string, string>) => string) => {
    for (const series of matrix) rates.set(name(series.metric), new Map(series.values.map((sample) => [sample[0], value(sample)])));
  };
  keep(countRates, (m) => `count\u0000${keyOf(m, [])}`);
  keep(sumRates, (m) => `sum\u0000${keyOf(m, [])}`);
  keep(phaseRates, (m) => `phase\u0000${keyOf(m, ['phase'])}`);
  for (const totals of ranks.values()) {
    const metric = { pod: totals.pod, rank: String(totals.rank) };
    const own = points.get(totals.rank)!;
    sorted.forEach((t, i) => {
      const count = rates.get(`count\u0000${keyOf(metric, [])}`)?.get(t) ?? 0;
      const seconds = rates.get(`sum\u0000${keyOf(metric, [])}`)?.get(t) ?? 0;
      const phaseRate = Object.fromEntries(PHASES.map((p) => [p, rates.get(`phase\u0000${keyOf({ ...metric, phase: p }, ['phase'])}`)?.get(t) ?? 0])) as Record<Phase, number>;
      const total = PHASES.reduce((a, p) => a + phaseRate[p], 0);
      if (count > 0 && total > 0) own[i]!.window = { step_ms_mean: (seconds / count) * 1000, breakdown: Object.fromEntries(PHASES.map((p) => [p, phaseRate[p] / total])) as Record<Phase, number>, steps_per_s: count };
    });
  }
  const pods = [...new Set([...ranks.values()].map((r) => r.pod))];
  const unscraped = await notScraped(client, pods, from, to);
  const size = worldSize[0] ? value(worldSize[0].value) : NaN;
  return {
    job,
    from,
    to,
    step,
    firstAt: sorted[0]!,
    lastAt: sorted[sorted.length - 1]!,
    worldSize: Number.isInteger(size) && size > 0 ? size : null,
    ranks: [...ranks.values()].sort((a, b) => a.rank - b.rank),
    times: sorted,
    points,
    waste: [...byCause.entries()].map(([cause, gpuSeconds]) => ({ cause, gpuSeconds })),
    unscraped,
  };
}

/** The job's pods whose sidecar was down to Prometheus (up == 0) at some time in the range. */
async function notScraped(client: PrometheusClient, pods: string[], from: number, to: number): Promise<string[]> {
  if (pods.length === 0) return [];
  const pattern = pods.map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|');
  const range = Math.max(1, Math.ceil(to - from));
  const down = (result: Vector) => result.filter((s) => value(s.value) === 0).map((s) => podOf(s.metric));
  const [byInstance, byPod] = await Promise.all([
    client.query(`min by (instance) (min_over_time(up{instance=~${promString(pattern)}}[${range}s]))`, to),
    client.query(`min by (pod) (min_over_time(up{pod=~${promString(pattern)}}[${range}s]))`, to),
  ]);
  return [...new Set([...down(byInstance), ...down(byPod)])].filter((p) => pods.includes(p));
}
