import type { StepWindow } from '../analysis/window.js';
import { deviceHint, matchGpu, type GpuMatch } from '../analysis/gpu-match.js';
import type { VerdictEvent } from '../analysis/job-analysis.js';
import { round } from '../model/round.js';
import type { StreamHistory } from '../protocol/stream.js';
import type { Summary } from '../protocol/summary.js';
import type { Judgement } from '../analysis/verdict.js';
import { rankWindow } from '../analysis/window.js';
import type { CounterStore, KnownGpu } from '../counters/counter-store.js';
import type { ComputeApp } from '../counters/compute-apps.js';
import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { DurationCounts } from '../store/duration-counts.js';
import type { JobSnapshot, RankSnapshot } from '../store/job-snapshot.js';
import type { RankView } from '../store/rank-history.js';
import type { StepSums } from '../store/step-buckets.js';
import type { JobStopState, RankStallState } from '../protocol/stall-state.js';
import type { JobState, NodeInventory, RankState, VerdictState } from '../protocol/state.js';
import type { JobRegression, RegressionChange } from './runs.js';
import type { RunsReference } from '../protocol/runs.js';

/**
 * What the engine publishes at each tick: one immutable reading of everything the outputs show.
 * `/v1/state`, the stream, `/metrics` and the summaries only read it; none of them reads the engine.
 */

/**
 * The snapshot's shapes are the state's (src/protocol/state.ts) with their times as ms since the
 * epoch: times stay numbers in the core, and only outputs/state.ts formats them as ISO strings.
 */

/** A verdict in force: the state's VerdictState, `since` in ms. */
export type SnapshotVerdict = Omit<VerdictState, 'since' | 'pending'> & {
  since: number;
  /** A different verdict waiting out its hold time, if any. */
  pending: (Omit<NonNullable<VerdictState['pending']>, 'since'> & { since: number }) | null;
};

/** A job's stop: the state's JobStopState, `since` in ms. */
export type SnapshotStop = Omit<JobStopState, 'since'> & { since: number };

/** A rank: the store's description of it with what the analysis adds. */
export type SnapshotRank = RankSnapshot &
  Pick<RankState, 'straggler' | 'mfu'> & {
    window: StepWindow;
    verdict: SnapshotVerdict | null;
    /** Whether it steps, and where it is if it stopped (null where it was not judged: an ended run). */
    stall: RankStallState | null;
  };

/** A job: the store's description of it with what the analysis adds (and the sidecar's captures, absent in a replay). */
export type SnapshotJob = Omit<JobSnapshot, 'ranks'> &
  Pick<JobState, 'straggler' | 'timeline' | 'baseline' | 'waste' | 'captures'> & {
    ranks: SnapshotRank[];
    verdict: SnapshotVerdict | null;
    /** While the job does not step (or the stop an ended run ended in): on whom it waits. */
    stop: SnapshotStop | null;
  };

/** Per rank, what /metrics reads beyond the state: running totals and the step-duration buckets. */
export interface RankTotals {
  job: string;
  rank: number;
  totals: StepSums;
  durations: DurationCounts;
  gpu: GpuMatch | null;
}

/** Per-slice figures for sparklines, oldest first: the stream's history with its start and slice in ms (outputs/stream.ts writes them). */
export type HistorySeries = Omit<StreamHistory, 'from' | 'slice_s'> & { from: number; sliceMs: number };

export interface EndedRun {
  job: string;
  run: number;
  summary: Summary;
}

export interface EngineSnapshot {
  at: number;
  /** The GPU counter source as journaled (null before the sidecar chose one). */
  source: { gpu: string; reason: string } | null;
  /** The node's inventory as journaled at start; null before it is read (and in recordings before it). */
  node: NodeInventory | null;
  jobs: SnapshotJob[];
  /** `processes`: its compute processes at the latest nvidia-smi reading (null where none was read). */
  gpus: Array<{ known: KnownGpu; recent: GpuSample[]; processes: ComputeApp[] | null }>;
  host: HostSample | null;
  ranks: RankTotals[];
  history: HistorySeries;
  /** Verdict changes decided at this tick. */
  events: VerdictEvent[];
  /** Runs that ended at this tick (or at a stop), with their summaries. */
  ended: EndedRun[];
  /** Entries applied, and those the engine could not use, by reason. */
  entries: { applied: number; skipped: Record<string, number> };
  /** Live jobs compared with their reference, each with the regression holding and its onset (src/engine/runs.ts). */
  regressions: readonly JobRegression[];
  /** Regressions that began or ended at this tick. */
  regressionChanges: readonly RegressionChange[];
  /** The jobs with their references journaled, each with what its running run was last compared with (`run` and `reference` null before its first comparison). */
  references: ReadonlyArray<{ job: string; run: number | null; reference: RunsReference | null }>;
}

export function snapshotVerdict(held: { judgement: Judgement; since: number; pending?: { judgement: Judgement; since: number } | null } | null): SnapshotVerdict | null {
  if (!held) return null;
  const { judgement } = held;
  return {
    verdict: judgement.verdict,
    cause: judgement.cause,
    since: held.since,
    evidence: judgement.evidence,
    recommendations: judgement.recommendations,
    limiters: judgement.limiters,
    causes: judgement.causes,
    pending: held.pending ? { verdict: held.pending.judgement.verdict, cause: held.pending.judgement.cause, since: held.pending.since } : null,
  };
}

/** A window holds at least this many steps where the last minute has them: slow steps get longer windows. */
const MIN_WINDOW_STEPS = 5;
const MAX_WINDOW_MS = 60_000;

/** The window of one rank ending at `at`: its steps matched with its GPU's, the host's and its process's counters. */
export function windowFor(view: RankView, counters: CounterStore<HostSample>, at: number, windowMs: number, jobPids: ReadonlySet<number> = new Set()): StepWindow {
  let span = windowMs;
  while (span < MAX_WINDOW_MS && view.buckets.between(at - span, at).steps < MIN_WINDOW_STEPS) span = Math.min(MAX_WINDOW_MS, span * 2);
  const from = at - span;
  const match = matchGpu(deviceHint(view.env, view.localRank), counters.knownGpus());
  return rankWindow({
    from,
    to: at,
    steps: view.buckets.between(from, at),
    slices: view.buckets.slicesBetween(from, at),
    stepMs: view
      .recent()
      .filter((step) => step.endAt >= from && step.endAt < at)
      .map((step) => step.record.durNs / 1e6),
    gpu: match ? { samples: counters.gpuSamples(match.gpu.key, from, at), matchedBy: match.by } : null,
    apps: counters.appsAt(at)?.apps ?? null,
    jobPids,
    host: counters.hostSamples(from, at),
    process: view.process(),
    memory: view.memory(),
  });
}


function meanPerSlice(samples: GpuSample[], from: number, sliceMs: number, slices: number, pick: (s: GpuSample) => number | null): Array<number | null> {
  const total = new Array<number>(slices).fill(0);
  const count = new Array<number>(slices).fill(0);
  for (const sample of samples) {
    const value = pick(sample);
    const slice = Math.floor((sample.at - from) / sliceMs);
    if (value === null || !Number.isFinite(value) || slice < 0 || slice >= slices) continue;
    total[slice]! += value;
    count[slice]! += 1;
  }
  return total.map((sum, i) => (count[i] ? round(sum / count[i]!, 1) : null));
}

/**
 * What sparklines need over [from, to): each rank's mean step time and each GPU's utilization and
 * SM clock (percent of its maximum) per slice. Ranks with no step since `from` are left out.
 */
export function historySeries(views: RankView[], counters: CounterStore<HostSample>, from: number, to: number, sliceMs: number): HistorySeries {
  const slices = Math.max(0, Math.ceil((to - from) / sliceMs));
  const ranks = views
    .filter((view) => (view.lastStepEndAt() ?? -Infinity) >= from)
    .map((view) => ({
      job: view.job,
      rank: view.rank,
      step_ms: view.buckets.meanStepMs(from, to, sliceMs),
    }));
  const gpus = counters.knownGpus().map((gpu) => {
    const samples = counters.gpuSamples(gpu.key, from, to);
    return {
      index: gpu.index,
      uuid: gpu.uuid,
      key: gpu.key,
      util: meanPerSlice(samples, from, sliceMs, slices, (s) => s.utilGpu),
      sm_clock_pct: meanPerSlice(samples, from, sliceMs, slices, (s) => (s.smClockMHz !== null && s.smClockMaxMHz ? (100 * s.smClockMHz) / s.smClockMaxMHz : null)),
    };
  });
  return { from, sliceMs, ranks, gpus };
}

/**
 * Deeply frozen, so that no reader can change what the others read. Walked without Object.values,
 * which made an array of every object's values at every tick (a snapshot is plain data: arrays,
 * and objects whose fields are all their own).
 */
export function freeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    if (Array.isArray(value)) for (let i = 0; i < value.length; i++) freeze(value[i]);
    else for (const key in value) freeze(value[key]);
  }
  return value;
}
