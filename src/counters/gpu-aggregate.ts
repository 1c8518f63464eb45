import { ThrottleReason, type GpuSample, type ThrottleReasonName } from './types.js';

/** Mergeable sums of a GPU's samples, so a job's GPU figures cover all of it in fixed memory. */
export interface GpuAggregate {
  samples: number;
  util: Sum;
  clockFrac: Sum;
  powerFrac: Sum;
  reasonSamples: number;
  reasonActive: Partial<Record<ThrottleReasonName, number>>;
  tempMaxC: number | null;
  memPeakMiB: number | null;
  memTotalMiB: number | null;
  smClockMaxMHz: number | null;
  powerLimitW: number | null;
}

interface Sum {
  total: number;
  n: number;
}

export const emptyAggregate = (): GpuAggregate => ({
  samples: 0,
  util: { total: 0, n: 0 },
  clockFrac: { total: 0, n: 0 },
  powerFrac: { total: 0, n: 0 },
  reasonSamples: 0,
  reasonActive: {},
  tempMaxC: null,
  memPeakMiB: null,
  memTotalMiB: null,
  smClockMaxMHz: null,
  powerLimitW: null,
});

const addTo = (sum: Sum, value: number | null) => {
  if (value === null || !Number.isFinite(value)) return;
  sum.total += value;
  sum.n += 1;
};
const maxOf = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));

export function addSample(agg: GpuAggregate, s: GpuSample): void {
  agg.samples += 1;
  agg.smClockMaxMHz = s.smClockMaxMHz ?? agg.smClockMaxMHz;
  agg.powerLimitW = s.powerLimitW ?? agg.powerLimitW;
  agg.memTotalMiB = s.memTotalMiB ?? agg.memTotalMiB;
  addTo(agg.util, s.utilGpu);
  addTo(agg.clockFrac, s.smClockMHz !== null && agg.smClockMaxMHz ? s.smClockMHz / agg.smClockMaxMHz : null);
  addTo(agg.powerFrac, s.powerW !== null && agg.powerLimitW ? s.powerW / agg.powerLimitW : null);
  if (s.throttleReasons !== null) {
    agg.reasonSamples += 1;
    for (const [name, bit] of Object.entries(ThrottleReason) as [ThrottleReasonName, number][]) {
      if (s.throttleReasons & bit) agg.reasonActive[name] = (agg.reasonActive[name] ?? 0) + 1;
    }
  }
  agg.tempMaxC = maxOf(agg.tempMaxC, s.tempC);
  agg.memPeakMiB = maxOf(agg.memPeakMiB, s.memUsedMiB);
}

export function mergeAggregate(into: GpuAggregate, from: GpuAggregate): void {
  into.samples += from.samples;
  for (const key of ['util', 'clockFrac', 'powerFrac'] as const) {
    into[key].total += from[key].total;
    into[key].n += from[key].n;
  }
  into.reasonSamples += from.reasonSamples;
  for (const [name, count] of Object.entries(from.reasonActive) as [ThrottleReasonName, number][]) {
    into.reasonActive[name] = (into.reasonActive[name] ?? 0) + count;
  }
  into.tempMaxC = maxOf(into.tempMaxC, from.tempMaxC);
  into.memPeakMiB = maxOf(into.memPeakMiB, from.memPeakMiB);
  into.memTotalMiB = from.memTotalMiB ?? into.memTotalMiB;
  into.smClockMaxMHz = from.smClockMaxMHz ?? into.smClockMaxMHz;
  into.powerLimitW = from.powerLimitW ?? into.powerLimitW;
}

const round = (x: number, digits = 4) => Math.round(x * 10 ** digits) / 10 ** digits;
const meanOf = (sum: Sum, scale = 1) => (sum.n ? round((sum.total / sum.n) * scale) : null);

export interface GpuOverJob {
  samples: number;
  util_mean: number | null;
  sm_clock_frac_mean: number | null;
  sm_clock_max_mhz: number | null;
  throttle_share: Partial<Record<ThrottleReasonName, number>>;
  temp_c_max: number | null;
  power_frac_mean: number | null;
  power_limit_w: number | null;
  mem_peak_mib: number | null;
  mem_total_mib: number | null;
}

export function describeAggregate(agg: GpuAggregate): GpuOverJob {
  const share: Partial<Record<ThrottleReasonName, number>> = {};
  for (const [name, count] of Object.entries(agg.reasonActive) as [ThrottleReasonName, number][]) share[name] = round(count / agg.reasonSamples);
  return {
    samples: agg.samples,
    util_mean: meanOf(agg.util),
    sm_clock_frac_mean: meanOf(agg.clockFrac),
    sm_clock_max_mhz: agg.smClockMaxMHz,
    throttle_share: share,
    temp_c_max: agg.tempMaxC,
    power_frac_mean: meanOf(agg.powerFrac),
    power_limit_w: agg.powerLimitW,
    mem_peak_mib: agg.memPeakMiB,
    mem_total_mib: agg.memTotalMiB,
  };
}
