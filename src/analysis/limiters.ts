import { LIMITERS, type Limiter, type Level } from '../model/verdict.js';
import { round } from '../model/round.js';
import type { LimiterCost, LostShare, WindowLost } from '../protocol/state.js';
import { breakdownOf } from '../store/job-snapshot.js';
import { commStepsNs, type StepSums } from '../store/step-buckets.js';

/**
 * What each limiter costs: the share of step time it takes, and how surely. One rule for every
 * step size: a limiter counts by its share, never by milliseconds per step; jitter is handled by
 * statistics, not by a floor. A share counts at the lower end of a one-sided 95% confidence interval
 * of its mean over the window's slices of time (250 ms each; at slow steps one step each), the
 * spread taken from successive slices (von Neumann's mean square successive difference), so that a
 * steady 30% counts as 30% and bursts of waiting in an otherwise quiet window count for little,
 * while a job that changes (a trend through the window) is not mistaken for a noisy one. Pure.
 * The reasoning and sources are in docs/verdicts.md.
 */

/** The limiters measured from the steps' phases (throttling is measured from the GPU's clocks). */
export type StepLimiter = Exclude<Limiter, 'throttle'>;

/** A limiter is named beside the verdict from this share; at its verdict bar it is high. */
export const MODERATE = 0.05;

/** What each limiter takes from the step, from a window's (or a slice's) phase shares. */
export interface PhaseShares {
  /** data, h2d and other as shares of the phases' total. */
  breakdown: { data: number; h2d: number; other: number };
  /** GPU idle between steps as a share of step time (CUDA timing), null where not measured. */
  gpuIdle: number | null;
  /** Time the training thread waited in collectives as a share of step time, null where not measured. */
  commWait: number | null;
}

/**
 * The share of step time lost to each limiter. Where the CUDA path measured the GPU's idle gap,
 * only the part of the CPU's waiting that the GPU felt counts: data wait over queued GPU work costs
 * nothing, and "other" counts only for the idle time the data wait does not explain.
 */
export function lostOf({ breakdown, gpuIdle, commWait }: PhaseShares): Record<StepLimiter, number | null> {
  const input = gpuIdle === null ? breakdown.data : Math.min(breakdown.data, gpuIdle);
  const host = gpuIdle === null ? breakdown.other : Math.min(breakdown.other, Math.max(0, gpuIdle - input));
  return { input, transfer: breakdown.h2d, host, communication: commWait };
}

/** The phase shares of some steps' sums; null without steps. */
export function phaseShares(s: StepSums): PhaseShares | null {
  if (s.steps === 0 || s.durNs === 0 || s.dataNs + s.h2dNs + s.computeNs + s.otherNs === 0) return null;
  // Collectives: over the steps that measured them only, so a job that turned them on mid-window is not diluted.
  const commDur = commStepsNs(s);
  return {
    breakdown: breakdownOf(s),
    gpuIdle: s.gpuIdleSteps ? s.gpuIdleNs / s.durNs : null,
    commWait: commDur > 0 ? s.commWaitNs / commDur : null,
  };
}

/**
 * One-sided 95% quantiles of Student's t by degrees of freedom (NIST/SEMATECH e-Handbook of
 * Statistical Methods, 1.3.6.7.2, "Critical values of the Student's t distribution", α = 0.05).
 */
const T95: ReadonlyArray<readonly [number, number]> = [
  [1, 6.314], [2, 2.92], [3, 2.353], [4, 2.132], [5, 2.015], [6, 1.943], [7, 1.895], [8, 1.86], [9, 1.833], [10, 1.812],
  [12, 1.782], [15, 1.753], [20, 1.725], [30, 1.697], [60, 1.671], [120, 1.658],
];
const T95_INFINITY = 1.645;

/** The table's value at the largest tabled degrees of freedom not above `df`: never narrower than the exact quantile. */
export function t95(df: number): number {
  let t = T95_INFINITY;
  for (const [at, value] of T95) if (at <= df) t = value;
  return df >= 1 ? t : Number.POSITIVE_INFINITY;
}

/**
 * How far below the mean a share may truly lie (the half-width of its one-sided 95% interval), from
 * the shares of the window's slices in time order, each weighted by its step time; null with fewer
 * than two slices (no spread to judge by). The spread is the mean square successive difference: it
 * measures jitter from one slice to the next, and a change of regime contributes one difference,
 * not a variance across the whole window.
 */
export function margin(points: ReadonlyArray<{ share: number; weight: number }>): number | null {
  const k = points.length;
  if (k < 2) return null;
  let successive = 0;
  for (let i = 1; i < k; i++) successive += (points[i]!.share - points[i - 1]!.share) ** 2;
  const variance = successive / (2 * (k - 1));
  const sum = points.reduce((a, p) => a + p.weight, 0);
  const squares = points.reduce((a, p) => a + p.weight ** 2, 0);
  if (sum <= 0) return null;
  // The weighted mean's standard error: the slices' spread over their effective number.
  return t95(k - 1) * Math.sqrt(variance * squares) / sum;
}

/**
 * The window's lost shares with their lower bounds: `total` the window's sums, `slices` its slices
 * with steps, oldest first. Without two slices the bound is the share itself.
 */
export function windowLost(total: StepSums, slices: readonly StepSums[]): WindowLost | null {
  const whole = phaseShares(total);
  if (!whole) return null;
  const shares = lostOf(whole);
  const perSlice = slices.flatMap((s) => {
    const p = phaseShares(s);
    return p ? [{ lost: lostOf(p), weight: s.durNs }] : [];
  });
  const bound = (limiter: StepLimiter): LostShare | null => {
    const share = shares[limiter];
    if (share === null) return null;
    const points = perSlice.flatMap((s) => (s.lost[limiter] === null ? [] : [{ share: s.lost[limiter]!, weight: s.weight }]));
    const m = margin(points);
    return { share: round(share, 4), low: round(m === null ? share : Math.max(0, share - m), 4) };
  };
  return { slices: perSlice.length, input: bound('input')!, transfer: bound('transfer')!, host: bound('host')!, communication: bound('communication') };
}

/**
 * The level of a limiter whose share holds at least `low`: high at its verdict's bar (or held there
 * while its verdict is in force), moderate from MODERATE, else none (null).
 */
export function levelOf(low: number, bar: number, held = false): Level | null {
  if (low >= bar || held) return 'high';
  return low >= MODERATE ? 'moderate' : null;
}

/** Every limiter that costs at least MODERATE (at its lower bound), most costly first. */
export function listLimiters(costs: Partial<Record<Limiter, LostShare>>, bars: Record<Limiter, number>, held: Limiter | null): LimiterCost[] {
  return LIMITERS.flatMap((limiter) => {
    const cost = costs[limiter];
    if (!cost) return [];
    const level = levelOf(cost.low, bars[limiter], limiter === held);
    return level ? [{ limiter, share: cost.share, low: cost.low, level }] : [];
  }).sort((a, b) => b.share - a.share);
}
