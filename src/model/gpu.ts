/**
 * A GPU's counters as the sidecar holds them, and the NVML throttle-reason names. Every figure is
 * `null` when the source does not report it (a MIG instance has no utilization, DCGM may lack
 * profiling fields): "not available", never a crash and never a made-up zero.
 */

export interface GpuSample {
  /** Sidecar clock, ms since the epoch, when the sample was read. */
  at: number;
  /** NVML index of the physical GPU (a MIG instance shares its parent's). */
  index: number;
  /** This device's own UUID: `GPU-…`, or `MIG-…` for a MIG instance where the source names it. */
  uuid: string | null;
  name: string | null;
  /** A MIG instance's physical GPU; null for a whole GPU. */
  parentUuid: string | null;
  /** A MIG instance's GPU instance and compute instance ids, and its profile ("3g.40gb"). */
  gpuInstanceId: number | null;
  computeInstanceId: number | null;
  migProfile: string | null;
  /** Percent, 0..100. Under DCGM a MIG instance has no GPU_UTIL; there it is GR_ENGINE_ACTIVE × 100. */
  utilGpu: number | null;
  utilMem: number | null;
  memUsedMiB: number | null;
  memTotalMiB: number | null;
  tempC: number | null;
  powerW: number | null;
  /** Which reading powerW is (see PowerReading). */
  powerReading: PowerReading | null;
  powerLimitW: number | null;
  smClockMHz: number | null;
  smClockMaxMHz: number | null;
  memClockMHz: number | null;
  /** "P0".."P15". */
  pstate: string | null;
  /** Active clock-event (throttle) reasons, NVML bitmask (see ThrottleReason). */
  throttleReasons: number | null;
  /** Profiling activities, fractions 0..1: DCGM's profiling fields, or NVML GPM through the hook. */
  grEngineActive: number | null;
  smActive: number | null;
  smOccupancy: number | null;
  tensorActive: number | null;
  dramActive: number | null;
  /** Bytes per second over PCIe. */
  pcieTxBps: number | null;
  pcieRxBps: number | null;
}

/**
 * `average` and `instant` are nvidia-smi's power.draw.average / power.draw.instant (DCGM's
 * POWER_USAGE_INSTANT); `draw` is plain power.draw or NVML's power usage, a 1 s average on Ampere
 * and newer and an instant reading before, per `nvidia-smi --help-query-gpu`.
 */
export type PowerReading = 'average' | 'instant' | 'draw';

/** The reason names, in bit order. */
export const THROTTLE_REASON_NAMES = [
  'GpuIdle',
  'ApplicationsClocksSetting',
  'SwPowerCap',
  'HwSlowdown',
  'SyncBoost',
  'SwThermalSlowdown',
  'HwThermalSlowdown',
  'HwPowerBrakeSlowdown',
  'DisplayClockSetting',
] as const;
export type ThrottleReasonName = (typeof THROTTLE_REASON_NAMES)[number];

/** NVML clock-event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*). */
export const ThrottleReason = {
  GpuIdle: 0x1,
  ApplicationsClocksSetting: 0x2,
  SwPowerCap: 0x4,
  HwSlowdown: 0x8,
  SyncBoost: 0x10,
  SwThermalSlowdown: 0x20,
  HwThermalSlowdown: 0x40,
  HwPowerBrakeSlowdown: 0x80,
  DisplayClockSetting: 0x100,
} as const satisfies Record<ThrottleReasonName, number>;

export function throttleReasonNames(mask: number | null): ThrottleReasonName[] {
  if (mask === null) return [];
  return THROTTLE_REASON_NAMES.filter((name) => (mask & ThrottleReason[name]) !== 0);
}

export function emptyGpuSample(at: number, index: number): GpuSample {
  return {
    at,
    index,
    uuid: null,
    name: null,
    parentUuid: null,
    gpuInstanceId: null,
    computeInstanceId: null,
    migProfile: null,
    utilGpu: null,
    utilMem: null,
    memUsedMiB: null,
    memTotalMiB: null,
    tempC: null,
    powerW: null,
    powerReading: null,
    powerLimitW: null,
    smClockMHz: null,
    smClockMaxMHz: null,
    memClockMHz: null,
    pstate: null,
    throttleReasons: null,
    grEngineActive: null,
    smActive: null,
    smOccupancy: null,
    tensorActive: null,
    dramActive: null,
    pcieTxBps: null,
    pcieRxBps: null,
  };
}
