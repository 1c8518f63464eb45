/**
 * How many lines each section of the full-screen viewer gets on a terminal of `rows` lines. Pure.
 * Ranks and GPUs come first (they are the figures), then sparklines, then recent events, then
 * what else to do.
 */

export interface SectionCounts {
  ranks: number;
  gpus: number;
  /** Sparkline rows wanted: step time per rank, then utilization and SM clock per GPU. */
  sparks: number;
  events: number;
  /** Recommendations after the first (which the banner shows), under a heading. */
  advice: number;
}

/** Lines always there: header, banner (4 lines and its border), the two table headings and the gaps before them, history heading, verdict strip, timeline, footer. */
export const FIXED_LINES = 15;

export function layout(rows: number, wanted: SectionCounts): SectionCounts {
  // Ink clears the whole screen on every frame once the output reaches the last line; stay above it.
  let left = Math.max(0, rows - 1 - FIXED_LINES);
  const take = (want: number, cap = Infinity) => {
    const n = Math.max(0, Math.min(want, cap, left));
    left -= n;
    return n;
  };
  const firstRanks = take(wanted.ranks, 4);
  const firstGpus = take(wanted.gpus, 4);
  const firstSparks = take(wanted.sparks, 3);
  const ranks = firstRanks + take(wanted.ranks - firstRanks, 12);
  const gpus = firstGpus + take(wanted.gpus - firstGpus, 8);
  const sparks = firstSparks + take(wanted.sparks - firstSparks, 6);
  const events = take(wanted.events, 8);
  // The heading and the gap before it only where at least one recommendation fits.
  const advice = wanted.advice > 0 && left >= 3 ? take(wanted.advice + 2, 8) - 2 : 0;
  return { ranks, gpus, sparks, events, advice };
}

export interface ColumnSpec<K extends string> {
  key: K;
  width: number;
  /** Columns with the lowest `keep` go first when the terminal is too narrow. */
  keep: number;
}

/** The columns that fit in `available` cells (one cell between columns), in their order. */
export function fitColumns<K extends string>(columns: ReadonlyArray<ColumnSpec<K>>, available: number): K[] {
  const chosen = [...columns];
  const width = () => chosen.reduce((sum, c) => sum + c.width, 0) + Math.max(0, chosen.length - 1);
  while (chosen.length > 1 && width() > available) {
    // Of equals, the rightmost goes first: the leftmost columns say which row is which.
    const weakest = chosen.reduce((a, b) => (b.keep <= a.keep ? b : a));
    chosen.splice(chosen.indexOf(weakest), 1);
  }
  return chosen.map((c) => c.key);
}
