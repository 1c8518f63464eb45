import { round } from '../model/round.js';
import type { FixFoldCheckpoint } from './analysis-checkpoint.js';
import type { Cause, Limiter, Verdict } from '../model/verdict.js';
import type { FixEstimate, FoldedFix } from '../protocol/state.js';

/**
 * What fixing each cause would have bought over the run: each cause's estimate (fix-estimate.ts)
 * folded over the whole time its verdict held, time-weighted, rather than as judged in one window.
 * A run whose regime changes as it ends then reports what held, not the edge of the change. Pure:
 * the job's held judgement and the time since the last tick come in. Kept in the job's analysis and
 * its checkpoint, so that a restart or a replay folds the same.
 */

interface CauseFold {
  verdict: Verdict;
  cause: Cause;
  limiter: Limiter;
  /** Seconds the cause was present, and those of them with a known gain. */
  present: number;
  known: number;
  /** Share × seconds, summed. */
  gain: number;
  upto: number;
  /** As last judged. */
  basis: string;
  unknown: string | null;
}

/** A tick further than this from the last (the sidecar was down) counts as this long, as in the waste ledger. */
const MAX_TICK_S = 10;

export class FixFold {
  private verdicts = new Map<Verdict, number>();
  private causes: CauseFold[] = [];

  /** The job held `verdict`, with these causes, for the `seconds` since the last tick. */
  add(seconds: number, verdict: Verdict, causes: readonly FixEstimate[]): void {
    const dt = Math.min(Math.max(0, seconds), MAX_TICK_S);
    if (dt === 0) return;
    this.verdicts.set(verdict, (this.verdicts.get(verdict) ?? 0) + dt);
    for (const fix of causes) {
      let fold = this.causes.find((c) => c.verdict === verdict && c.cause === fix.cause && c.limiter === fix.limiter);
      if (!fold) {
        fold = { verdict, cause: fix.cause, limiter: fix.limiter, present: 0, known: 0, gain: 0, upto: 0, basis: '', unknown: null };
        this.causes.push(fold);
      }
      fold.present += dt;
      fold.upto += fix.upto * dt;
      if (fix.gain !== null) {
        fold.known += dt;
        fold.gain += fix.gain * dt;
      }
      fold.basis = fix.basis;
      if (fix.unknown !== null) fold.unknown = fix.unknown;
    }
  }

  /**
   * Each cause folded over its verdict's whole time (a cause not present counts 0 then), the
   * longest-held verdict's first (`first` puts a given verdict first), then by what fixing it buys.
   */
  folded(first: Verdict | null = null): FoldedFix[] {
    const held = (verdict: Verdict) => this.verdicts.get(verdict) ?? 0;
    return this.causes
      .filter((c) => held(c.verdict) > 0)
      .map((c): FoldedFix => {
        const seconds = held(c.verdict);
        // The gain is a mean over the time it was known, scaled to the cause's presence; unknown for half its time or more, unknown.
        const gain = c.known > 0 && c.known * 2 > c.present ? round((c.gain / c.known) * (c.present / seconds), 3) : null;
        return { cause: c.cause, limiter: c.limiter, gain, upto: round(c.upto / seconds, 3), basis: c.basis, unknown: gain === null ? c.unknown : null, verdict: c.verdict, seconds: round(seconds, 1) };
      })
      .sort((a, b) => Number(b.verdict === first) - Number(a.verdict === first) || held(b.verdict!) - held(a.verdict!) || a.verdict!.localeCompare(b.verdict!) || (b.gain ?? b.upto) - (a.gain ?? a.upto));
  }

  dump(): FixFoldCheckpoint {
    return { verdicts: [...this.verdicts.entries()], causes: this.causes.map((c) => ({ ...c })) };
  }

  static load(dump: FixFoldCheckpoint): FixFold {
    const fold = new FixFold();
    fold.verdicts = new Map(dump.verdicts);
    fold.causes = dump.causes.map((c) => ({ ...c }));
    return fold;
  }
}
