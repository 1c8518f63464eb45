import type { StepWindow } from '../analysis/window.js';
import { deviceHint, matchGpu } from '../analysis/gpu-match.js';
import { JobAnalysis, type RankInput, type VerdictEvent } from '../analysis/job-analysis.js';
import { buildSummary } from '../analysis/summary.js';
import type { SummaryGpu, Summary } from '../protocol/summary.js';
import { RunSeries, SERIES_LAG_MS, type SeriesGpu } from '../analysis/summary-series.js';
import { STALL_DEFAULTS, type StallConfig } from '../analysis/stall.js';
import { percentile, sortedAscending } from '../store/ring.js';
import type { KnownGpu } from '../counters/counter-store.js';
import { describeAggregate } from '../counters/gpu-aggregate.js';
import { jobStart } from '../store/job-snapshot.js';
import type { World } from './world.js';
import { WARMUP } from '../analysis/warmup.js';

export interface AnalystOptions {
  holdMs: number;
  /** --gpu-hour-price, to price the waste in summaries. */
  gpuHourPrice?: number | null;
  /** --stall-steps and --stall-floor. */
  stall?: StallConfig;
  /** --stack-dumps. */
  stackDumps?: boolean;
}

/** Steps whose median is a rank's recent step time, for its stall threshold. */
const RECENT_FOR_P50 = 64;

/** Each rank's window at one tick, by job and rank. */
export type Windows = Map<string, Map<number, StepWindow>>;

/** Runs the verdict rules over every live job at each tick, and writes up a job's summary. */
export class Analyst {
  private readonly analyses = new Map<string, JobAnalysis>();

  constructor(
    private readonly world: World,
    readonly options: AnalystOptions,
  ) {}

  tick(at: number, windows: Windows): VerdictEvent[] {
    const events: VerdictEvent[] = [];
    for (const job of this.analyses.keys()) if (this.world.jobs.runOf(job) === null) this.analyses.delete(job);
    for (const job of this.world.jobs.liveJobs()) {
      events.push(...this.analysisOf(job)!.evaluate(this.rankInputs(job, at, windows.get(job) ?? new Map()), at, this.world.jobs.job(job)?.worldSize));
      this.seriesOf(job)?.advance(at - SERIES_LAG_MS, this.world.history.views(job), this.jobGpus(job), this.world.counters);
    }
    return events;
  }

  /**
   * The series of the job's current run, for its summary's charts (a new run starts a new one, from
   * the run's start). Held by the run's analysis, so that it is checkpointed with it.
   */
  private seriesOf(jobId: string): RunSeries | null {
    const job = this.world.jobs.job(jobId);
    const analysis = this.analysisOf(jobId);
    if (!job || !analysis) return null;
    analysis.series ??= new RunSeries(job.run, jobStart(job));
    analysis.series.startNoLaterThan(jobStart(job));
    return analysis.series;
  }

  /** The GPUs the job's ranks run on, each once. */
  private jobGpus(jobId: string): SeriesGpu[] {
    const known = this.world.counters.knownGpus();
    const byKey = new Map<string, KnownGpu>();
    for (const view of this.world.history.views(jobId)) {
      const match = matchGpu(deviceHint(view.env, view.localRank), known);
      if (match) byKey.set(match.gpu.key, match.gpu);
    }
    return [...byKey.values()];
  }

  /** The analysis of the job's current run (a new run starts a new one). */
  analysisOf(jobId: string): JobAnalysis | null {
    const job = this.world.jobs.job(jobId);
    if (!job) return null;
    let analysis = this.analyses.get(jobId);
    if (!analysis || analysis.run !== job.run) {
      analysis = new JobAnalysis(jobId, job.run, jobStart(job), this.options.holdMs);
      this.analyses.set(jobId, analysis);
    }
    // The start moves earlier when steps the hook buffered before the sidecar came arrive.
    analysis.startedAt = jobStart(job);
    analysis.stallConfig = this.options.stall ?? STALL_DEFAULTS;
    analysis.stackDumps = this.options.stackDumps === true;
    return analysis;
  }

  /** Every analysis held, for a checkpoint. */
  all(): JobAnalysis[] {
    return [...this.analyses.values()];
  }

  restore(analysis: JobAnalysis): void {
    this.analyses.set(analysis.jobId, analysis);
  }

  private hostCores(): number | null {
    const cores = this.world.counters.latestHost()?.cpuPerCorePct.length;
    return cores ? cores : null;
  }

  private rankInputs(jobId: string, at: number, windows: Map<number, StepWindow>): RankInput[] {
    const hostCores = this.hostCores();
    return this.world.history.views(jobId).flatMap((view) => {
      const window = windows.get(view.rank);
      if (!window) return [];
      const last = view.lastStepEndAt();
      const recent = sortedAscending(view.recent().slice(-RECENT_FOR_P50).map((step) => step.record.durNs / 1e6));
      const stall = { rank: view.rank, liveness: view.liveness(), lastStepEndAt: last, stepP50Ms: recent.length ? percentile(recent, 50) : null, worldSize: this.world.jobs.job(jobId)?.worldSize ?? 1 };
      const totalSteps = view.steps();
      // Only while it may still be warming up: steady steps for a few seconds end it (warmup.ts).
      const recentStepMs = totalSteps < WARMUP.steps ? view.recent().slice(-WARMUP.steps).map((step) => step.record.durNs / 1e6) : undefined;
      return [{ rank: view.rank, window, stall, context: { totalSteps, ...(recentStepMs ? { recentStepMs } : {}), sinceLastStepMs: last === null ? null : Math.max(0, at - last), env: view.env, hostCores } }];
    });
  }

  /** The GPUs the job's ranks ran on, with their figures over the job. */
  private gpusOf(jobId: string, from: number, to: number): SummaryGpu[] {
    const gpus = this.world.counters.knownGpus();
    const byKey = new Map<string, SummaryGpu>();
    for (const view of this.world.history.views(jobId)) {
      const match = matchGpu(deviceHint(view.env, view.localRank), gpus);
      if (!match) continue;
      const known = match.gpu;
      const entry = byKey.get(known.key) ?? {
        index: known.index,
        uuid: known.uuid,
        name: known.name,
        ranks: [],
        ...describeAggregate(this.world.counters.gpuAggregate(known.key, from, to)),
      };
      entry.ranks.push(view.rank);
      byKey.set(known.key, entry);
    }
    return [...byKey.values()].sort((a, b) => a.index - b.index);
  }

  /** The job's summary as of `at`; `series: false` leaves the charts' series out (a live comparison needs none). */
  summary(jobId: string, at: number, options: { series?: boolean } = {}): Summary | null {
    const analysis = this.analysisOf(jobId);
    const job = this.world.jobs.jobSnapshot(jobId, at, analysis?.stopped() ?? false);
    if (!job || !analysis) return null;
    const from = job.started_at;
    const end = from + job.duration_s * 1000;
    const summary = buildSummary({
      job,
      views: this.world.history.views(jobId),
      analysis,
      gpus: this.gpusOf(jobId, from, end),
      at: end,
      gpuHourPrice: this.options.gpuHourPrice ?? null,
    });
    if (options.series !== false) {
      // On a copy, counted to the run's last step: the live series keeps its own pace.
      const series = this.seriesOf(jobId)?.clone();
      series?.advance(end + 1, this.world.history.views(jobId), this.jobGpus(jobId), this.world.counters, true);
      const described = series?.describe(end + 1, summary.straggler?.rank ?? null);
      if (described) summary.series = described;
    }
    return summary;
  }
}
