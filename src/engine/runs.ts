import { createHash } from 'node:crypto';
import { compareTo, medianReference, msPerSample, referenceOf, type Reference } from '../analysis/compare.js';
import type { Comparison } from '../protocol/state.js';
import type { RunsReference } from '../protocol/runs.js';
import type { RunsCheckpoint } from './checkpoint.js';
import type { ReferenceEntry } from './entries.js';
import type { Regression, Summary } from '../protocol/summary.js';

/**
 * Each run compared with its reference, inside the engine: the references come in as journal
 * entries (`reference`: the pinned --baseline, or the job's past comparable runs, as the sidecar read
 * them when it first held the job and again each time one of its runs was kept), and what follows from them — the live comparison, a regression and its
 * onset, the final comparison of a run that ended — is the engine's state, checkpointed with it. So a
 * restart or a replay gives the same regression, begun at the same time, as a run that never stopped.
 * Pure: the ticks bring the time.
 */

/** Comparable runs the median is taken over. */
export const REFERENCE_RUNS = 5;
export { DEFAULT_REGRESSION_THRESHOLD_PCT } from './runs-defaults.js';
/** How long a run must stay past the threshold before it is a regression (and under it before it is not). */
export const DEFAULT_REGRESSION_HOLD_MS = 30_000;
/** Live summaries are made at most this often per job (one is a few ms for a big job). */
const COMPARE_EVERY_MS = 1_000;

export interface RunsConfig {
  thresholdPct: number;
  holdMs: number;
}

/** What the journal's `reference` entry holds: what the job's runs from now on are compared with (the entry's schema is its type). */
export type RunReferences = Pick<ReferenceEntry, 'job' | 'pinned' | 'past'>;

export interface Fingerprint {
  key: string;
  gpuName: string | null;
  worldSize: number;
}

/**
 * Runs are comparable when they ran on the same GPU model with as many ranks: per-sample times of
 * an A10 and an H100, or of 8 and 64 ranks, say nothing about each other. Software versions and
 * loader settings are left out on purpose: they are what "changed since" reports.
 */
export function fingerprintOf(summary: Summary): Fingerprint {
  const fromEnv = summary.env.gpu_name;
  const gpuName = typeof fromEnv === 'string' && fromEnv ? fromEnv : (summary.gpus.find((g) => g.name)?.name ?? null);
  const key = createHash('sha256').update(JSON.stringify([gpuName, summary.world_size])).digest('hex').slice(0, 12);
  return { key, gpuName, worldSize: summary.world_size };
}

/**
 * What a run is compared with: the pinned baseline where there is one, else the median of the
 * last REFERENCE_RUNS past runs (oldest first) with the current run's fingerprint, else nothing.
 * `next`: what the run after `current` (an ended one) will be compared with, `current` among them.
 */
export function chooseReference(past: readonly Summary[], current: Summary, pinned: Summary | null, next = false): Reference | null {
  if (pinned) return referenceOf(pinned);
  const fingerprint = fingerprintOf(current).key;
  // A run never is its own reference (a sidecar restarted after keeping it but before saying so).
  const self = (s: Summary) => !next && s.ended_at === current.ended_at && s.started_at === current.started_at;
  return medianReference(past.filter((s) => s.steps > 0 && fingerprintOf(s).key === fingerprint && !self(s)).slice(-REFERENCE_RUNS));
}

/** The comparison, and the regression where it passes the threshold. */
export function judgeRun(reference: Reference | null, summary: Summary, thresholdPct: number, sinceS: number | null): { comparison: Comparison | null; regression: Regression | null } {
  if (!reference) return { comparison: null, regression: null };
  const comparison = compareTo(reference, summary);
  const change = comparison.change_pct;
  const regression =
    change !== null && change >= thresholdPct
      ? { change_pct: change, threshold_pct: thresholdPct, against: reference.label, since_s: sinceS, text: comparison.text.split('\n')[0]! }
      : null;
  return { comparison, regression };
}

/** A regression that began or ended at a tick, as the stream tells it. */
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

/** A live job compared with its reference, as the snapshot carries it (/metrics, the stream). */
export interface JobRegression {
  job: string;
  run: number;
  regressed: boolean;
  change_pct: number | null;
  /** The regression holding, as it was told when it began (its onset in `startedAt`); null while none holds. */
  began: RegressionChange | null;
}

interface Tracked {
  run: number;
  comparedAt: number;
  comparison: Comparison | null;
  reference: RunsReference | null;
  /** Since when the comparison has been past the threshold (or, while regressed, under it). */
  crossedAt: number | null;
  /** The regression holding, as told when it began; null while none does. */
  began: RegressionChange | null;
}

interface Final {
  run: number;
  comparison: Comparison | null;
  regression: Regression | null;
}

/** The engine's jobs as the comparisons read them at a tick. */
export interface RunsAt {
  at: number;
  /** The jobs running now. */
  live: readonly string[];
  /** The job's current run; null for a job the engine no longer holds. */
  runOf(job: string): number | null;
  /** Whether its verdict is past warm-up (compilation, caches filling: slow by nature, no regression is called in them). */
  judged(job: string): boolean;
  /** Its summary as of now, without the series. */
  summary(job: string): Summary | null;
}

export class RunComparisons {
  private readonly references = new Map<string, RunReferences>();
  private readonly tracked = new Map<string, Tracked>();
  /** Ended runs' final comparisons: what the state shows of a run that is over. */
  private readonly finals = new Map<string, Final>();

  constructor(public config: RunsConfig) {}

  /** A `reference` entry: what the job's runs are compared with from now on (a later one replaces it; a regression's onset stays). */
  reference(entry: RunReferences): void {
    this.references.set(entry.job, entry);
  }

  /** At a tick: each live job with references compared (at most every COMPARE_EVERY_MS), and the regressions that began or ended. */
  tick(jobs: RunsAt): RegressionChange[] {
    const changes: RegressionChange[] = [];
    // A job the engine let go takes its comparisons with it.
    for (const map of [this.references, this.tracked, this.finals]) for (const job of map.keys()) if (jobs.runOf(job) === null) map.delete(job);
    for (const job of jobs.live) {
      const run = jobs.runOf(job);
      if (run !== null && this.references.has(job)) this.track(job, run, jobs, changes);
    }
    return changes;
  }

  /** A run that ended: its final comparison and regression (the live one's onset kept as `since_s`), once. */
  finish(run: number, summary: Summary): Final {
    const done = this.finals.get(summary.job);
    if (done && done.run === run) return done;
    const final = this.judge(run, summary);
    this.finals.set(summary.job, final);
    this.tracked.delete(summary.job);
    return final;
  }

  /** The run's summary against its reference, with the onset of the regression holding, as of the summary; nothing kept. */
  judge(run: number, summary: Summary): Final {
    const references = this.references.get(summary.job);
    const tracked = this.tracked.get(summary.job);
    const since = tracked && tracked.run === run && tracked.began ? tracked.began.startedAt : null;
    const sinceS = since === null ? null : Math.max(0, Math.round((since - Date.parse(summary.started_at)) / 1000));
    const reference = references ? chooseReference(references.past, summary, references.pinned) : null;
    return { run, ...judgeRun(reference, summary, this.config.thresholdPct, sinceS) };
  }

  /** The job's run compared with its reference: live, or the final one of a run that ended; null where it is not. */
  comparisonOf(job: string, run: number, ended: boolean): Comparison | null {
    const final = this.finals.get(job);
    if (ended && final && final.run === run) return final.comparison;
    const tracked = this.tracked.get(job);
    return tracked && tracked.run === run ? tracked.comparison : null;
  }

  /** Each live job compared now, whether it is in a regression, and since when. */
  regressions(): JobRegression[] {
    return [...this.tracked.entries()]
      .filter(([, t]) => t.comparison !== null)
      .map(([job, t]) => ({ job, run: t.run, regressed: t.began !== null, change_pct: t.comparison!.change_pct, began: t.began }));
  }

  /** The jobs with references journaled, each with what its running run was last compared with (null before its first comparison). */
  referenced(): Array<{ job: string; run: number | null; reference: RunsReference | null }> {
    return [...this.references.keys()].map((job) => {
      const tracked = this.tracked.get(job);
      return { job, run: tracked?.run ?? null, reference: tracked?.reference ?? null };
    });
  }

  dump(): RunsCheckpoint {
    return { references: [...this.references.values()], tracked: [...this.tracked.entries()], finals: [...this.finals.entries()] };
  }

  static load(dump: RunsCheckpoint, config: RunsConfig): RunComparisons {
    const runs = new RunComparisons(config);
    for (const references of dump.references) runs.references.set(references.job, references);
    for (const [job, tracked] of dump.tracked) runs.tracked.set(job, tracked);
    for (const [job, final] of dump.finals) runs.finals.set(job, final);
    return runs;
  }

  private track(job: string, run: number, jobs: RunsAt, changes: RegressionChange[]): void {
    const references = this.references.get(job)!;
    const at = jobs.at;
    let tracked = this.tracked.get(job);
    if (!tracked || tracked.run !== run) {
      tracked = { run, comparedAt: -Infinity, comparison: null, reference: null, crossedAt: null, began: null };
      this.tracked.set(job, tracked);
    }
    if (at - tracked.comparedAt < COMPARE_EVERY_MS) return;
    // A run with no step in yet has nothing to compare: it is compared from its first steps on.
    const stepped = jobs.summary(job);
    const summary = stepped && stepped.steps > 0 ? stepped : null;
    const reference = summary ? chooseReference(references.past, summary, references.pinned) : null;
    tracked.comparedAt = at;
    tracked.comparison = summary && reference ? judgeRun(reference, summary, this.config.thresholdPct, null).comparison : null;
    tracked.reference = reference ? { kind: reference.kind, label: reference.label, runs: reference.runs, ms_per_sample: msPerSample(reference.summary) } : null;
    const change = tracked.comparison?.change_pct ?? null;
    const past = jobs.judged(job) && change !== null && change >= this.config.thresholdPct;
    const regressed = tracked.began !== null;
    if (past === regressed) {
      tracked.crossedAt = null;
      return;
    }
    tracked.crossedAt ??= at;
    if (at - tracked.crossedAt < this.config.holdMs) return;
    const told = this.change(job, tracked, at, past, past ? tracked.crossedAt : tracked.began!.startedAt, past ? null : tracked.crossedAt);
    changes.push(told);
    tracked.began = past ? told : null;
    tracked.crossedAt = null;
  }

  private change(job: string, tracked: Tracked, at: number, regressed: boolean, startedAt: number, endedAt: number | null): RegressionChange {
    const text = tracked.comparison?.text.split('\n')[0] ?? '';
    const changePct = tracked.comparison?.change_pct ?? null;
    const reference = tracked.reference ? { kind: tracked.reference.kind, label: tracked.reference.label } : null;
    return { job, run: tracked.run, at, regressed, changePct, text, startedAt, endedAt, reference, thresholdPct: this.config.thresholdPct };
  }
}
