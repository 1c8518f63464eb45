import { type Cause, type Limiter, LIMITERS, type Verdict, VERDICTS } from '../model/verdict.js';
import { round } from '../model/round.js';
import { findStraggler } from '../model/straggler.js';
import { listLimiters } from './limiters.js';
import { headline } from './summary.js';
import type { SummaryGpu, JobWide, RankSummary, StepMs, Summary } from '../protocol/summary.js';
import { LIMITER_BARS } from './verdict.js';
import { pickRanks } from './summary-series.js';
import type { SummarySeries } from '../protocol/summary.js';
import type { LimiterCost, TimelineSegment, Waste, WasteEntry } from '../protocol/state.js';

/**
 * One summary for a job across its pods, from the summaries each pod's sidecar wrote (`stepscope
 * merge`): each sidecar saw only its own ranks. The straggler is found again across all ranks by
 * the sidecar's own finder, and the job's verdict follows the sidecar's rule (the straggler's, else
 * the one most ranks hold). Pure.
 */

export interface PodSummary {
  /** The pod, as the caller names it (its summary's folder). */
  pod: string;
  summary: Summary;
}

type RankVerdict = Pick<RankSummary, 'rank' | 'verdict' | 'cause'>;

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** The mean of `values` weighted by `weights`, over the values that are not null; null where none are. */
function weighted(values: Array<number | null>, weights: number[]): number | null {
  let total = 0;
  let weight = 0;
  values.forEach((v, i) => {
    if (v === null) return;
    total += v * weights[i]!;
    weight += weights[i]!;
  });
  return weight > 0 ? total / weight : null;
}

const roundOrNull = (x: number | null, digits = 3) => (x === null ? null : round(x, digits));

/** The job's verdict by the sidecar's rule: the straggler's, else the one most ranks hold (a tie to the earlier in VERDICTS). */
export function jobVerdictOf(ranks: ReadonlyArray<RankVerdict>, stragglerRank: number | null): { verdict: Verdict; cause: Cause } | null {
  const straggler = ranks.find((r) => r.rank === stragglerRank);
  if (straggler) return { verdict: straggler.verdict, cause: straggler.cause };
  const votes = new Map<Verdict, RankVerdict[]>();
  for (const r of [...ranks].sort((a, b) => a.rank - b.rank)) votes.set(r.verdict, [...(votes.get(r.verdict) ?? []), r]);
  const best = [...votes.entries()].sort(([va, a], [vb, b]) => b.length - a.length || VERDICTS.indexOf(va) - VERDICTS.indexOf(vb))[0];
  return best ? { verdict: best[0], cause: best[1][0]!.cause } : null;
}

/**
 * The job's timeline from its pods': where a straggler holds the job back, its pod's (whose own job
 * verdict followed it); else, at each moment, the verdict most ranks' pods held, each pod counting
 * its ranks.
 */
function mergeTimelines(parts: readonly PodSummary[], offsets: number[], lead: number | null): TimelineSegment[] {
  const shifted = parts.map((p, i) => p.summary.timeline.map((s) => ({ ...s, start_s: round(s.start_s + offsets[i]!, 2), end_s: round(s.end_s + offsets[i]!, 2) })));
  if (lead !== null) return shifted[lead]!;
  const bounds = [...new Set(shifted.flatMap((t) => t.flatMap((s) => [s.start_s, s.end_s])))].sort((a, b) => a - b);
  const out: TimelineSegment[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    const [from, to] = [bounds[i]!, bounds[i + 1]!];
    const votes = new Map<string, { verdict: Verdict; cause: Cause; ranks: number }>();
    shifted.forEach((timeline, p) => {
      const segment = timeline.find((s) => s.start_s <= from && s.end_s >= to);
      if (!segment) return;
      const key = `${segment.verdict}\u0000${segment.cause ?? ''}`;
      const vote = votes.get(key) ?? { verdict: segment.verdict, cause: segment.cause, ranks: 0 };
      vote.ranks += parts[p]!.summary.ranks.length;
      votes.set(key, vote);
    });
    const best = [...votes.values()].sort((a, b) => b.ranks - a.ranks || VERDICTS.indexOf(a.verdict) - VERDICTS.indexOf(b.verdict))[0];
    if (!best) continue;
    const last = out[out.length - 1];
    if (last && last.verdict === best.verdict && last.cause === best.cause && last.end_s === from) last.end_s = to;
    else out.push({ start_s: from, end_s: to, verdict: best.verdict, cause: best.cause });
  }
  return out;
}

/** The pods' waste ledgers as one: GPU-seconds and energy added, shares over the job's GPU time. */
export function mergeWaste(ledgers: readonly Waste[]): Waste | undefined {
  if (ledgers.length === 0) return undefined;
  const gpuSeconds = sum(ledgers.map((w) => w.gpu_seconds));
  const byCause = new Map<Limiter, { seconds: number; energy: number | null }>();
  for (const entry of ledgers.flatMap((w) => w.by_cause)) {
    const own = byCause.get(entry.cause) ?? { seconds: 0, energy: null };
    own.seconds += entry.gpu_seconds;
    if (entry.energy_j !== null) own.energy = (own.energy ?? 0) + entry.energy_j;
    byCause.set(entry.cause, own);
  }
  const lost = sum([...byCause.values()].map((c) => c.seconds));
  const price = ledgers.find((w) => w.price_per_gpu_hour !== null)?.price_per_gpu_hour ?? null;
  return {
    gpu_seconds: round(gpuSeconds, 1),
    lost_gpu_seconds: round(lost, 1),
    lost_share: gpuSeconds > 0 ? round(lost / gpuSeconds, 4) : null,
    by_cause: [...byCause.entries()]
      .map(([cause, c]): WasteEntry => ({ cause, gpu_seconds: round(c.seconds, 1), share: gpuSeconds > 0 ? round(c.seconds / gpuSeconds, 4) : 0, energy_j: c.energy === null ? null : Math.round(c.energy) }))
      .sort((a, b) => b.gpu_seconds - a.gpu_seconds),
    price_per_gpu_hour: price,
    lost_cost: price === null ? null : round((lost / 3600) * price, 2),
  };
}

/** The pods' limiters over the job: each share and bound weighted by the pod's GPU time, levels judged again. */
function mergeLimiters(parts: readonly PodSummary[], held: Limiter | null): LimiterCost[] {
  const weights = parts.map((p) => p.summary.waste?.gpu_seconds ?? 0);
  const total = sum(weights);
  if (total <= 0) return [];
  const costs: Partial<Record<Limiter, { share: number; low: number }>> = {};
  for (const limiter of LIMITERS) {
    const own = parts.map((p) => p.summary.limiters?.find((l) => l.limiter === limiter) ?? null);
    if (own.every((l) => l === null)) continue;
    costs[limiter] = {
      share: round(sum(own.map((l, i) => (l?.share ?? 0) * weights[i]!)) / total, 4),
      low: round(sum(own.map((l, i) => (l?.low ?? 0) * weights[i]!)) / total, 4),
    };
  }
  return listLimiters(costs, LIMITER_BARS, held);
}

/**
 * The pods' series as one, where they slice time alike (each sidecar doubles its slice as its run
 * grows, so pods of one job mostly agree): steps and samples added, times weighted by the steps, the
 * ranks a sidecar would show picked again over the job. Absent where they do not agree.
 */
function mergeSeries(parts: readonly PodSummary[], ranks: readonly RankSummary[], straggler: number | null): SummarySeries | undefined {
  const all = parts.flatMap((p) => (p.summary.series ? [p.summary.series] : []));
  if (all.length !== parts.length || new Set(all.map((s) => s.slice_s)).size !== 1) return undefined;
  const slice = all[0]!.slice_s;
  const from = Math.min(...all.map((s) => Date.parse(s.from)));
  const offsets = all.map((s) => Math.round((Date.parse(s.from) - from) / 1000 / slice));
  const length = Math.max(...all.map((s, i) => offsets[i]! + s.steps.length));
  const at = <T,>(values: readonly T[], i: number, pod: number): T | undefined => values[i - offsets[pod]!];
  const steps = Array.from({ length }, (_, i) => sum(all.map((s, pod) => at(s.steps, i, pod) ?? 0)));
  const byStep = (pick: (s: SummarySeries) => Array<number | null>) =>
    Array.from({ length }, (_, i) => roundOrNull(weighted(all.map((s, pod) => at(pick(s), i, pod) ?? null), all.map((s, pod) => at(s.steps, i, pod) ?? 0))));
  const samples = Array.from({ length }, (_, i) => {
    const values = all.map((s, pod) => at(s.samples_per_s, i, pod) ?? null).filter((v): v is number => v !== null);
    return values.length ? round(sum(values), 1) : null;
  });
  const shown = new Set(pickRanks(new Map(ranks.map((r) => [r.rank, { steps: r.steps, durNs: r.steps * (r.step_ms.mean ?? 0) * 1e6 }])), straggler));
  const pad = (values: Array<number | null>, pod: number) => Array.from({ length }, (_, i) => at(values, i, pod) ?? null);
  return {
    from: new Date(from).toISOString(),
    slice_s: slice,
    steps,
    step_ms: byStep((s) => s.step_ms),
    phase_ms: { data: byStep((s) => s.phase_ms.data), h2d: byStep((s) => s.phase_ms.h2d), compute: byStep((s) => s.phase_ms.compute), other: byStep((s) => s.phase_ms.other) },
    samples_per_s: samples,
    ranks: all.flatMap((s, pod) => s.ranks.filter((r) => shown.has(r.rank)).map((r) => ({ rank: r.rank, step_ms: pad(r.step_ms, pod) }))).sort((a, b) => a.rank - b.rank),
    ranks_total: ranks.length,
    gpus: all.flatMap((s, pod) =>
      s.gpus.map((g) => ({ ...g, util_pct: pad(g.util_pct, pod), sm_clock_pct: pad(g.sm_clock_pct, pod), power_w: pad(g.power_w, pod), temp_c_max: pad(g.temp_c_max, pod), mem_used_mib_max: pad(g.mem_used_mib_max, pod), throttled: pad(g.throttled, pod) })),
    ),
  };
}

/** Each rank's GPU clock share, from the GPUs its pod matched it to (null where none was). */
function clockOf(part: PodSummary, rank: number): number | null {
  return part.summary.gpus.find((g: SummaryGpu) => g.ranks.includes(rank))?.sm_clock_frac_mean ?? null;
}

const VERDICT_LIMITER: Partial<Record<Verdict, Limiter>> = { 'input-bound': 'input', 'transfer-bound': 'transfer', 'host-bound': 'host', 'communication-bound': 'communication', throttled: 'throttle' };

/**
 * The job's summary from its pods' summaries, all of one job. `missingPods`: pods the caller
 * looked in that gave no summary of it. Throws where there is nothing to merge.
 */
export function mergeSummaries(parts: readonly PodSummary[], missingPods: JobWide['missing_pods'] = []): Summary {
  if (parts.length === 0) throw new Error('no summary of the job to merge');
  const jobs = [...new Set(parts.map((p) => p.summary.job))];
  if (jobs.length > 1) throw new Error(`the summaries are of different jobs (${jobs.join(', ')}): pick one with --job`);
  const started = Math.min(...parts.map((p) => Date.parse(p.summary.started_at)));
  const ended = Math.max(...parts.map((p) => Date.parse(p.summary.ended_at)));
  const offsets = parts.map((p) => (Date.parse(p.summary.started_at) - started) / 1000);

  // A rank reported by two pods (a restarted pod, a folder given twice) counts once: the one with more steps.
  const byRank = new Map<number, { rank: RankSummary; part: PodSummary }>();
  for (const part of parts) for (const rank of part.summary.ranks) if ((byRank.get(rank.rank)?.rank.steps ?? -1) < rank.steps) byRank.set(rank.rank, { rank, part });
  const found = findStraggler(
    [...byRank.values()].map(({ rank, part }) => ({
      rank: rank.rank,
      window: { step_ms_mean: rank.step_ms.mean, breakdown: rank.breakdown, gpu: { sm_clock_frac_mean: clockOf(part, rank.rank) }, host: null },
    })),
  );
  const lead = found ? parts.indexOf(byRank.get(found.rank)!.part) : null;
  const ranks = [...byRank.values()].map(({ rank }) => ({ ...rank, straggler: rank.rank === found?.rank })).sort((a, b) => a.rank - b.rank);
  const worldSize = Math.max(...parts.map((p) => p.summary.world_size), ranks.length);
  const judged = jobVerdictOf(ranks, found?.rank ?? null);
  const verdict = judged?.verdict ?? 'idle';
  const cause = judged?.cause ?? null;

  const timeline = mergeTimelines(parts, offsets, lead);
  const active = timeline.filter((s) => s.verdict !== 'warming-up' && s.verdict !== 'idle');
  const activeSeconds = sum(active.map((s) => s.end_s - s.start_s));
  const heldSeconds = sum(active.filter((s) => s.verdict === verdict).map((s) => s.end_s - s.start_s));
  const share = activeSeconds > 0 ? round(heldSeconds / activeSeconds, 3) : null;
  // The pods in the order their word counts: the straggler's first, then those holding the job's verdict.
  const ordered = [...parts].sort((a, b) => Number(b === parts[lead ?? -1]) - Number(a === parts[lead ?? -1]) || Number(b.summary.verdict === verdict) - Number(a.summary.verdict === verdict));
  const evidence = ordered.find((p) => p.summary.verdict === verdict)?.summary.evidence ?? null;
  const steps = sum(parts.map((p) => p.summary.steps));
  const stepWeights = parts.map((p) => p.summary.steps);
  const timeWeights = parts.map((p) => p.summary.steps * (p.summary.step_ms.mean ?? 0));
  const limiters = mergeLimiters(parts, VERDICT_LIMITER[verdict] ?? null);
  const seen = new Set<string>();
  const recommendations = ordered.flatMap((p) => p.summary.recommendations).filter((r) => (seen.has(r.id) ? false : (seen.add(r.id), true)));
  const gpuBreakdowns = parts.map((p) => p.summary.gpu_breakdown);
  // Percentiles cannot be merged exactly without the pods' histograms: their step-weighted mean,
  // close for a synchronous job, whose ranks all take the slowest one's time.
  const stepMs: StepMs = {
    mean: roundOrNull(weighted(parts.map((p) => p.summary.step_ms.mean), stepWeights)),
    p50: roundOrNull(weighted(parts.map((p) => p.summary.step_ms.p50), stepWeights)),
    p90: roundOrNull(weighted(parts.map((p) => p.summary.step_ms.p90), stepWeights)),
    p99: roundOrNull(weighted(parts.map((p) => p.summary.step_ms.p99), stepWeights)),
  };
  const throughputs = parts.map((p) => p.summary.samples_per_s).filter((x): x is number => x !== null);
  const reported = new Set(ranks.map((r) => r.rank));
  const jobWide: JobWide = {
    from: 'summaries',
    pods: parts.map((p) => ({ pod: p.pod, ranks: p.summary.ranks.map((r) => r.rank).sort((a, b) => a - b) })),
    missing_ranks: Array.from({ length: worldSize }, (_, r) => r).filter((r) => !reported.has(r)),
    missing_pods: missingPods,
  };
  const usual = headline(verdict, cause, share, evidence, steps, limiters);
  const stragglerLine = found ? ` The straggler across pods: ${found.text}.` : '';
  const leadPart = lead === null ? null : parts[lead]!;
  const ownStraggler = leadPart?.summary.straggler?.rank === found?.rank ? leadPart?.summary.straggler : null;
  const wasteLedgers = parts.flatMap((p) => (p.summary.waste ? [p.summary.waste] : []));
  const series = mergeSeries(parts, ranks, found?.rank ?? null);
  const stops = parts.flatMap((p, i) => (p.summary.stops ?? []).map((stop) => ({ ...stop, since_s: round(stop.since_s + offsets[i]!, 2) }))).sort((a, b) => a.since_s - b.since_s);
  return {
    schema: parts[0]!.summary.schema,
    job: jobs[0]!,
    started_at: new Date(started).toISOString(),
    ended_at: new Date(ended).toISOString(),
    end_reason: [...new Set(parts.map((p) => p.summary.end_reason).filter((r): r is string => r !== null))].join('; ') || null,
    headline: usual + stragglerLine,
    verdict,
    cause,
    verdict_share: share,
    steps,
    lost: sum(parts.map((p) => p.summary.lost)),
    duplicates: sum(parts.map((p) => p.summary.duplicates)),
    duration_s: round((ended - started) / 1000, 2),
    world_size: worldSize,
    breakdown: {
      data: round(weighted(parts.map((p) => p.summary.breakdown.data), timeWeights) ?? 0, 4),
      h2d: round(weighted(parts.map((p) => p.summary.breakdown.h2d), timeWeights) ?? 0, 4),
      compute: round(weighted(parts.map((p) => p.summary.breakdown.compute), timeWeights) ?? 0, 4),
      other: round(weighted(parts.map((p) => p.summary.breakdown.other), timeWeights) ?? 0, 4),
    },
    gpu_breakdown: gpuBreakdowns.some((g) => g !== null)
      ? {
          h2d: round(weighted(gpuBreakdowns.map((g) => g?.h2d ?? null), timeWeights) ?? 0, 4),
          compute: round(weighted(gpuBreakdowns.map((g) => g?.compute ?? null), timeWeights) ?? 0, 4),
          idle: round(weighted(gpuBreakdowns.map((g) => g?.idle ?? null), timeWeights) ?? 0, 4),
        }
      : null,
    step_ms: stepMs,
    samples_per_s: throughputs.length ? round(sum(throughputs), 1) : null,
    ranks,
    // Judged over the whole run from the ranks' totals; how long it held is its pod's word where its pod named it too.
    straggler: found ? { ...found, seconds: ownStraggler?.seconds ?? round(leadPart!.summary.duration_s, 1) } : null,
    timeline,
    gpus: parts.flatMap((p) => p.summary.gpus),
    env: ordered[0]!.summary.env,
    recommendations,
    evidence,
    samples_per_step: roundOrNull(weighted(parts.map((p) => p.summary.samples_per_step ?? null), stepWeights)),
    ...(wasteLedgers.length ? { waste: mergeWaste(wasteLedgers)! } : {}),
    ...(stops.length ? { stops } : {}),
    limiters,
    causes: ordered.find((p) => p.summary.verdict === verdict)?.summary.causes ?? [],
    ...(series ? { series } : {}),
    job_wide: jobWide,
  };
}
