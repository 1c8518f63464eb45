import type { Verdict } from '../model/verdict.js';

/** Text for figures, sparklines and bars; the same for the full-screen viewer and the plain lines. Pure. */

export const DASH = '–';

export function fmtMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return DASH;
  if (ms < 10) return ms.toFixed(2);
  if (ms < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

/** A share (0..1) as a whole percent. */
export function fmtShare(share: number | null | undefined): string {
  return share === null || share === undefined || !Number.isFinite(share) ? DASH : `${Math.round(share * 100)}%`;
}

/** A percent (0..100) as a whole percent. */
export function fmtPct(pct: number | null | undefined): string {
  return pct === null || pct === undefined || !Number.isFinite(pct) ? DASH : `${Math.round(pct)}%`;
}

export function fmtNum(x: number | null | undefined, digits = 0): string {
  return x === null || x === undefined || !Number.isFinite(x) ? DASH : x.toFixed(digits);
}

export function fmtRate(perS: number | null | undefined): string {
  if (perS === null || perS === undefined || !Number.isFinite(perS)) return DASH;
  if (perS >= 10_000) return `${(perS / 1000).toFixed(1)}k`;
  return perS >= 100 ? perS.toFixed(0) : perS.toFixed(1);
}

export function fmtDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return DASH;
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} m`;
}

/** hh:mm:ss in local time. */
export function fmtClock(at: number | string): string {
  const d = new Date(at);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

export const withCause = (verdict: string, cause: string | null | undefined) => (cause ? `${verdict} (${cause})` : verdict);

/** `values` averaged down to at most `width` points (the oldest bucket may be partial); nulls are left out of means. */
export function resample(values: ReadonlyArray<number | null>, width: number): Array<number | null> {
  if (width <= 0) return [];
  if (values.length <= width) return values.slice();
  const per = Math.ceil(values.length / width);
  const out: Array<number | null> = [];
  // Buckets are aligned to the newest value, so the right edge is always "now".
  for (let end = values.length; end > 0 && out.length < width; end -= per) {
    const bucket = values.slice(Math.max(0, end - per), end).filter((v): v is number => v !== null);
    out.unshift(bucket.length ? bucket.reduce((a, b) => a + b, 0) / bucket.length : null);
  }
  return out;
}

const BLOCKS = '▁▂▃▄▅▆▇█';

/** One character per value, scaled from `min` to `max` (default 0 and the largest value); blank where null. */
export function sparkline(values: ReadonlyArray<number | null>, scale: { min?: number; max?: number } = {}): string {
  const present = values.filter((v): v is number => v !== null && Number.isFinite(v));
  const min = scale.min ?? 0;
  const max = scale.max ?? Math.max(min, ...present);
  return values
    .map((v) => {
      if (v === null || !Number.isFinite(v)) return ' ';
      if (max <= min) return BLOCKS[0];
      const level = Math.round(((Math.min(max, Math.max(min, v)) - min) / (max - min)) * (BLOCKS.length - 1));
      return BLOCKS[level];
    })
    .join('');
}

export const PARTS = ['data', 'h2d', 'compute', 'other'] as const;
export type Part = (typeof PARTS)[number];

/** Glyphs that tell the parts apart without colour. */
export const PART_GLYPH: Record<Part, string> = { data: '▓', h2d: '▒', compute: '█', other: '░' };

/** How many of `width` cells each part gets (largest remainder, so they add up to `width` exactly). */
export function stackedCells(shares: Record<Part, number> | null, width: number): Array<{ part: Part; cells: number }> {
  if (!shares || width <= 0) return [];
  const total = PARTS.reduce((sum, part) => sum + Math.max(0, shares[part]), 0);
  if (total <= 0) return [];
  const exact = PARTS.map((part) => ({ part, x: (Math.max(0, shares[part]) / total) * width }));
  const cells = exact.map((e) => ({ part: e.part, cells: Math.floor(e.x), rest: e.x - Math.floor(e.x) }));
  let left = width - cells.reduce((sum, c) => sum + c.cells, 0);
  for (const c of cells.slice().sort((a, b) => b.rest - a.rest)) {
    if (left-- <= 0) break;
    c.cells += 1;
  }
  return cells.filter((c) => c.cells > 0).map(({ part, cells: n }) => ({ part, cells: n }));
}

/** One letter per verdict, for the verdict strip without colour. */
export const VERDICT_LETTER: Record<Verdict, string> = {
  'compute-bound': 'C',
  'input-bound': 'I',
  'transfer-bound': 'X',
  'host-bound': 'H',
  throttled: 'T',
  'communication-bound': 'N',
  'memory-bound': 'M',
  'warming-up': 'w',
  idle: '.',
  stalled: 'S',
  hung: '!',
  gone: 'G',
};

/** Runs of equal neighbours, for drawing a strip with few spans. */
export function runs<T>(items: readonly T[]): Array<{ value: T; length: number }> {
  const out: Array<{ value: T; length: number }> = [];
  for (const item of items) {
    const last = out.at(-1);
    if (last && last.value === item) last.length += 1;
    else out.push({ value: item, length: 1 });
  }
  return out;
}

/** `text` in exactly `width` columns: padded, or cut with an ellipsis. */
export function fit(text: string, width: number, align: 'left' | 'right' = 'left'): string {
  if (width <= 0) return '';
  const chars = [...text];
  if (chars.length > width) return width === 1 ? '…' : chars.slice(0, width - 1).join('') + '…';
  return align === 'left' ? text.padEnd(width) : text.padStart(width);
}
