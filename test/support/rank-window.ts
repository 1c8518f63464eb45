import type { StepGpuWindow, StepWindow } from '../../src/analysis/window.js';
import { lostOf } from '../../src/analysis/limiters.js';

/**
 * A rank's window as the rules read it, for tests of the rules and the advice: 100 steps of 40 ms on
 * a busy A10 at full clocks, the host at ease; shares and any part overridden. Its limiters' lost
 * shares follow from the shares (and any GPU idle share or collectives given), steady across the
 * window (each bound equal to its share) unless `lost` is given.
 */

export const gpu = (over: Partial<StepGpuWindow> = {}): StepGpuWindow => ({
  index: 0,
  uuid: 'GPU-0',
  key: 'GPU-0',
  name: 'NVIDIA A10',
  matched_by: 'uuid',
  samples: 8,
  util_mean: 95,
  util_min: 90,
  sm_clock_mhz_mean: 1695,
  sm_clock_max_mhz: 1695,
  sm_clock_frac_mean: 1,
  sm_clock_frac_min: 1,
  throttle_share: {},
  throttle_unchecked: null,
  power_w_mean: 140,
  power_limit_w: 150,
  power_frac_mean: 0.93,
  temp_c_max: 70,
  mem_used_mib_max: 14_000,
  mem_total_mib: 23_028,
  mem_used_frac: 0.61,
  sm_active_mean: null,
  sm_occupancy_mean: null,
  tensor_active_mean: null,
  dram_active_mean: null,
  throttle_filled: null,
  other_processes: null,
  latest: { at: 0, util: 95, sm_clock_mhz: 1695, temp_c: 70, throttle_reasons: [] },
  ...over,
});

export const window = (shares: { data?: number; h2d?: number; compute?: number; other?: number }, over: Partial<StepWindow> = {}): StepWindow => {
  const data = shares.data ?? 0;
  const h2d = shares.h2d ?? 0;
  const other = shares.other ?? 0;
  const compute = shares.compute ?? 1 - data - h2d - other;
  const base: Omit<StepWindow, 'lost'> = {
    from: 0,
    to: 0,
    seconds: 4,
    steps: 100,
    step_ms_mean: 40,
    step_ms_p50: 40,
    step_ms_p90: 42,
    samples_per_s: 800,
    breakdown: { data, h2d, compute, other },
    gpu_idle_share: null,
    eval_share: null,
    gpu: gpu(),
    host: { samples: 4, cpu_pct_mean: 30, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 1, mem_used_frac: 0.3, cpu_pressure_pct: null, memory_pressure_pct: null, top_consumers: null },
    process: null,
    comm: null,
    memory: null,
    ...over,
  };
  const lostShares = lostOf({ breakdown: { data, h2d, other }, gpuIdle: base.gpu_idle_share, commWait: base.comm?.wait_share ?? null });
  const steady = (share: number | null) => (share === null ? null : { share, low: share });
  const lost = over.lost !== undefined ? over.lost : { slices: 16, input: steady(lostShares.input)!, transfer: steady(lostShares.transfer)!, host: steady(lostShares.host)!, communication: steady(lostShares.communication) };
  return { ...base, lost };
};

