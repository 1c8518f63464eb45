import { findStraggler, type Straggler } from '../../model/straggler.js';
import { VERDICTS, type Verdict } from '../../model/verdict.js';
import type { RankState, VerdictState } from '../../protocol/state.js';

/**
 * A job spread over several sidecars (one per node) has no single sidecar that sees all its ranks, so
 * the viewer decides its verdict across them by the sidecar's own rule (docs/verdicts.md): the
 * straggler's verdict where one rank holds the others back, else the verdict most ranks hold.
 */

const ACTIVE = (verdict: Verdict) => verdict !== 'warming-up' && verdict !== 'idle';

export interface CombinedVerdict {
  verdict: VerdictState | null;
  /** The rank whose verdict it is. */
  rank: number | null;
  straggler: Straggler | null;
}

export function combineVerdicts(ranks: readonly RankState[]): CombinedVerdict {
  const judged = ranks.filter((r): r is RankState & { verdict: VerdictState } => r.verdict !== null).sort((a, b) => a.rank - b.rank);
  if (judged.length === 0) return { verdict: null, rank: null, straggler: null };
  const active = judged.filter((r) => ACTIVE(r.verdict.verdict));
  const straggler = active.length >= 2 ? findStraggler(active.map((r) => ({ rank: r.rank, window: r.window }))) : null;
  const slow = straggler ? judged.find((r) => r.rank === straggler.rank) : undefined;
  if (slow) return { verdict: slow.verdict, rank: slow.rank, straggler };
  const votes = new Map<Verdict, number>();
  for (const r of judged) votes.set(r.verdict.verdict, (votes.get(r.verdict.verdict) ?? 0) + 1);
  const [winner] = [...votes.entries()].sort(([va, a], [vb, b]) => b - a || VERDICTS.indexOf(va) - VERDICTS.indexOf(vb))[0]!;
  const first = judged.find((r) => r.verdict.verdict === winner)!;
  return { verdict: first.verdict, rank: first.rank, straggler: null };
}
