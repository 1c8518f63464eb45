import type { TrackerCheckpoint } from './analysis-checkpoint.js';
import type { Judgement } from './verdict.js';
import type { Cause, Verdict } from '../model/verdict.js';

export interface VerdictChange {
  /** When the new verdict began (it has held since then). */
  since: number;
  /** When the change was decided, `holdMs` or more after `since`. */
  at: number;
  from: Verdict | null;
  fromCause: Cause;
  to: Verdict;
  cause: Cause;
  judgement: Judgement;
}

const sameState = (a: Judgement, b: Judgement) => a.verdict === b.verdict && a.cause === b.cause;


/**
 * Keeps a verdict from flapping: a new verdict (or cause) takes over only once every judgement for
 * `holdMs` has agreed on it. The first judgement is taken as it is.
 */
export class VerdictTracker {
  private held: { judgement: Judgement; since: number } | null = null;
  private pending: { judgement: Judgement; since: number } | null = null;

  constructor(readonly holdMs = 3_000) {}

  get current(): { judgement: Judgement; since: number } | null {
    return this.held;
  }

  get candidate(): { judgement: Judgement; since: number } | null {
    return this.pending;
  }

  dump(): TrackerCheckpoint {
    return { holdMs: this.holdMs, held: this.held, pending: this.pending };
  }

  static load(dump: TrackerCheckpoint): VerdictTracker {
    const tracker = new VerdictTracker(dump.holdMs);
    tracker.held = dump.held;
    tracker.pending = dump.pending;
    return tracker;
  }

  /**
   * `since`: when the new state began, where that is known and earlier than `at` (a rank stalled
   * since its last step ended): it holds from then, so it takes over as soon as that is `holdMs`
   * ago, and the timeline starts it there; a change dated before the one it replaces began
   * supersedes it (see `superseded`).
   * `immediate`: takes over now, without the hold (a stalled rank that steps again).
   */
  update(judgement: Judgement, at: number, options: { since?: number; immediate?: boolean } = {}): VerdictChange | null {
    if (!this.held) {
      const since = Math.min(at, options.since ?? at);
      this.held = { judgement, since };
      return { since, at, from: null, fromCause: null, to: judgement.verdict, cause: judgement.cause, judgement };
    }
    if (sameState(this.held.judgement, judgement)) {
      this.held.judgement = judgement;
      this.pending = null;
      return null;
    }
    // A pending verdict whose cause is still settling keeps its start: the verdict has held since then.
    if (!this.pending || this.pending.judgement.verdict !== judgement.verdict || options.since !== undefined) {
      // A state dated back before the one in force began: that one was judged on what the new one had
      // already made stale (a rank gone before the verdict it replaces was decided); it is dropped.
      const since = options.since === undefined ? at : Math.min(at, options.since);
      this.pending = { judgement, since };
      if (this.holdMs > 0 && !options.immediate && at - since < this.holdMs) return null;
    }
    this.pending.judgement = judgement;
    if (at - this.pending.since < this.holdMs && !options.immediate) return null;
    const previous = this.held.judgement;
    this.held = this.pending;
    this.pending = null;
    return { since: this.held.since, at, from: previous.verdict, fromCause: previous.cause, to: judgement.verdict, cause: judgement.cause, judgement };
  }
}
