import { deviceHint, matchGpu } from './analysis/gpu-match.js';
import { JobAnalysis, type RankInput, type VerdictEvent } from './analysis/job-analysis.js';
import { buildSummary, type GpuSummary, type Summary } from './analysis/summary.js';
import { compare } from './analysis/compare.js';
import { describeAggregate } from './counters/gpu-aggregate.js';
import type { World } from './store/replay.js';
import { windowFor } from './state.js';

export interface AnalystOptions {
  windowMs: number;
  holdMs: number;
  baseline: Summary | null;
}

/** Runs the verdict rules over every live job on each tick, and writes up a job when it ends. */
export class Analyst {
  private readonly analyses = new Map<string, JobAnalysis>();

  constructor(
    private readonly world: World,
    readonly options: AnalystOptions,
  ) {}

  tick(at: number): VerdictEvent[] {
    const events: VerdictEvent[] = [];
    for (const job of this.analyses.keys()) if (this.world.jobs.startedAt(job) === null) this.analyses.delete(job);
    for (const { job } of this.world.jobs.liveJobs()) {
      events.push(...this.analysisOf(job)!.evaluate(this.rankInputs(job, at), at));
    }
    return events;
  }

  analysisOf(jobId: string): JobAnalysis | null {
    let analysis = this.analyses.get(jobId);
    if (!analysis) {
      const startedAt = this.world.jobs.startedAt(jobId);
      if (startedAt === null) return null;
      analysis = new JobAnalysis(jobId, startedAt, this.options.holdMs);
      this.analyses.set(jobId, analysis);
    }
    return analysis;
  }

  private hostCores(): number | null {
    const cores = this.world.counters.latestHost()?.cpuPerCorePct.length;
    return cores ? cores : null;
  }

  private rankInputs(jobId: string, at: number): RankInput[] {
    const hostCores = this.hostCores();
    return this.world.jobs.rankViews(jobId).map((view) => {
      const last = view.lastStepEndAt();
      return {
        rank: view.rank,
        window: windowFor(view, this.world.counters, at, this.options.windowMs),
        context: { totalSteps: view.steps(), sinceLastStepMs: last === null ? null : Math.max(0, at - last), env: view.env, hostCores },
      };
    });
  }

  /** The GPUs the job's ranks ran on, with their figures over the job. */
  private gpusOf(jobId: string, from: number, to: number): GpuSummary[] {
    const gpus = this.world.counters.knownGpus();
    const byKey = new Map<string, GpuSummary>();
    for (const view of this.world.jobs.rankViews(jobId)) {
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

  summary(jobId: string, at: number): Summary | null {
    const job = this.world.jobs.jobSnapshot(jobId, at);
    const analysis = this.analysisOf(jobId);
    if (!job || !analysis) return null;
    const summary = buildSummary({
      job,
      views: this.world.jobs.rankViews(jobId),
      analysis,
      gpus: this.gpusOf(jobId, Date.parse(job.started_at), at),
      at,
    });
    if (this.options.baseline) summary.baseline = compare(this.options.baseline, summary);
    return summary;
  }
}
