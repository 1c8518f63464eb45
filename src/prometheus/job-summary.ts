import { jobVerdictOf, mergeWaste } from '../analysis/merge-summaries.js';
import { headline } from '../analysis/summary.js';
import { SUMMARY_SCHEMA, type SummaryGpu, type RankSummary, type StepMs, type Summary } from '../protocol/summary.js';
import { round } from '../model/round.js';
import { findStraggler, type Straggler } from '../model/straggler.js';
import type { JobData, Phase, RankPoint, RankTotals } from './job-data.js';
import { pickRanks } from '../analysis/summary-series.js';
import type { SummarySeries } from '../protocol/summary.js';
import type { TimelineSegment } from '../protocol/state.js';
import type { Cause, Verdict } from '../model/verdict.js';

/**
 * The summary a sidecar writes, made for a job across all its pods from what Prometheus holds
 * (job-data.ts): the straggler found at every step of the range by the sidecar's own finder, the
 * job's verdict there by its rule (the straggler's, else the one most ranks hold), the timeline,
 * breakdown, waste and the job's GPUs over the range. What the metrics do not carry (the
 * environment, the evidence and advice) is left empty rather than made up. Pure.
 */

const NOT_JUDGED: ReadonlySet<Verdict> = new Set(['warming-up', 'idle']);

/** Prometheus's histogram_quantile over cumulative buckets: linear within the bucket, the last finite bound past it. ms; null without steps. */
export function bucketQuantile(q: number, buckets: ReadonlyArray<readonly [number, number]>): number | null {
  const total = buckets[buckets.length - 1]?.[1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (!Number.isFinite(le)) return round(lower * 1000, 3);
      return round((lower + ((le - lower) * (rank - below)) / Math.max(1e-12, count - below)) * 1000, 3);
    }
    [lower, below] = [le, count];
  }
  return round(lower * 1000, 3);
}

function stepMs(totals: RankTotals[]): StepMs {
  const merged = new Map<number, number>();
  for (const r of totals) for (const [le, count] of r.buckets) merged.set(le, (merged.get(le) ?? 0) + count);
  const buckets = [...merged.entries()].sort((a, b) => a[0] - b[0]);
  const steps = totals.reduce((a, r) => a + r.steps, 0);
  return {
    mean: steps > 0 ? round((totals.reduce((a, r) => a + r.stepSeconds, 0) / steps) * 1000, 3) : null,
    p50: bucketQuantile(0.5, buckets),
    p90: bucketQuantile(0.9, buckets),
    p99: bucketQuantile(0.99, buckets),
  };
}

function breakdown(phases: Record<Phase, number>): Record<Phase, number> {
  const total = phases.data + phases.h2d + phases.compute + phases.other;
  const share = (x: number) => (total > 0 ? round(x / total, 4) : 0);
  return { data: share(phases.data), h2d: share(phases.h2d), compute: share(phases.compute), other: share(phases.other) };
}

/** The verdict held longest over some segments (leaving out warming-up and idle), with its main cause and share. */
function dominant(segments: ReadonlyArray<{ verdict: Verdict; cause: Cause; seconds: number }>): { verdict: Verdict; cause: Cause; share: number | null } | null {
  const byVerdict = new Map<Verdict, Map<Cause, number>>();
  let active = 0;
  for (const s of segments) {
    if (NOT_JUDGED.has(s.verdict)) continue;
    active += s.seconds;
    const causes = byVerdict.get(s.verdict) ?? new Map<Cause, number>();
    causes.set(s.cause, (causes.get(s.cause) ?? 0) + s.seconds);
    byVerdict.set(s.verdict, causes);
  }
  let best: { verdict: Verdict; cause: Cause; seconds: number } | null = null;
  for (const [verdict, causes] of byVerdict) {
    const seconds = [...causes.values()].reduce((a, b) => a + b, 0);
    const [cause] = [...causes.entries()].sort((a, b) => b[1] - a[1])[0]!;
    if (!best || seconds > best.seconds) best = { verdict, cause, seconds };
  }
  return best ? { verdict: best.verdict, cause: best.cause, share: active > 0 ? round(best.seconds / active, 3) : null } : null;
}

/**
 * The run over time for the report's charts, one slice a step of the range: steps, mean step time and
 * ms a step in each phase over the window ending there, all ranks, and the ranks a sidecar's series
 * would show (every one of a small job; of a big one the straggler, the slowest and the fastest).
 */
function seriesOf(data: JobData, straggler: number | null): SummarySeries {
  const slices = data.times.map((_, i) => data.ranks.flatMap((r) => data.points.get(r.rank)![i]!.window ?? []));
  const perStep = (pick: (w: NonNullable<RankPoint['window']>) => number) =>
    slices.map((windows) => {
      const steps = windows.reduce((a, w) => a + w.steps_per_s, 0);
      return steps > 0 ? round(windows.reduce((a, w) => a + pick(w) * w.steps_per_s, 0) / steps, 3) : null;
    });
  const shown = pickRanks(new Map(data.ranks.map((r) => [r.rank, { steps: r.steps, durNs: r.stepSeconds * 1e9 }])), straggler);
  return {
    from: new Date(data.times[0]! * 1000).toISOString(),
    slice_s: data.step,
    steps: slices.map((windows) => Math.round(windows.reduce((a, w) => a + w.steps_per_s, 0) * data.step)),
    step_ms: perStep((w) => w.step_ms_mean),
    phase_ms: Object.fromEntries((['data', 'h2d', 'compute', 'other'] as const).map((p) => [p, perStep((w) => w.breakdown[p] * w.step_ms_mean)])) as SummarySeries['phase_ms'],
    samples_per_s: slices.map(() => null),
    ranks: shown.map((rank) => ({ rank, step_ms: data.points.get(rank)!.map((p) => (p.window ? round(p.window.step_ms_mean, 3) : null)) })),
    ranks_total: data.ranks.length,
    gpus: [],
  };
}

export function jobSummary(data: JobData, gpuHourPrice: number | null = null, gpus: SummaryGpu[] = []): Summary {
  const { step } = data;
  const start = data.firstAt;
  // At each step of the range: the straggler by the sidecar's finder, the job's verdict by its rule.
  const named = new Map<number, { seconds: number; latest: Straggler }>();
  const jobPoints: Array<{ verdict: Verdict; cause: Cause } | null> = data.times.map((_, i) => {
    const windows = data.ranks.flatMap((r) => {
      const w = data.points.get(r.rank)![i]!.window;
      return w ? [{ rank: r.rank, window: { step_ms_mean: w.step_ms_mean, breakdown: w.breakdown, gpu: null, host: null } }] : [];
    });
    const straggler = findStraggler(windows);
    if (straggler) named.set(straggler.rank, { seconds: (named.get(straggler.rank)?.seconds ?? 0) + step, latest: straggler });
    const held = data.ranks.flatMap((r) => {
      const v = data.points.get(r.rank)![i]!.verdict;
      return v ? [{ rank: r.rank, ...v }] : [];
    });
    return jobVerdictOf(held, straggler?.rank ?? null);
  });
  const timeline: TimelineSegment[] = [];
  jobPoints.forEach((point, i) => {
    if (!point) return;
    const from = round(data.times[i]! - start, 2);
    const to = round(Math.min(data.times[i]! + step, data.lastAt) - start, 2);
    const last = timeline[timeline.length - 1];
    if (last && last.verdict === point.verdict && last.cause === point.cause && last.end_s >= from) last.end_s = Math.max(last.end_s, to);
    else timeline.push({ start_s: from, end_s: Math.max(from, to), verdict: point.verdict, cause: point.cause });
  });
  const main = [...named.values()].sort((a, b) => b.seconds - a.seconds)[0] ?? null;
  const ranks: RankSummary[] = data.ranks.map((r) => {
    const own = data.points.get(r.rank)!;
    const held = dominant(own.flatMap((p) => (p.verdict ? [{ ...p.verdict, seconds: step }] : [])));
    const last = [...own].reverse().find((p) => p.verdict)?.verdict ?? null;
    const podRanks = data.ranks.filter((o) => o.pod === r.pod).map((o) => o.rank);
    return {
      rank: r.rank,
      // The metrics carry no local rank: its place among its pod's ranks, as torchrun numbers them.
      local_rank: podRanks.indexOf(r.rank),
      host: r.pod,
      steps: Math.round(r.steps),
      breakdown: breakdown(r.phases),
      step_ms: stepMs([r]),
      verdict: held?.verdict ?? last?.verdict ?? 'idle',
      cause: held ? held.cause : (last?.cause ?? null),
      straggler: main?.latest.rank === r.rank,
    };
  });
  const verdictHeld = dominant(timeline.map((s) => ({ verdict: s.verdict, cause: s.cause, seconds: s.end_s - s.start_s })));
  const verdict = verdictHeld?.verdict ?? timeline[timeline.length - 1]?.verdict ?? 'idle';
  const cause = verdictHeld ? verdictHeld.cause : (timeline[timeline.length - 1]?.cause ?? null);
  const steps = Math.round(data.ranks.reduce((a, r) => a + r.steps, 0));
  const durationS = Math.max(0, data.lastAt - data.firstAt);
  const phases = { data: 0, h2d: 0, compute: 0, other: 0 };
  for (const r of data.ranks) for (const p of Object.keys(phases) as Phase[]) phases[p] += r.phases[p];
  const sampled = data.ranks.filter((r) => r.samples !== null);
  const samples = sampled.reduce((a, r) => a + r.samples!, 0);
  const gpuSeconds = data.ranks.reduce((a, r) => a + r.stepSeconds, 0);
  const lost = data.waste.reduce((a, w) => a + w.gpuSeconds, 0);
  const waste = mergeWaste([
    {
      gpu_seconds: gpuSeconds,
      lost_gpu_seconds: lost,
      lost_share: null,
      by_cause: data.waste.filter((w) => w.gpuSeconds > 0).map((w) => ({ cause: w.cause, gpu_seconds: w.gpuSeconds, share: 0, energy_j: null })),
      price_per_gpu_hour: gpuHourPrice,
      lost_cost: null,
    },
  ])!;
  const reported = new Set(data.ranks.map((r) => r.rank));
  const worldSize = Math.max(data.worldSize ?? 0, ...data.ranks.map((r) => r.rank + 1));
  const pods = [...new Set(data.ranks.map((r) => r.pod))].sort();
  const ended = data.lastAt < data.to - Math.max(2 * step, 60);
  const usual = headline(verdict, cause, verdictHeld?.share ?? null, null, steps, []);
  return {
    schema: SUMMARY_SCHEMA,
    job: data.job,
    started_at: new Date(data.firstAt * 1000).toISOString(),
    ended_at: new Date(data.lastAt * 1000).toISOString(),
    end_reason: ended ? 'its sidecars stopped reporting it before the range ended' : null,
    headline: usual + (main ? ` The straggler across pods: ${main.latest.text}.` : ''),
    verdict,
    cause,
    verdict_share: verdictHeld?.share ?? null,
    steps,
    lost: 0,
    duplicates: 0,
    duration_s: round(durationS, 2),
    world_size: Math.max(1, worldSize),
    breakdown: breakdown(phases),
    gpu_breakdown: null,
    step_ms: stepMs(data.ranks),
    samples_per_s: sampled.length && durationS > 0 ? round(samples / durationS, 1) : null,
    ranks,
    series: seriesOf(data, main?.latest.rank ?? null),
    straggler: main ? { ...main.latest, seconds: round(main.seconds, 1) } : null,
    timeline,
    gpus,
    env: {},
    recommendations: [],
    evidence: null,
    samples_per_step: sampled.length ? round(samples / Math.max(1, sampled.reduce((a, r) => a + r.steps, 0)), 3) : null,
    waste,
    limiters: [],
    causes: [],
    job_wide: {
      from: 'prometheus',
      pods: pods.map((pod) => ({ pod, ranks: data.ranks.filter((r) => r.pod === pod).map((r) => r.rank) })),
      missing_ranks: Array.from({ length: worldSize }, (_, r) => r).filter((r) => !reported.has(r)),
      missing_pods: data.unscraped.map((pod) => ({ pod, why: 'Prometheus could not scrape its sidecar for part of the range' })),
    },
  };
}
