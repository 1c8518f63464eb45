import { largestFirst, type ComputeApp } from './compute-apps.js';
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
  /** Compute processes seen on the GPU (nvidia-smi only), by pid: the most memory each held. Absent where none was read. */
  processes?: Record<string, GpuProcessPeak>;
}

export interface GpuProcessPeak {
  pid: number;
  name: string;
  used_mib_max: number | null;
}

/** Processes an aggregate keeps, the largest first: a GPU shared by hundreds of short runs stays bounded. */
const PROCESSES_KEPT = 16;

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

/** One `--query-compute-apps` reading of this GPU's processes. */
export function addProcesses(agg: GpuAggregate, apps: readonly ComputeApp[]): void {
  mergeProcesses(agg, Object.fromEntries(apps.map((app) => [String(app.pid), { pid: app.pid, name: app.name, used_mib_max: app.usedMiB }])));
}

function mergeProcesses(into: GpuAggregate, from: Record<string, GpuProcessPeak>): void {
  const all = { ...(into.processes ?? {}) };
  for (const [pid, peak] of Object.entries(from)) {
    const held = all[pid];
    all[pid] = held ? { ...peak, used_mib_max: maxOf(held.used_mib_max, peak.used_mib_max) } : peak;
  }
  into.processes = Object.fromEntries(biggestFirst(Object.values(all)).slice(0, PROCESSES_KEPT).map((peak) => [String(peak.pid), peak]));
}

const biggestFirst = (peaks: GpuProcessPeak[]) => peaks.sort(largestFirst((p) => p.used_mib_max));

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
  if (from.processes) mergeProcesses(into, from.processes);
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
  /** Compute processes seen on the GPU over the span, the largest first; absent where none were read (DCGM, the hook). */
  processes?: GpuProcessPeak[];
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
    ...(agg.processes ? { processes: biggestFirst(Object.values(agg.processes)) } : {}),
  };
}
