import type { StepWindow } from '../analysis/window.js';
import { withNode } from '../analysis/summary.js';
import { deviceHint, matchGpu } from '../analysis/gpu-match.js';
import { JobAnalysis } from '../analysis/job-analysis.js';
import { STALL_DEFAULTS, type StallConfig } from '../analysis/stall.js';
import { appsOn, CounterStore } from '../counters/counter-store.js';
import { LimitError, type AdmissionLimits } from '../store/admission.js';
import { SessionTable, UnknownSessionError } from '../store/session-table.js';
import { CHECKPOINT_FORMAT, parseCheckpoint, type Checkpoint, type EngineStats, type RunsCheckpoint } from './checkpoint.js';
import { Analyst, type Windows } from './analyst.js';
import type { EngineConfig, EntryType, JournalEntry } from './entries.js';
import { freeze, historySeries, snapshotVerdict, windowFor, type EndedRun, type EngineSnapshot, type HistorySeries, type RankTotals, type SnapshotJob } from './snapshot.js';
import { addPid, applyData, emptyWorld, worldOf, type World } from './world.js';
import { jobStopState, rankStallState } from './stops.js';
import { DEFAULT_REGRESSION_HOLD_MS, DEFAULT_REGRESSION_THRESHOLD_PCT, RunComparisons, type RegressionChange, type RunsConfig } from './runs.js';
import { mfuOf } from '../analysis/mfu.js';
import type { Mfu, NodeInventory } from '../protocol/state.js';

/** A rank's MFU over its window, on the GPU matched to it. */
function rankMfu(env: Readonly<Record<string, unknown>>, window: StepWindow): { mfu?: Mfu } {
  const mfu = mfuOf(env, window.gpu?.name ?? null, window.step_ms_mean);
  return mfu ? { mfu } : {};
}

/** Jobs and ranks per job the engine keeps: set where the engine is built, the same the ingest refuses beyond. */
export type EngineLimits = AdmissionLimits;

const NO_PIDS: ReadonlySet<number> = new Set();

export const DEFAULT_CONFIG: EngineConfig = { windowMs: 4_000, holdMs: 2_000, endGraceMs: 10_000 };

/** The regression rule's settings as journaled (the defaults where a journal from before them has none). */
const runsConfig = (config: EngineConfig): RunsConfig => ({
  thresholdPct: config.regressionThresholdPct ?? DEFAULT_REGRESSION_THRESHOLD_PCT,
  holdMs: config.regressionHoldMs ?? DEFAULT_REGRESSION_HOLD_MS,
});

/** The stall rule's settings as journaled (the defaults where a journal from before them has none). */
const stallConfig = (config: EngineConfig): StallConfig => ({ steps: config.stallSteps ?? STALL_DEFAULTS.steps, floorMs: config.stallFloorMs ?? STALL_DEFAULTS.floorMs });

/** The span of the sparkline history a snapshot carries, in slices of a second. */
export const HISTORY_MS = 300_000;
export const HISTORY_SLICE_MS = 1_000;

/**
 * The sidecar's state machine. `apply` takes every input as a journal entry and never throws;
 * a `tick` entry runs the analysis and publishes one immutable snapshot. Given the same entries it
 * reaches the same state, so a replayed journal gives what the live sidecar had. Pure: time comes in
 * with the entries.
 */
export class Engine {
  readonly world: World;
  readonly analyst: Analyst;
  /** Each run against its reference: comparisons and regressions (src/engine/runs.ts). */
  readonly runs: RunComparisons;
  config: EngineConfig;
  readonly stats: EngineStats = { applied: 0, skipped: {} };
  /**
   * While replaying, ticks run the analysis but publish no snapshot (only the summaries of runs that
   * end): a day of ticks replays in seconds. Set it back and `publishNow` when the replay is done.
   */
  replaying = false;
  private source: { gpu: string; reason: string } | null = null;
  /** The node's inventory, once journaled; null in recordings before it (their summaries have no `node`). */
  private node: NodeInventory | null = null;
  private latest: EngineSnapshot;

  /** `world`: one loaded from a checkpoint, bound by the limits it was loaded with; else an empty one bound by `limits`. */
  constructor(options: { config?: EngineConfig; world?: World; limits?: EngineLimits; runs?: RunsCheckpoint } = {}) {
    this.config = options.config ?? DEFAULT_CONFIG;
    this.world = options.world ?? emptyWorld(options.limits ?? null);
    this.analyst = new Analyst(this.world, { holdMs: this.config.holdMs, stall: stallConfig(this.config) });
    this.runs = options.runs ? RunComparisons.load(options.runs, runsConfig(this.config)) : new RunComparisons(runsConfig(this.config));
    this.latest = this.publish(0, [], []);
  }

  /** The snapshot of the latest tick. */
  snapshot(): EngineSnapshot {
    return this.latest;
  }

  /** Whether entries were applied since the latest snapshot (it does not show them yet); the tick or stop that published it is not one. */
  get changed(): boolean {
    return this.stats.applied > this.shownThrough;
  }

  /** Told of each entry applied that published nothing, by its kind: the tick schedule, which looks at nothing while nothing can change, looks then. */
  onChange: ((kind: EntryType) => void) | null = null;
  /** The entries applied when the latest snapshot was published, the one that published it included. */
  private shownThrough = 0;

  gpuSource(): { gpu: string; reason: string } | null {
    return this.source;
  }

  /** The whole state as plain data: a journal checkpoint. */
  toCheckpoint(): Checkpoint {
    return {
      format: CHECKPOINT_FORMAT,
      config: this.config,
      source: this.source,
      hookGpu: this.world.hookGpu,
      at: this.latest.at,
      jobs: this.world.jobs.dump(),
      counters: this.world.counters.dump(),
      analyses: this.analyst.all().map((analysis) => analysis.dump()),
      stats: this.stats,
      pids: [...this.world.pids].map(([job, pids]) => [job, [...pids]]),
      node: this.node,
      runs: this.runs.dump(),
    };
  }

  /**
   * An engine holding a checkpoint's state. Throws, with the reason, for anything that is not a
   * whole checkpoint of this version: it is checked whole before any of it is used, and the engine
   * is built apart, so a refused checkpoint leaves nothing half-loaded.
   */
  static fromCheckpoint(value: unknown, limits: EngineLimits | null = null): Engine {
    const checkpoint = parseCheckpoint(value);
    const world = worldOf(SessionTable.load(checkpoint.jobs, { limits }), CounterStore.load(checkpoint.counters), checkpoint.hookGpu);
    for (const [job, pids] of checkpoint.pids) for (const pid of pids) addPid(world.pids, job, pid);
    const engine = new Engine({ config: checkpoint.config, world, runs: checkpoint.runs });
    engine.source = checkpoint.source;
    engine.node = checkpoint.node;
    engine.stats.applied = checkpoint.stats.applied;
    Object.assign(engine.stats.skipped, checkpoint.stats.skipped);
    for (const analysis of checkpoint.analyses) engine.analyst.restore(JobAnalysis.load(analysis));
    engine.latest = engine.publish(checkpoint.at, [], []);
    engine.shownThrough = engine.stats.applied;
    return engine;
  }

  /** Applies one entry; returns the snapshot it published (ticks and stops), else null. */
  apply(entry: JournalEntry): EngineSnapshot | null {
    try {
      const published = this.applyOne(entry);
      this.stats.applied += 1;
      if (published !== null) this.shownThrough = this.stats.applied;
      else this.onChange?.(entry.t);
      return published;
    } catch (error) {
      const reason =
        error instanceof UnknownSessionError ? 'unknown-session' : error instanceof LimitError ? `limit-${error.limit}` : `${entry.t}: ${(error as Error).message}`.slice(0, 120);
      this.stats.skipped[reason] = (this.stats.skipped[reason] ?? 0) + 1;
      return null;
    }
  }

  private applyOne(entry: JournalEntry): EngineSnapshot | null {
    switch (entry.t) {
      case 'start':
        this.config = entry.config;
        this.analyst.options.holdMs = entry.config.holdMs;
        this.analyst.options.gpuHourPrice = entry.config.gpuHourPrice ?? null;
        this.analyst.options.stall = stallConfig(entry.config);
        this.analyst.options.stackDumps = entry.config.stackDumps === true;
        this.runs.config = runsConfig(entry.config);
        this.world.jobs.restarted(entry.at);
        return null;
      case 'node':
        this.node = entry.node;
        return null;
      case 'source':
        this.source = { gpu: entry.gpu, reason: entry.reason };
        this.world.hookGpu = entry.gpu === 'hook';
        return null;
      case 'reference':
        this.runs.reference({ job: entry.job, pinned: entry.pinned, past: entry.past });
        return null;
      case 'tick':
        return this.tick(entry.at);
      case 'stop':
        return this.stop(entry.at);
      default:
        applyData(this.world, entry);
        return null;
    }
  }

  private windows(at: number): Windows {
    const windows: Windows = new Map();
    for (const view of this.world.history.views()) {
      let byRank = windows.get(view.job);
      if (!byRank) windows.set(view.job, (byRank = new Map()));
      byRank.set(view.rank, windowFor(view, this.world.counters, at, this.config.windowMs, this.world.pids.get(view.job) ?? NO_PIDS));
    }
    return windows;
  }

  private tick(at: number): EngineSnapshot | null {
    const windows = this.windows(at);
    const events = this.analyst.tick(at, windows);
    const ended = this.world.jobs.settle(at, this.config.endGraceMs).flatMap((job) => this.runSummary(job, at));
    const changes = this.runs.tick({
      at,
      live: this.world.jobs.liveJobs(),
      runOf: (job) => this.world.jobs.runOf(job),
      judged: (job) => {
        const verdict = this.analyst.analysisOf(job)?.jobVerdict()?.judgement.verdict;
        return verdict !== undefined && verdict !== 'warming-up';
      },
      summary: (job) => this.analyst.summary(job, at, { series: false }),
    });
    if (this.replaying) {
      this.replayedAt = at;
      this.replayedEnded.push(...ended);
      return null;
    }
    this.latest = this.publish(at, events, ended, windows, changes);
    return this.latest;
  }

  private replayedAt = 0;
  private replayedEnded: EndedRun[] = [];
  /** Whether snapshots carry the sparkline history: see showHistory. */
  private historyShown = true;
  /** Snapshots published without it. */
  private readonly historyLeftOut = new WeakSet<EngineSnapshot>();

  /**
   * Whether the snapshots carry the sparkline history, which only viewers read (the stream's frames):
   * the sidecar turns it off while none is connected. Rebuilt at every tick from every GPU's and rank's
   * last 5 minutes, it was a third of an idle sidecar's CPU with 8 GPUs (issue 24, target 8). Turned on,
   * the latest snapshot gets it at once where it was left out, as of its time (at most a tick behind
   * what has been applied since), so a viewer's first frame carries all of it.
   */
  showHistory(shown: boolean): void {
    if (shown === this.historyShown) return;
    this.historyShown = shown;
    if (shown && this.historyLeftOut.has(this.latest)) this.latest = freeze({ ...this.latest, history: this.history(this.latest.at) });
  }

  private history(at: number): HistorySeries {
    const from = Math.floor(at / HISTORY_SLICE_MS) * HISTORY_SLICE_MS - HISTORY_MS + HISTORY_SLICE_MS;
    if (!this.historyShown) return { from, sliceMs: HISTORY_SLICE_MS, ranks: [], gpus: [] };
    return historySeries(this.world.history.views(), this.world.counters, from, at, HISTORY_SLICE_MS);
  }

  /** Publishes the state reached by a replay, with every run that ended during it. */
  publishNow(at = this.replayedAt): EngineSnapshot {
    this.replaying = false;
    this.latest = this.publish(at, [], this.replayedEnded);
    this.shownThrough = this.stats.applied;
    this.replayedEnded = [];
    return this.latest;
  }

  private stop(at: number): EngineSnapshot | null {
    const ended = this.world.jobs.endAll(at).flatMap((job) => this.runSummary(job, at));
    if (this.replaying) {
      this.replayedAt = at;
      this.replayedEnded.push(...ended);
      return null;
    }
    this.latest = this.publish(at, [], ended);
    return this.latest;
  }

  /** The summary of the job's current run as of `at` (none for a job not held), compared with its reference. */
  runSummary(job: string, at: number): EndedRun[] {
    const summary = this.analyst.summary(job, at);
    const run = this.world.jobs.runOf(job);
    if (!summary || run === null) return [];
    // A run still going (a replay's last word on it) is judged as of now, its live comparison kept going.
    const running = this.world.jobs.liveJobs().includes(job);
    const { comparison, regression } = running ? this.runs.judge(run, summary) : this.runs.finish(run, summary);
    const compared = { ...summary, ...(comparison ? { baseline: comparison } : {}), ...(regression ? { regression } : {}) };
    return [{ job, run, summary: withNode(compared, this.node) }];
  }

  /** Ended runs whose summaries were never written (the sidecar stopped first), to write them now. */
  unsummarized(at: number): EndedRun[] {
    return this.world.jobs.unsummarized().flatMap((job) => this.runSummary(job, at));
  }

  private publish(at: number, events: EngineSnapshot['events'], ended: EndedRun[], windows: Windows = this.windows(at), regressionChanges: RegressionChange[] = []): EngineSnapshot {
    const { jobs, history, counters } = this.world;
    const knownGpus = counters.knownGpus();
    const apps = counters.appsAt(at)?.apps ?? null;
    const views = history.views();
    const jobStates = jobs.snapshot(at, (job) => this.analyst.analysisOf(job)?.stopped() ?? false).map((job): SnapshotJob => {
      const analysis = this.analyst.analysisOf(job.job);
      const straggler = analysis?.straggler() ?? null;
      const jobWindows = windows.get(job.job);
      return {
        ...job,
        verdict: snapshotVerdict(analysis?.jobVerdict() ?? null),
        straggler,
        // An ended run's timeline stops at its last step.
        timeline: analysis?.timeline(job.ended ? job.started_at + job.duration_s * 1000 : at) ?? [],
        baseline: this.runs.comparisonOf(job.job, job.run, job.ended),
        waste: analysis?.wasted(this.config.gpuHourPrice ?? null) ?? null,
        stop: jobStopState(analysis?.stopEpisodes().at(-1), analysis?.stopped() ?? false, job.ended ? 0 : at),
        ranks: job.ranks.map((rank) => ({
          ...rank,
          // Every rank of the store has its window: `windows` covers every rank view.
          window: jobWindows!.get(rank.rank)!,
          verdict: snapshotVerdict(analysis?.rankVerdict(rank.rank) ?? null),
          straggler: straggler?.rank === rank.rank,
          stall: job.ended ? null : rankStallState(analysis?.rankStall(rank.rank) ?? null, this.world.jobs.procOf(job.job, rank.rank)),
          ...rankMfu(rank.env, jobWindows!.get(rank.rank)!),
        })),
      };
    });
    const ranks = views.map(
      (view): RankTotals => ({
        job: view.job,
        rank: view.rank,
        totals: { ...view.totals },
        durations: { ...view.durations, buckets: view.durations.buckets.slice() },
        gpu: matchGpu(deviceHint(view.env, view.localRank), knownGpus),
      }),
    );
    const snapshot = freeze({
      at,
      source: this.source,
      node: this.node,
      jobs: jobStates,
      gpus: knownGpus.map((known) => ({ known, recent: counters.gpuSamples(known.key, at - this.config.windowMs, at), processes: appsOn(apps, known) })),
      host: counters.latestHost(),
      ranks,
      history: this.history(at),
      events,
      ended,
      entries: { applied: this.stats.applied, skipped: { ...this.stats.skipped } },
      regressions: this.runs.regressions(),
      regressionChanges,
      references: this.runs.referenced(),
    });
    if (!this.historyShown) this.historyLeftOut.add(snapshot);
    return snapshot;
  }
}
