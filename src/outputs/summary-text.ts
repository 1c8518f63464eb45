import type { RankSummary } from '../analysis/summary.js';

/** The words and figures a summary is shown with, one set for the text, Markdown and HTML renderings. */

export const pct = (x: number | null | undefined) => (x === null || x === undefined ? 'n/a' : `${Math.round(x * 100)}%`);
export const num = (x: number | null | undefined, digits = 1) => (x === null || x === undefined ? 'n/a' : x.toFixed(digits));
export const withCause = (verdict: string, cause: string | null) => (cause ? `${verdict} (${cause})` : verdict);

export const RANK_COLUMNS = ['rank', 'host', 'steps', 'p50 ms', 'p90 ms', 'data', 'h2d', 'compute', 'other', 'verdict', 'straggler'] as const;

/** One rank's row under RANK_COLUMNS, as plain text; `straggler` is what marks the straggler. */
export function rankCells(r: RankSummary, straggler: string): string[] {
  return [
    String(r.rank),
    r.host,
    String(r.steps),
    num(r.step_ms.p50, 2),
    num(r.step_ms.p90, 2),
    pct(r.breakdown.data),
    pct(r.breakdown.h2d),
    pct(r.breakdown.compute),
    pct(r.breakdown.other),
    withCause(r.verdict, r.cause),
    r.straggler ? straggler : '',
  ];
}
