import type { Reference } from '../analysis/compare.js';
import type { Regression, Summary } from '../protocol/summary.js';
import { freeze, type EngineSnapshot, type JobState } from '../engine/snapshot.js';
import { judgeRun } from './history.js';
import type { Comparison } from '../protocol/state.js';

/**
 * Each running job compared live with its reference (a pinned baseline, or the median of its recent
 * comparable runs), put in the snapshot's `baseline` for the state, the stream and the viewer; and a
 * regression — slower per sample by the threshold or more, held for a while past warm-up — told as
 * it begins and ends. Pure: the snapshots bring the time.
 */

export interface LiveOptions {
  thresholdPct: number;
  /** How long the run must stay past the threshold before it is a regression (and under it before it is not). */
  holdMs: number;
  /** Live summaries are made at most this often per job (one is a few ms for a big job). */
  everyMs: number;
}

export const LIVE_DEFAULTS: Omit<LiveOptions, 'thresholdPct'> = { holdMs: 30_000, everyMs: 1_000 };

export interface References {
  /** Whether the job has anything to be compared with (cheap: no summary needed). */
  has(job: string): boolean;
  choose(summary: Summary): Reference | null;
}

export interface RegressionChange {
  job: string;
  run: number;
  at: number;
  regressed: boolean;
  changePct: number | null;
  text: string;
  /** When the regression began: when the run passed the threshold and then stayed past it. */
  startedAt: number;
  /** When it came back within the threshold; null while it holds. */
  endedAt: number | null;
  reference: { kind: Reference['kind']; label: string } | null;
  thresholdPct: number;
}

/** A snapshot decorated with the live comparisons: the regressions that began or ended at it, for the stream. */
export type LiveSnapshot = EngineSnapshot & { readonly regressionChanges?: readonly RegressionChange[] };

interface Tracked {
  run: number;
  startedAt: number;
  comparedAt: number;
  comparison: Comparison | null;
  reference: RegressionChange['reference'];
  /** Since when the comparison has been past the threshold (or, while regressed, under it). */
  crossedAt: number | null;
  /** Since when the regression holds; null while none does. */
  since: number | null;
}

export class LiveComparisons {
  private readonly tracked = new Map<string, Tracked>();
  /** Ended runs' final comparisons: what the state shows of a run that is over. */
  private readonly finals = new Map<string, { run: number; comparison: Comparison | null }>();

  constructor(
    private readonly references: References,
    readonly options: LiveOptions,
  ) {}

  /** The snapshot with each job's comparison in `baseline`, and the regressions that began or ended at it. */
  decorate(snapshot: EngineSnapshot, liveSummary: (job: string) => Summary | null): { snapshot: LiveSnapshot; changes: RegressionChange[] } {
    const changes: RegressionChange[] = [];
    const jobs = snapshot.jobs.map((job): JobState => {
      if (job.ended) {
        // Until the run's summary is written (finish), its last live comparison.
        const final = this.finals.get(job.job);
        const tracked = this.tracked.get(job.job);
        const comparison = final && final.run === job.run ? final.comparison : tracked && tracked.run === job.run ? tracked.comparison : job.baseline;
        return comparison === job.baseline ? job : { ...job, baseline: comparison };
      }
      const tracked = this.track(job, snapshot.at, liveSummary, changes);
      return tracked.comparison === job.baseline ? job : { ...job, baseline: tracked.comparison };
    });
    // An ended run's tracker waits for `finish`, which reads when its regression began.
    for (const job of this.tracked.keys()) if (!snapshot.jobs.some((j) => j.job === job)) this.tracked.delete(job);
    const regressions = this.regressions();
    const same = regressions.length === 0 && changes.length === 0 && jobs.every((job, i) => job === snapshot.jobs[i]);
    const decorated: LiveSnapshot = same ? snapshot : freeze({ ...snapshot, jobs, regressions, ...(changes.length ? { regressionChanges: changes } : {}) });
    return { snapshot: decorated, changes };
  }

  /**
   * A run that ended: its final comparison and regression (the live one's start kept as `since_s`),
   * the reference it was compared with; the state shows the comparison from now on.
   */
  finish(run: number, summary: Summary): { reference: Reference | null; comparison: Comparison | null; regression: Regression | null } {
    const tracked = this.tracked.get(summary.job);
    const held = tracked && tracked.run === run ? tracked : null;
    const reference = this.references.has(summary.job) ? this.references.choose(summary) : null;
    const sinceS = held && held.since !== null ? Math.max(0, Math.round((held.since - Date.parse(summary.started_at)) / 1000)) : null;
    const { comparison, regression } = judgeRun(reference, summary, this.options.thresholdPct, sinceS);
    this.finals.set(summary.job, { run, comparison });
    this.tracked.delete(summary.job);
    return { reference, comparison, regression };
  }

  /** Each job compared now, whether it is in a regression, and by how much it is slower per sample: for /metrics. */
  regressions(): Array<{ job: string; regressed: boolean; change_pct: number | null }> {
    return [...this.tracked.entries()].filter(([, t]) => t.comparison !== null).map(([job, t]) => ({ job, regressed: t.since !== null, change_pct: t.comparison!.change_pct }));
  }

  private track(job: JobState, at: number, liveSummary: (job: string) => Summary | null, changes: RegressionChange[]): Tracked {
    let tracked = this.tracked.get(job.job);
    if (!tracked || tracked.run !== job.run) {
      tracked = { run: job.run, startedAt: Date.parse(job.started_at), comparedAt: -Infinity, comparison: null, reference: null, crossedAt: null, since: null };
      this.tracked.set(job.job, tracked);
    }
    if (at - tracked.comparedAt < this.options.everyMs || !this.references.has(job.job)) return tracked;
    const summary = liveSummary(job.job);
    const reference = summary ? this.references.choose(summary) : null;
    tracked.comparedAt = at;
    tracked.comparison = summary && reference ? judgeRun(reference, summary, this.options.thresholdPct, null).comparison : null;
    tracked.reference = reference ? { kind: reference.kind, label: reference.label } : null;
    // Warm-up steps (compilation, caches filling) are slow by nature: no regression is called in them.
    const judged = job.verdict !== null && job.verdict.verdict !== 'warming-up';
    const change = tracked.comparison?.change_pct ?? null;
    const past = judged && change !== null && change >= this.options.thresholdPct;
    const regressed = tracked.since !== null;
    if (past === regressed) {
      tracked.crossedAt = null;
    } else {
      tracked.crossedAt ??= at;
      if (at - tracked.crossedAt >= this.options.holdMs) {
        const began = past ? tracked.crossedAt : tracked.since!;
        changes.push(this.change(job.job, tracked, at, past, began, past ? null : tracked.crossedAt));
        tracked.since = past ? tracked.crossedAt : null;
        tracked.crossedAt = null;
      }
    }
    return tracked;
  }

  private change(job: string, tracked: Tracked, at: number, regressed: boolean, startedAt: number, endedAt: number | null): RegressionChange {
    const text = tracked.comparison?.text.split('\n')[0] ?? '';
    const changePct = tracked.comparison?.change_pct ?? null;
    return { job, run: tracked.run, at, regressed, changePct, text, startedAt, endedAt, reference: tracked.reference, thresholdPct: this.options.thresholdPct };
  }
}
