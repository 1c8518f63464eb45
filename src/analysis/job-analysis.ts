import type { StepWindow } from './window.js';
import type { AnalysisCheckpoint } from './analysis-checkpoint.js';
import { FixFold } from './fix-fold.js';
import { findStraggler, type Straggler } from '../model/straggler.js';
import { type Cause, isStop, type StopVerdict, type Verdict, VERDICTS } from '../model/verdict.js';
import type { CodeFrame } from '../protocol/capture.js';
import { jobStop, jobStopJudgement, jobStopParts, rankStall, stackDumpDir, STALL_DEFAULTS, type RankStall, type StallConfig, type StallInput } from './stall.js';
import { RunSeries } from './summary-series.js';
import { VerdictTracker, type VerdictChange } from './tracker.js';
import { judge, LIMITER_BARS, type Judgement, type RankContext } from './verdict.js';
import type { FoldedFix, LimiterCost, TimelineSegment, Waste } from '../protocol/state.js';
import { WasteLedger } from './waste.js';

/**
 * Live verdicts of one job: each rank judged on its window and held against flapping, the straggler
 * named, the job's verdict derived from its ranks', and the job's timeline kept. Pure: windows and
 * the time come in, verdicts and change events come out.
 */

export interface RankInput {
  rank: number;
  window: StepWindow;
  context: Omit<RankContext, 'current'>;
  /** Whether it is there and heard from, for telling a stalled or gone rank (absent: judged on its window alone). */
  stall?: StallInput;
}

/** A stretch of time the job did not step (it hung, a rank stalled or went): what the summary reports. */
export interface StopEpisode {
  verdict: StopVerdict;
  cause: Cause;
  /** When it began (the last step's end) and when it was last seen to hold, ms. */
  since: number;
  until: number;
  /** The last step before it. */
  step: number;
  culprits: number[];
  waiting: number[];
  waits_in: string | null;
  /** The job's verdict rule, in words, as last judged, and the part of it after its head (who, where, on what). */
  text: string;
  detail: string;
  /** Ranks that did not step through it (one GPU each). */
  idle_ranks: number;
  /** With --stack-dumps: the files of every rank's stacks when it was declared hung, under --out. */
  dumps?: string[];
  /** The innermost frames of the script's own code where the first culprit stopped. */
  where: CodeFrame[];
  recommendations: Judgement['recommendations'];
}

export interface VerdictEvent extends VerdictChange {
  job: string;
  /** null for the job's own verdict. */
  rank: number | null;
}

/** Verdict changes kept per timeline (the job's, each rank's); a job that flaps for days keeps its latest. */
const MAX_CHANGES = 2_000;
/** Stops kept per run (the latest). */
const MAX_STOPS = 50;

/** Stepping, and judged on its steps: not warming up, idle, or stopped. */
const ACTIVE = (verdict: Verdict) => verdict !== 'warming-up' && verdict !== 'idle' && !isStop(verdict);

/**
 * The changes a new one leaves in a timeline: those that began at or after it are dropped. A stop is
 * dated back to when it began (a rank's last step, the moment it went), and a verdict decided since
 * then was judged on steps the stop had already ended.
 */
function superseded(changes: VerdictChange[], change: VerdictChange): VerdictChange[] {
  let keep = changes.length;
  while (keep > 1 && changes[keep - 1]!.since >= change.since) keep--;
  return keep === changes.length ? changes : changes.slice(0, keep);
}

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
  private stops: StopEpisode[] = [];
  private fixes = new FixFold();
  /** Each rank's stall as judged at the latest tick (not checkpointed: the next tick makes it again). */
  private stallsNow = new Map<number, RankStall>();
  /** The stall rule's settings (--stall-steps, --stall-floor). */
  stallConfig: StallConfig = STALL_DEFAULTS;
  /** --stack-dumps: name the files of every rank's stacks when the job is declared hung. */
  stackDumps = false;
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

  dump(): AnalysisCheckpoint {
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
      series: this.series?.dump() ?? null,
      stops: this.stops,
      fixes: this.fixes.dump(),
    };
  }

  static load(dump: AnalysisCheckpoint): JobAnalysis {
    const analysis = new JobAnalysis(dump.jobId, dump.run, dump.startedAt, dump.holdMs);
    analysis.ranks = new Map(dump.ranks.map(([rank, tracker]) => [rank, VerdictTracker.load(tracker)]));
    analysis.job = VerdictTracker.load(dump.job);
    analysis.changes = dump.changes;
    analysis.rankChanges = new Map(dump.rankChanges);
    analysis.lastOf = new Map(dump.lastOf);
    analysis.stragglerNow = dump.stragglerNow;
    analysis.stragglerSeconds = new Map(dump.stragglerSeconds);
    analysis.lastAt = dump.lastAt;
    analysis.waste = WasteLedger.load(dump.waste);
    analysis.stops = dump.stops;
    analysis.fixes = FixFold.load(dump.fixes);
    const series = dump.series === null ? null : RunSeries.load(dump.series);
    analysis.series = series && series.run === dump.run ? series : null;
    return analysis;
  }

  evaluate(inputs: RankInput[], at: number, worldSize = inputs.length): VerdictEvent[] {
    const events: VerdictEvent[] = [];
    const judged: Array<{ rank: number; window: StepWindow; held: Judgement }> = [];
    this.stallsNow = new Map();
    const figures = inputs.map((input) => ({ rank: input.rank, commWaitShare: input.window.comm?.wait_share ?? null, stepMsMean: input.window.step_ms_mean }));
    // The job's own CPU on this host: every rank's training process and loader workers, where all are measured.
    const cores = inputs.map((input) => (input.window.process ? (input.window.process.cpu_main_cores ?? 0) + (input.window.process.cpu_workers_cores ?? 0) : null));
    const jobCpuCores = cores.length > 0 && cores.every((c) => c !== null) ? cores.reduce((a, b) => a! + b!, 0) : null;
    for (const input of inputs) {
      const tracker = this.trackerOf(input.rank);
      const peers = figures.filter((peer) => peer.rank !== input.rank);
      const stall = input.stall ? rankStall(input.stall, at, this.stallConfig) : null;
      if (stall) this.stallsNow.set(input.rank, stall);
      const held = tracker.current?.judgement.verdict ?? null;
      let judgement: Judgement;
      let change: VerdictChange | null;
      if (stall?.stop.capturePending && tracker.current) {
        // Stalled, its stack on its way: the verdict changes once it has come (or stopped coming).
        judgement = tracker.current.judgement;
        change = null;
      } else if (stall?.judgement) {
        const { since, ...stopped } = stall.judgement;
        // A rank that does not step has no step time for a limiter to cost, nor a cause to fix by it.
        judgement = { ...stopped, limiters: [], causes: [] };
        // Into a stop, from when it began; a stop's first cause (where its stack was not known yet) is replaced at once.
        const settling = isStop(held) && held === judgement.verdict && tracker.current?.judgement.cause === null;
        change = tracker.update(judgement, at, judgement.verdict === held ? { immediate: settling } : { since });
      } else {
        judgement = judge(input.window, { ...input.context, current: held, peers, jobCpuCores });
        change = tracker.update(judgement, at, { immediate: isStop(held) });
      }
      if (change) {
        this.rankChanges.set(input.rank, [...superseded(this.rankChanges.get(input.rank) ?? [], change), change].slice(-MAX_CHANGES));
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
    const sinceLast = this.lastAt === null ? 0 : (at - this.lastAt) / 1000;
    this.lastAt = at;
    const stop = this.stallsNow.size ? jobStop([...this.stallsNow.values()].map((s) => s.stop)) : null;
    if (stop === 'pending') return events;
    // A job that stopped leaves its stop only once a rank steps again: ranks that dropped their
    // connection a moment ago, or ended (killed politely), are not stepping; the stop lasts until then.
    if (stop === null && this.stopped() && ![...this.stallsNow.values()].some((s) => s.stop.state === 'stepping')) {
      const last = this.stops.at(-1);
      if (last) last.until = at;
      return events;
    }
    let jobJudgement = this.jobJudgement(judged);
    let since: number | undefined;
    if (stop) {
      const stopped = jobStopJudgement(stop, this.stallsNow, worldSize, at);
      ({ since } = stopped);
      jobJudgement = { verdict: stopped.verdict, cause: stopped.cause, evidence: stopped.evidence, recommendations: stopped.recommendations, limiters: [], causes: [] };
      this.noteStop(stop.verdict, stopped, stop, at, worldSize);
    }
    if (jobJudgement) {
      this.lastOf.set(jobJudgement.verdict, jobJudgement);
      if (ACTIVE(jobJudgement.verdict)) this.fixes.add(sinceLast, jobJudgement.verdict, jobJudgement.causes);
      const heldJob = this.job.current?.judgement.verdict ?? null;
      const change = this.job.update(jobJudgement, at, since !== undefined && heldJob !== jobJudgement.verdict ? { since } : {});
      if (change) {
        this.changes = superseded(this.changes, change);
        this.changes.push(change);
        if (this.changes.length > MAX_CHANGES) this.changes.shift();
        events.push({ ...change, job: this.jobId, rank: null });
      }
    }
    return events;
  }

  /** Keeps the run's current stop up to date (a new one when the stop changed or began again). */
  private noteStop(verdict: StopVerdict, judged: { cause: Judgement['cause']; evidence: Judgement['evidence']; recommendations: Judgement['recommendations']; since: number }, stop: Exclude<ReturnType<typeof jobStop>, 'pending' | null>, at: number, worldSize: number): void {
    const lead = this.stallsNow.get(stop.culprits[0] ?? -1);
    const steps = [...this.stallsNow.values()].map((s) => s.stop.lastStep);
    const episode: StopEpisode = {
      detail: jobStopParts(stop, this.stallsNow, worldSize, at).detail,
      idle_ranks: verdict === 'hung' ? new Set([...stop.culprits, ...stop.waiting]).size : stop.culprits.length,
      verdict,
      cause: judged.cause,
      since: judged.since,
      until: at,
      step: lead?.stop.lastStep ?? Math.max(-1, ...steps),
      culprits: stop.culprits,
      waiting: stop.waiting,
      waits_in: stop.waitsIn,
      text: judged.evidence.rule,
      where: lead?.where ?? [],
      recommendations: judged.recommendations,
    };
    const last = this.stops.at(-1);
    const same = last !== undefined && last.since === episode.since;
    // Declared hung now: with --stack-dumps, every rank's stacks of this moment go to files named here.
    if (this.stackDumps && verdict === 'hung' && !(same && last.verdict === 'hung')) {
      const n = this.stops.filter((s) => s.dumps).length + 1;
      episode.dumps = [...this.stallsNow.keys()].sort((a, b) => a - b).map((rank) => `${stackDumpDir(this.jobId, this.run, n)}/rank-${rank}.json`);
    }
    if (same) {
      // The same stop, judged again: what it became, hung if it ever was, and its culprit's stack if it had one.
      this.stops[this.stops.length - 1] = {
        ...episode,
        verdict: last.verdict === 'hung' ? 'hung' : episode.verdict,
        where: episode.where.length ? episode.where : last.where,
        ...(last.dumps && !episode.dumps ? { dumps: last.dumps } : {}),
      };
    } else {
      this.stops.push(episode);
      if (this.stops.length > MAX_STOPS) this.stops.shift();
    }
  }

  /** Whether the job had stopped stepping (hung, a rank stalled or gone) as of its latest judgement: its run then lasts until it was last heard from. */
  stopped(): boolean {
    return isStop(this.job.current?.judgement.verdict);
  }

  /** The run's stops, oldest first. */
  stopEpisodes(): readonly StopEpisode[] {
    return this.stops;
  }

  /** Each rank's stall as judged at the latest tick. */
  rankStall(rank: number): RankStall | null {
    return this.stallsNow.get(rank) ?? null;
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

  /** Each cause's fix estimate folded over the time its verdict held, `first`'s causes first, then the longest-held verdict's. */
  foldedFixes(first: Verdict | null): FoldedFix[] {
    return this.fixes.folded(first);
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
    // A change that began after `at` (a run's end: an idle rank noticed after its last step) is not
    // part of it; every row runs forward.
    const all = rank === undefined ? this.changes : (this.rankChanges.get(rank) ?? []);
    const changes = all.filter((change, i) => i === 0 || change.since <= at);
    const toS = (t: number) => Math.round((t - this.startedAt) / 10) / 100;
    const segments = changes.map((change, i) => {
      const start_s = Math.max(0, toS(Math.min(change.since, at)));
      return { start_s, end_s: Math.max(start_s, toS(i + 1 < changes.length ? changes[i + 1]!.since : at)), verdict: change.to, cause: change.cause };
    });
    // A verdict replaced from the moment it began (a stop dated back to the last step) held no time.
    return segments.filter((segment, i) => segment.end_s > segment.start_s || i === segments.length - 1);
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
