import { ThrottleReason, type GpuSample, type ThrottleReasonName } from '../counters/types.js';
import { sig3 } from './series-round.js';

/** One GPU's samples over one slice of a run's series (summary-series.ts): mergeable sums. Pure. */

/** Reasons that take clock away from a busy GPU (verdict rules: thermal, power, hw-slowdown). */
const HARMFUL: ThrottleReasonName[] = ['HwThermalSlowdown', 'SwThermalSlowdown', 'SwPowerCap', 'HwPowerBrakeSlowdown', 'HwSlowdown'];
const HARMFUL_MASK = HARMFUL.reduce((mask, name) => mask | ThrottleReason[name], 0);

interface Sum {
  total: number;
  n: number;
}

export interface GpuSlice {
  util: Sum;
  clockPct: Sum;
  powerW: Sum;
  tempMaxC: number | null;
  memMaxMiB: number | null;
  /** Samples that report throttle reasons, and those of them with a harmful one active. */
  reasonSamples: number;
  harmful: number;
}

export const emptyGpuSlice = (): GpuSlice => ({ util: { total: 0, n: 0 }, clockPct: { total: 0, n: 0 }, powerW: { total: 0, n: 0 }, tempMaxC: null, memMaxMiB: null, reasonSamples: 0, harmful: 0 });

const add = (sum: Sum, value: number | null) => {
  if (value === null || !Number.isFinite(value)) return;
  sum.total += value;
  sum.n += 1;
};
const maxOf = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));
const meanOf = (sum: Sum) => (sum.n ? sig3(sum.total / sum.n) : null);

export function addGpuSample(slice: GpuSlice, s: GpuSample): void {
  add(slice.util, s.utilGpu);
  add(slice.clockPct, s.smClockMHz !== null && s.smClockMaxMHz ? (100 * s.smClockMHz) / s.smClockMaxMHz : null);
  add(slice.powerW, s.powerW);
  slice.tempMaxC = maxOf(slice.tempMaxC, s.tempC);
  slice.memMaxMiB = maxOf(slice.memMaxMiB, s.memUsedMiB);
  if (s.throttleReasons !== null) {
    slice.reasonSamples += 1;
    if (s.throttleReasons & HARMFUL_MASK) slice.harmful += 1;
  }
}

export function mergeGpuSlice(into: GpuSlice, from: GpuSlice): void {
  for (const key of ['util', 'clockPct', 'powerW'] as const) {
    into[key].total += from[key].total;
    into[key].n += from[key].n;
  }
  into.tempMaxC = maxOf(into.tempMaxC, from.tempMaxC);
  into.memMaxMiB = maxOf(into.memMaxMiB, from.memMaxMiB);
  into.reasonSamples += from.reasonSamples;
  into.harmful += from.harmful;
}

/** The slice's figures as the series shows them. */
export function describeGpuSlice(g: GpuSlice) {
  return {
    util_pct: meanOf(g.util),
    sm_clock_pct: meanOf(g.clockPct),
    power_w: meanOf(g.powerW),
    temp_c_max: g.tempMaxC,
    mem_used_mib_max: g.memMaxMiB,
    throttled: g.reasonSamples ? sig3(g.harmful / g.reasonSamples) : null,
  };
}
