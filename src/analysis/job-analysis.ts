import { findStraggler, type Straggler } from '../model/straggler.js';
import { RunSeries, type SeriesDump } from './summary-series.js';
import { loadedJudgement, VerdictTracker, type TrackerDump, type VerdictChange } from './tracker.js';
import { judge, LIMITER_BARS, VERDICTS, type Cause, type Judgement, type RankContext, type Verdict } from './verdict.js';
import type { LimiterCost } from './limiters.js';
import { WasteLedger, type Waste, type WasteDump } from './waste.js';
import type { RankWindow } from './window.js';

/**
 * Live verdicts of one job: each rank judged on its window and held against flapping, the straggler
 * named, the job's verdict derived from its ranks', and the job's timeline kept. Pure: windows and
 * the time come in, verdicts and change events come out.
 */

export interface RankInput {
  rank: number;
  window: RankWindow;
  context: Omit<RankContext, 'current'>;
}

export interface VerdictEvent extends VerdictChange {
  job: string;
  /** null for the job's own verdict. */
  rank: number | null;
}

export interface TimelineSegment {
  start_s: number;
  end_s: number;
  verdict: Verdict;
  cause: Cause;
}

export interface AnalysisDump {
  jobId: string;
  run: number;
  startedAt: number;
  holdMs: number;
  ranks: Array<[number, TrackerDump]>;
  job: TrackerDump;
  changes: VerdictChange[];
  rankChanges: Array<[number, VerdictChange[]]>;
  lastOf: Array<[Verdict, Judgement]>;
  stragglerNow: Straggler | null;
  stragglerSeconds: Array<[number, { seconds: number; latest: Straggler }]>;
  lastAt: number | null;
  /** Absent in checkpoints written before the ledger existed. */
  waste?: WasteDump;
  /** The run's series (absent before checkpoints held it, or before its first tick: rebuilt from the step buckets then). */
  series?: SeriesDump;
}

/** Verdict changes kept per timeline (the job's, each rank's); a job that flaps for days keeps its latest. */
const MAX_CHANGES = 2_000;

const ACTIVE = (verdict: Verdict) => verdict !== 'warming-up' && verdict !== 'idle';

export class JobAnalysis {
  private ranks = new Map<number, VerdictTracker>();
  private job: VerdictTracker;
  private changes: VerdictChange[] = [];
  private rankChanges = new Map<number, VerdictChange[]>();
  /** The latest judgement seen for each verdict, for the summary's evidence. */
  private lastOf = new Map<Verdict, Judgement>();
  private stragglerNow: Straggler | null = null;
  private stragglerSeconds = new Map<number, { seconds: number; latest: Straggler }>();
  private lastAt: number | null = null;
  private waste = new WasteLedger();
  /**
   * The run's figures over time for its report's charts, made by the Analyst beside the verdicts
   * and kept here so that a checkpoint holds them with the rest of the run's analysis.
   */
  series: RunSeries | null = null;

  constructor(
    readonly jobId: string,
    readonly run: number,
    /** The job's start, which the job's timeline counts from (set again as earlier steps arrive). */
    public startedAt: number,
    private readonly holdMs = 2_000,
  ) {
    // The job's verdict is made of held rank verdicts: holding it again would only add delay.
    this.job = new VerdictTracker(0);
  }

  dump(): AnalysisDump {
    return {
      jobId: this.jobId,
      run: this.run,
      startedAt: this.startedAt,
      holdMs: this.holdMs,
      ranks: [...this.ranks.entries()].map(([rank, tracker]) => [rank, tracker.dump()]),
      job: this.job.dump(),
      changes: this.changes,
      rankChanges: [...this.rankChanges.entries()],
      lastOf: [...this.lastOf.entries()],
      stragglerNow: this.stragglerNow,
      stragglerSeconds: [...this.stragglerSeconds.entries()],
      lastAt: this.lastAt,
      waste: this.waste.dump(),
      ...(this.series ? { series: this.series.dump() } : {}),
    };
  }

  static load(dump: AnalysisDump): JobAnalysis {
    const analysis = new JobAnalysis(dump.jobId, dump.run, dump.startedAt, dump.holdMs);
    analysis.ranks = new Map(dump.ranks.map(([rank, tracker]) => [rank, VerdictTracker.load(tracker)]));
    analysis.job = VerdictTracker.load(dump.job);
    analysis.changes = dump.changes;
    analysis.rankChanges = new Map(dump.rankChanges);
    analysis.lastOf = new Map(dump.lastOf.map(([verdict, judgement]) => [verdict, loadedJudgement(judgement)]));
    analysis.stragglerNow = dump.stragglerNow;
    analysis.stragglerSeconds = new Map(dump.stragglerSeconds);
    analysis.lastAt = dump.lastAt;
    analysis.waste = WasteLedger.load(dump.waste);
    const series = dump.series === undefined ? null : RunSeries.load(dump.series);
    analysis.series = series && series.run === dump.run ? series : null;
    return analysis;
  }

  evaluate(inputs: RankInput[], at: number): VerdictEvent[] {
    const events: VerdictEvent[] = [];
    const judged: Array<{ rank: number; window: RankWindow; held: Judgement }> = [];
    const figures = inputs.map((input) => ({ rank: input.rank, commWaitShare: input.window.comm?.wait_share ?? null, stepMsMean: input.window.step_ms_mean }));
    // The job's own CPU on this host: every rank's training process and loader workers, where all are measured.
    const cores = inputs.map((input) => (input.window.process ? (input.window.process.cpu_main_cores ?? 0) + (input.window.process.cpu_workers_cores ?? 0) : null));
    const jobCpuCores = cores.length > 0 && cores.every((c) => c !== null) ? cores.reduce((a, b) => a! + b!, 0) : null;
    for (const input of inputs) {
      const tracker = this.trackerOf(input.rank);
      const peers = figures.filter((peer) => peer.rank !== input.rank);
      const judgement = judge(input.window, { ...input.context, current: tracker.current?.judgement.verdict ?? null, peers, jobCpuCores });
      const change = tracker.update(judgement, at);
      if (change) {
        this.rankChanges.set(input.rank, [...(this.rankChanges.get(input.rank) ?? []), change].slice(-MAX_CHANGES));
        events.push({ ...change, job: this.jobId, rank: input.rank });
      }
      judged.push({ rank: input.rank, window: input.window, held: tracker.current!.judgement });
      if (this.lastAt !== null && ACTIVE(judgement.verdict)) this.waste.add((at - this.lastAt) / 1000, judgement.evidence.lost, input.window.gpu?.power_w_mean ?? null, judgement.evidence.lost_low);
    }
    const active = judged.filter((r) => ACTIVE(r.held.verdict));
    this.stragglerNow = active.length >= 2 ? findStraggler(active) : null;
    if (this.stragglerNow && this.lastAt !== null) {
      const rank = this.stragglerNow.rank;
      const seconds = (this.stragglerSeconds.get(rank)?.seconds ?? 0) + (at - this.lastAt) / 1000;
      this.stragglerSeconds.set(rank, { seconds, latest: this.stragglerNow });
    }
    this.lastAt = at;
    const jobJudgement = this.jobJudgement(judged);
    if (jobJudgement) {
      this.lastOf.set(jobJudgement.verdict, jobJudgement);
      const change = this.job.update(jobJudgement, at);
      if (change) {
        this.changes.push(change);
        if (this.changes.length > MAX_CHANGES) this.changes.shift();
        events.push({ ...change, job: this.jobId, rank: null });
      }
    }
    return events;
  }

  private trackerOf(rank: number): VerdictTracker {
    let tracker = this.ranks.get(rank);
    if (!tracker) {
      tracker = new VerdictTracker(this.holdMs);
      this.ranks.set(rank, tracker);
    }
    return tracker;
  }

  /** The straggler's verdict where one holds the others back; else the verdict most ranks share. */
  private jobJudgement(judged: Array<{ rank: number; held: Judgement }>): Judgement | null {
    if (judged.length === 0) return null;
    if (this.stragglerNow) {
      const slow = judged.find((r) => r.rank === this.stragglerNow!.rank);
      if (slow) return slow.held;
    }
    const votes = new Map<Verdict, Judgement[]>();
    for (const r of judged.sort((a, b) => a.rank - b.rank)) votes.set(r.held.verdict, [...(votes.get(r.held.verdict) ?? []), r.held]);
    const [, winners] = [...votes.entries()].sort(([va, a], [vb, b]) => b.length - a.length || VERDICTS.indexOf(va) - VERDICTS.indexOf(vb))[0]!;
    return winners[0]!;
  }

  /** The latest judgement the job had with this verdict. */
  dominantJudgement(verdict: Verdict): Judgement | null {
    return this.lastOf.get(verdict) ?? null;
  }

  rankVerdict(rank: number) {
    const tracker = this.ranks.get(rank);
    if (!tracker?.current) return null;
    return { ...tracker.current, pending: tracker.candidate };
  }

  jobVerdict() {
    return this.job.current;
  }

  /** The limiters that cost the job at least 5% of its time so far, with their levels. */
  limiters(): LimiterCost[] {
    return this.waste.limiters(LIMITER_BARS);
  }

  /** GPU time lost so far, by cause, priced at `pricePerGpuHour` when given. */
  wasted(pricePerGpuHour: number | null): Waste {
    return this.waste.view(pricePerGpuHour);
  }

  straggler(): Straggler | null {
    return this.stragglerNow;
  }

  /** The rank named straggler for the most time, for how long, and why (as last said). */
  mainStraggler(): (Straggler & { seconds: number }) | null {
    let best: (Straggler & { seconds: number }) | null = null;
    for (const { seconds, latest } of this.stragglerSeconds.values()) if (!best || seconds > best.seconds) best = { ...latest, seconds: Math.round(seconds * 10) / 10 };
    return best;
  }

  /** The job's verdicts over time (or one rank's), from the job's start to `at`. */
  timeline(at: number, rank?: number): TimelineSegment[] {
    const changes = rank === undefined ? this.changes : (this.rankChanges.get(rank) ?? []);
    const toS = (t: number) => Math.round((t - this.startedAt) / 10) / 100;
    return changes.map((change, i) => ({
      start_s: Math.max(0, toS(change.since)),
      end_s: toS(i + 1 < changes.length ? changes[i + 1]!.since : at),
      verdict: change.to,
      cause: change.cause,
    }));
  }

  /** The verdict that held longest (leaving out warming-up and idle), with its main cause. */
  dominant(at: number, rank?: number): { verdict: Verdict; cause: Cause; seconds: number; judgement: Judgement | null } | null {
    const byVerdict = new Map<Verdict, Map<Cause, number>>();
    for (const segment of this.timeline(at, rank)) {
      if (!ACTIVE(segment.verdict)) continue;
      const causes = byVerdict.get(segment.verdict) ?? new Map<Cause, number>();
      causes.set(segment.cause, (causes.get(segment.cause) ?? 0) + segment.end_s - segment.start_s);
      byVerdict.set(segment.verdict, causes);
    }
    let best: { verdict: Verdict; cause: Cause; seconds: number; judgement: Judgement | null } | null = null;
    for (const [verdict, causes] of byVerdict) {
      const seconds = [...causes.values()].reduce((a, b) => a + b, 0);
      const [cause] = [...causes.entries()].sort((a, b) => b[1] - a[1])[0]!;
      if (!best || seconds > best.seconds) best = { verdict, cause, seconds, judgement: rank === undefined ? (this.lastOf.get(verdict) ?? null) : null };
    }
    return best;
  }
}
