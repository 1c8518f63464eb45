import { WASTE_WORDS } from './waste.js';
import { alsoCosting } from '../model/costs.js';
import type { GpuProcessPeak } from '../counters/gpu-aggregate.js';
import { SUMMARY_SCHEMA, type RankSummary, type StepMs, type Summary, type SummaryGpu, type SummaryMfu } from '../protocol/summary.js';
import { coresPerGpu } from '../counters/inventory-parse.js';
import type { Env } from '../protocol/messages.js';
import { LogHistogram } from '../store/histogram.js';
import { breakdownOf, roundBreakdown, type JobSnapshot } from '../store/job-snapshot.js';
import type { RankView } from '../store/rank-history.js';
import { emptySums, mergeSums } from '../store/step-buckets.js';
import type { JobAnalysis } from './job-analysis.js';
import { round } from '../model/round.js';
import type { SummaryStop } from '../protocol/stall-state.js';
import { rankList } from '../model/stall.js';
import { isStop } from '../model/verdict.js';
import { mfuOf, pctText } from './mfu.js';
import type { LimiterCost, NodeInventory, Recommendation, Waste } from '../protocol/state.js';
import type { Cause, Evidence, Verdict } from '../model/verdict.js';

/** The GPU's processes over the run, less the job's own pids; `processes` (all of them) is not kept. */
export function withOtherProcesses(gpu: SummaryGpu & { processes?: GpuProcessPeak[] }, jobPids: ReadonlySet<number>): SummaryGpu {
  const { processes, ...rest } = gpu;
  return processes ? { ...rest, other_processes: processes.filter((p) => !jobPids.has(p.pid)) } : rest;
}

/** Each rank's MFU over its median step, on the GPU it ran on; null where no hook gave FLOPs. */
function summaryMfu(job: JobSnapshot, ranks: readonly RankSummary[], gpus: readonly SummaryGpu[]): SummaryMfu | null {
  const measured = ranks.flatMap((rank) => {
    const env = job.ranks.find((r) => r.rank === rank.rank)?.env ?? {};
    const mfu = mfuOf(env, gpus.find((g) => g.ranks.includes(rank.rank))?.name ?? null, rank.step_ms.p50);
    return mfu ? [{ rank: rank.rank, ...mfu }] : [];
  });
  if (measured.length === 0) return null;
  const values = measured.filter((r) => r.mfu !== null);
  if (values.length === 0) return { mfu: null, text: measured[0]!.text, ranks: measured };
  const mean = round(values.reduce((a, r) => a + r.mfu!, 0) / values.length, 4);
  const first = values[0]!;
  const over = values.length < ranks.length ? ` on ${values.length} of ${ranks.length} ranks` : '';
  return { mfu: mean, text: `${pctText(mean)} MFU (${first.dtype} peak ${first.peak_tflops} TFLOP/s, ${first.gpu})${over}`, ranks: measured };
}

/** The summary with the node it ran on; as it was where the inventory is not known, so older recordings replay to what they wrote. */
export function withNode(summary: Summary, node: NodeInventory | null): Summary {
  if (node === null) return summary;
  return { ...summary, node: { ...node, cores_per_gpu: coresPerGpu(node, summary.gpus.length || null) } };
}

const roundOrNull = (x: number | null, digits = 3) => (x === null ? null : round(x, digits));

function stepMs(histogram: LogHistogram, meanMs: number | null): StepMs {
  return {
    mean: roundOrNull(meanMs),
    p50: roundOrNull(histogram.quantile(0.5)),
    p90: roundOrNull(histogram.quantile(0.9)),
    p99: roundOrNull(histogram.quantile(0.99)),
  };
}

export interface SummaryInput {
  job: JobSnapshot;
  views: RankView[];
  analysis: JobAnalysis;
  gpus: SummaryGpu[];
  at: number;
  /** --gpu-hour-price, to price the lost time; null: not priced. */
  gpuHourPrice?: number | null;
}

/** "This job lost 3.1 GPU-hours (22%), most to input starvation (2.5 h), $7.75 at $2.50 a GPU-hour." */
export function wasteSentence(waste: Waste): string | null {
  const top = waste.by_cause[0];
  if (!top || waste.lost_share === null || waste.lost_gpu_seconds < 1) return null;
  const hours = (s: number) => (s >= 360 ? `${(s / 3600).toFixed(1)} GPU-hours` : s >= 60 ? `${(s / 60).toFixed(1)} GPU-minutes` : `${s.toFixed(0)} GPU-seconds`);
  const cost = waste.lost_cost === null ? '' : `, ${waste.lost_cost.toFixed(2)} at ${waste.price_per_gpu_hour} a GPU-hour`;
  return `This job lost ${hours(waste.lost_gpu_seconds)} (${Math.round(waste.lost_share * 100)}% of its GPU time), most to ${WASTE_WORDS[top.cause]} (${hours(top.gpu_seconds)})${cost}.`;
}

/** "4 min 2 s", "1 h 3 min", "12.5 s". */
export function durationText(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

/** The stop a summary leads with: the longest hang, else the longest stop. */
export function leadingStop(stops: readonly SummaryStop[] | undefined): SummaryStop | null {
  const sorted = [...(stops ?? [])].sort((a, b) => Number(b.verdict === 'hung') - Number(a.verdict === 'hung') || b.seconds - a.seconds);
  return sorted[0] ?? null;
}

/** "Hung at step 149 for 4 min 2 s (96% of the wall time): rank 1 stopped in …; rank 0 waited in …." */
export function stopSentence(stop: SummaryStop): string {
  const share = stop.wall_share === null ? '' : ` (${Math.round(stop.wall_share * 100)}% of the wall time)`;
  const who = `Rank${stop.culprits.length === 1 ? '' : 's'} ${rankList(stop.culprits)}`;
  const head =
    stop.verdict === 'hung'
      ? `Hung at step ${stop.step} for ${durationText(stop.seconds)}${share}`
      : stop.verdict === 'stalled'
        ? `${who} stalled at step ${stop.step} for ${durationText(stop.seconds)}${share}`
        : `${who} gone after step ${stop.step}`;
  return `${head}${stop.text ? `: ${stop.text}` : ''}.`;
}

export function headline(verdict: Verdict, cause: Cause, share: number | null, evidence: Evidence | null, steps: number, limiters: readonly LimiterCost[], stopped = false, mfu: SummaryMfu | null = null): string {
  if (steps === 0) return 'No steps were received.';
  const name = verdict;
  const held = share === null ? '' : ` for ${Math.round(share * 100)}% of ${stopped ? 'its stepping time' : 'the job'}`;
  // "Compute-bound at 31% MFU (bf16 peak 989 TFLOP/s, H100 SXM) for 97% of the job: …"
  const because = `${cause ? ` (${cause})` : ''}${mfu?.mfu != null ? ` at ${mfu.text}` : ''}`;
  const rule = evidence ? `: ${evidence.rule}` : '';
  const also = alsoCosting(limiters, verdict);
  return `${name[0]!.toUpperCase()}${name.slice(1)}${because}${held}${rule}.${also ? ` ${also}` : ''}`;
}

function dedupe(recommendations: Recommendation[]): Recommendation[] {
  const seen = new Set<string>();
  return recommendations.filter((r) => (seen.has(r.id) ? false : (seen.add(r.id), true)));
}

/** The end-of-job summary. Pure: it reads the job's state and analysis as of `at`. */
export function buildSummary({ job, views, analysis, gpus, at, gpuHourPrice = null }: SummaryInput): Summary {
  const totals = emptySums();
  const histogram = new LogHistogram();
  for (const view of views) {
    mergeSums(totals, view.totals);
    histogram.merge(view.histogram);
  }
  const endedAt = at;
  const timeline = analysis.timeline(endedAt);
  const dominant = analysis.dominant(endedAt);
  const current = analysis.jobVerdict()?.judgement ?? null;
  const verdict: Verdict = dominant?.verdict ?? current?.verdict ?? 'idle';
  // The dominant verdict's own cause, even when it has none: not the cause of whatever held last.
  const cause: Cause = dominant ? dominant.cause : (current?.cause ?? null);
  // The time it stepped, judged on its steps: a stop (hung, stalled, gone) is reported on its own.
  const activeSeconds = timeline.filter((s) => s.verdict !== 'warming-up' && s.verdict !== 'idle' && !isStop(s.verdict)).reduce((a, s) => a + s.end_s - s.start_s, 0);
  const share = dominant && activeSeconds > 0 ? round(dominant.seconds / activeSeconds, 3) : null;
  const evidence = dominant?.judgement?.evidence ?? current?.evidence ?? null;
  const straggler = analysis.mainStraggler();
  const stops = summaryStops(analysis, job.started_at, endedAt, job.duration_s);
  const lead = leadingStop(stops);
  const limiters = analysis.limiters();
  const recommendations = dedupe([
    ...(lead?.recommendations ?? []),
    ...(dominant?.judgement?.recommendations ?? current?.recommendations ?? []),
    ...timeline.flatMap((segment) => (segment.verdict === verdict ? [] : (analysis.dominantJudgement(segment.verdict)?.recommendations ?? []))),
  ]);
  const ranks = views
    .slice()
    .sort((a, b) => a.rank - b.rank)
    .map((view): RankSummary => {
      const snapshot = job.ranks.find((r) => r.rank === view.rank)!;
      const rankDominant = analysis.dominant(endedAt, view.rank);
      const held = analysis.rankVerdict(view.rank)?.judgement;
      return {
        rank: view.rank,
        local_rank: view.localRank,
        host: snapshot.host,
        steps: snapshot.steps,
        breakdown: roundBreakdown(breakdownOf(view.totals)),
        step_ms: stepMs(view.histogram, view.totals.steps ? view.totals.durNs / view.totals.steps / 1e6 : null),
        verdict: rankDominant?.verdict ?? held?.verdict ?? 'idle',
        cause: rankDominant ? rankDominant.cause : (held?.cause ?? null),
        straggler: straggler?.rank === view.rank,
      };
    });
  const totalDur = totals.durNs;
  const summaryGpus = gpus.map((gpu) => withOtherProcesses(gpu, new Set(job.ranks.map((r) => r.pid))));
  const mfu = summaryMfu(job, ranks, summaryGpus);
  const usual = headline(verdict, cause, share, evidence, job.steps, limiters, lead !== null, mfu);
  // Throughput while it stepped: a stop is in the wall time, not in what the job could do.
  const stoppedMs = analysis.stopEpisodes().reduce((total, episode) => total + (episode.verdict === 'stalled' ? 0 : Math.max(0, Math.min(episode.until, endedAt) - episode.since)), 0);
  const steppingS = Math.max(0, job.duration_s - stoppedMs / 1000);
  return {
    schema: SUMMARY_SCHEMA,
    job: job.job,
    started_at: new Date(job.started_at).toISOString(),
    ended_at: new Date(endedAt).toISOString(),
    end_reason: job.end_reason,
    // A stop leads; what the job was bound by while it stepped follows, where it held a verdict at all.
    headline: lead ? (dominant ? `${stopSentence(lead)} Before it, ${usual[0]!.toLowerCase()}${usual.slice(1)}` : `${stopSentence(lead)} It stopped before its first verdict.`) : usual,
    verdict,
    cause,
    verdict_share: share,
    steps: job.steps,
    lost: job.dropped,
    duplicates: job.duplicates,
    duration_s: round(job.duration_s, 2),
    world_size: job.world_size,
    breakdown: roundBreakdown(breakdownOf(totals)),
    gpu_breakdown:
      totals.gpuTimedSteps && totalDur
        ? { h2d: round(totals.gpuH2dNs / totalDur, 4), compute: round(totals.gpuComputeNs / totalDur, 4), idle: round(totals.gpuIdleNs / totalDur, 4) }
        : null,
    step_ms: stepMs(histogram, totals.steps ? totals.durNs / totals.steps / 1e6 : null),
    samples_per_s: totals.samplesSteps && steppingS > 0 ? round(totals.samples / steppingS, 1) : null,
    ranks,
    straggler,
    timeline,
    gpus: summaryGpus,
    env: (job.ranks[0]?.env as Env | undefined) ?? {},
    recommendations,
    evidence,
    samples_per_step: totals.samplesSteps ? round(totals.samples / totals.samplesSteps, 3) : null,
    waste: analysis.wasted(gpuHourPrice),
    ...(stops.length ? { stops } : {}),
    limiters,
    causes: analysis.foldedFixes(verdict),
    ...(mfu ? { mfu } : {}),
  };
}

/** The run's stops as its summary reports them, cut at its end. */
function summaryStops(analysis: JobAnalysis, startedAt: number, endedAt: number, durationS: number): SummaryStop[] {
  return analysis.stopEpisodes().map((episode) => {
    const seconds = round(Math.max(0, Math.min(episode.until, endedAt) - episode.since) / 1000, 1);
    return {
      verdict: episode.verdict,
      cause: episode.cause as SummaryStop['cause'],
      since_s: round(Math.max(0, episode.since - startedAt) / 1000, 2),
      seconds,
      wall_share: durationS > 0 ? round(Math.min(1, seconds / durationS), 3) : null,
      step: episode.step,
      culprits: episode.culprits,
      waiting: episode.waiting,
      waits_in: episode.waits_in,
      text: episode.detail,
      where: episode.where,
      gpu_seconds: round(seconds * episode.idle_ranks, 1),
      recommendations: episode.recommendations,
      ...(episode.dumps ? { dumps: episode.dumps } : {}),
    };
  });
}

