import { round } from './round.js';
import type { Limiter } from './verdict.js';

/**
 * What a fix would buy in speed, GPU-hours and money, from its estimate (fix-estimate.ts). Pure.
 *
 * - Speed-up: a fix that gives back a share g of the step time makes steps 1 / (1 − g) as fast
 *   (Amdahl: the rest of the step is unchanged). Where g is not known, the bound from `upto`.
 * - Saved so far: the GPU-seconds its limiter cost over the run (the waste ledger), times the share
 *   of that lost time this fix gives back (g / upto): the time the same work would not have taken.
 * - Per further hour: each hour of the job at today's rate holds `ranks` GPU-hours, of which the
 *   same work would need (1 − g): g × ranks GPU-hours saved an hour.
 * The models and how they can be wrong: docs/verdicts.md ("What a fix would buy").
 */

/** What a fix estimate (src/analysis/fix-estimate.ts) and the waste ledger give this: the fields read. */
interface Fix {
  limiter: Limiter;
  gain: number | null;
  upto: number;
}
interface Ledger {
  by_cause: ReadonlyArray<{ cause: Limiter; gpu_seconds: number }>;
  price_per_gpu_hour: number | null;
}

export interface FixValue {
  /** Steps this many times as fast; null where neither the gain nor a bound is known. */
  speedup: number | null;
  /** true: `speedup` is the bound (the gain was not measured), not the estimate. */
  bound: boolean;
  gpu_hours_so_far: number | null;
  gpu_hours_per_hour: number | null;
  /** At --gpu-hour-price; null without one. */
  cost_so_far: number | null;
  cost_per_hour: number | null;
}

export function speedupOf(share: number): number {
  return share >= 1 ? Number.POSITIVE_INFINITY : round(1 / (1 - Math.max(0, share)), 2);
}

export function fixValue(fix: Fix, waste: Ledger | null, ranks: number): FixValue {
  const share = fix.gain ?? fix.upto;
  const bound = fix.gain === null;
  const lost = waste?.by_cause.find((c) => c.cause === fix.limiter)?.gpu_seconds ?? (waste ? 0 : null);
  const part = fix.upto > 0 ? Math.min(1, share / fix.upto) : 0;
  const soFar = lost === null ? null : round((lost * part) / 3600, 3);
  const perHour = round(share * ranks, 3);
  const price = waste?.price_per_gpu_hour ?? null;
  return {
    speedup: Number.isFinite(speedupOf(share)) ? speedupOf(share) : null,
    bound,
    gpu_hours_so_far: soFar,
    gpu_hours_per_hour: perHour,
    cost_so_far: price === null || soFar === null ? null : round(soFar * price, 2),
    cost_per_hour: price === null ? null : round(perHour * price, 2),
  };
}

const hours = (h: number) => (h >= 10 ? `${h.toFixed(0)} GPU-h` : h >= 0.1 ? `${h.toFixed(1)} GPU-h` : `${(h * 60).toFixed(1)} GPU-min`);
const money = (x: number | null) => (x === null ? '' : ` (${x.toFixed(2)})`);

/** "→ 1.53× as fast; would have saved 0.4 GPU-h (1.20) so far, 0.7 GPU-h (2.10) each further hour". */
export function fixValueText(value: FixValue): string {
  if (value.speedup === null) return '';
  const speed = `${value.bound ? 'up to ' : ''}${value.speedup.toFixed(2)}× as fast`;
  const so = value.gpu_hours_so_far === null ? '' : `; ${value.bound ? 'up to ' : ''}${hours(value.gpu_hours_so_far)}${money(value.cost_so_far)} saved so far`;
  const per = value.gpu_hours_per_hour === null ? '' : `, ${hours(value.gpu_hours_per_hour)}${money(value.cost_per_hour)} each further hour`;
  return `→ ${speed}${so}${per}`;
}
