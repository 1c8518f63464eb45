import { describe, expect, it } from 'vitest';
import { memoryWindow } from '../src/analysis/memory-window.js';
import { rankWindow, type ProcessAt } from '../src/analysis/window.js';
import { emptyGpuSample, ThrottleReason, type GpuSample } from '../src/counters/types.js';
import type { StepRecord } from '../src/protocol/messages.js';
import { StepBuckets } from '../src/store/step-buckets.js';

const step = (seq: number, ms: { dur: number; data?: number; compute?: number; idle?: number }): StepRecord => ({
  seq,
  step: seq,
  endNs: 0,
  durNs: ms.dur * 1e6,
  dataNs: (ms.data ?? 0) * 1e6,
  h2dNs: 0,
  computeNs: (ms.compute ?? 0) * 1e6,
  samples: 8,
  gpuH2dNs: null,
  gpuComputeNs: ms.idle === undefined ? null : (ms.compute ?? 0) * 1e6,
  gpuIdleNs: ms.idle === undefined ? null : ms.idle * 1e6, commNs: null, commWaitNs: null, commBytes: null, evalNs: null,
});

const gpuAt = (at: number, clock: number, reasons: number, util = 90): GpuSample => ({
  ...emptyGpuSample(at, 0),
  uuid: 'GPU-x',
  utilGpu: util,
  smClockMHz: clock,
  smClockMaxMHz: 1980,
  powerW: 350,
  powerLimitW: 700,
  tempC: 80,
  memUsedMiB: 40_000,
  memTotalMiB: 80_000,
  throttleReasons: reasons,
});

describe('StepBuckets', () => {
  it('sums the steps that ended inside a window, at any step rate', () => {
    const buckets = new StepBuckets(250, 40);
    for (let i = 0; i < 1000; i++) buckets.add(step(i + 1, { dur: 1, data: 0.5 }), 10_000 + i);
    expect(buckets.between(10_000, 10_500).steps).toBe(500);
    expect(buckets.between(10_000, 11_000).dataNs).toBeCloseTo(1000 * 0.5e6);
    expect(buckets.between(20_000, 21_000).steps).toBe(0);
  });

  it('forgets slices older than it keeps', () => {
    const buckets = new StepBuckets(250, 4);
    buckets.add(step(1, { dur: 1 }), 0);
    buckets.add(step(2, { dur: 1 }), 2_000);
    buckets.add(step(3, { dur: 1 }), 0);
    expect(buckets.between(0, 250).steps).toBe(0);
    expect(buckets.between(2_000, 2_250).steps).toBe(1);
  });
});

describe('rankWindow', () => {
  it('lines up step shares with the GPU counters of the same seconds', () => {
    const buckets = new StepBuckets();
    for (let i = 0; i < 20; i++) buckets.add(step(i + 1, { dur: 100, data: 40, compute: 50, idle: 30 }), 1_000 + i * 100);
    const gpu = [gpuAt(1_000, 1980, 0), gpuAt(1_500, 1980, 0), gpuAt(2_000, 1100, ThrottleReason.HwThermalSlowdown), gpuAt(2_500, 1100, ThrottleReason.HwThermalSlowdown | ThrottleReason.SwPowerCap)];
    const window = rankWindow({ from: 1_000, to: 3_000, steps: buckets.between(1_000, 3_000), stepMs: [100, 100, 100], gpu: { samples: gpu, matchedBy: 'uuid' }, host: [], process: [], memory: [] });
    expect(window.steps).toBe(20);
    expect(window.breakdown).toEqual({ data: 0.4, h2d: 0, compute: 0.5, other: 0.1 });
    expect(window.gpu_idle_share).toBe(0.3);
    expect(window.samples_per_s).toBe(80);
    expect(window.gpu).toMatchObject({
      samples: 4,
      sm_clock_frac_min: 0.5556,
      sm_clock_frac_mean: 0.7778,
      throttle_share: { HwThermalSlowdown: 0.5, SwPowerCap: 0.25 },
      power_frac_mean: 0.5,
      mem_used_frac: 0.5,
      latest: { sm_clock_mhz: 1100, throttle_reasons: ['SwPowerCap', 'HwThermalSlowdown'] },
    });
  });

  it('says "not available" with null rather than zero when a counter is missing', () => {
    const mig = { ...emptyGpuSample(1_000, 0), uuid: 'MIG-1', memUsedMiB: 100, memTotalMiB: 10_000 };
    const window = rankWindow({ from: 0, to: 2_000, steps: new StepBuckets().between(0, 2_000), stepMs: [], gpu: { samples: [mig], matchedBy: 'local-rank' }, host: [], process: [], memory: [] });
    expect(window.steps).toBe(0);
    expect(window.breakdown).toBeNull();
    expect(window.gpu).toMatchObject({ util_mean: null, sm_clock_frac_mean: null, throttle_share: {}, mem_used_frac: 0.01 });
    expect(window.process).toBeNull();
  });

  it("turns the hook's cumulative process and cgroup counters into rates", () => {
    const base = { cpu_main_s: 10, cpu_workers_s: 20, workers: 4, rss_bytes: 1e9, cgroup_nr_periods: 1000, cgroup_nr_throttled: 100, cgroup_throttled_usec: 5e6, cgroup_quota_cores: 4, cgroup_usage_usec: 30e6, train_cpu_s: null, train_wait_s: null };
    const process: ProcessAt[] = [
      { at_ns: 0, at: 1_000, ...base },
      { at_ns: 1e9, at: 2_000, ...base, cpu_main_s: 10.9, cpu_workers_s: 23, cgroup_nr_periods: 1010, cgroup_nr_throttled: 108, cgroup_throttled_usec: 5.4e6, cgroup_usage_usec: 33.9e6 },
    ];
    const window = rankWindow({ from: 0, to: 2_000, steps: new StepBuckets().between(0, 2_000), stepMs: [], gpu: null, host: [], process, memory: [] });
    expect(window.process).toEqual({
      seconds: 1,
      cpu_main_cores: 0.9,
      cpu_workers_cores: 3,
      workers: 4,
      rss_bytes: 1e9,
      cgroup_quota_cores: 4,
      cgroup_usage_cores: 3.9,
      cgroup_throttled_share: 0.8,
      cgroup_throttled_s_per_s: 0.4,
      train_cpu_cores: null,
      train_wait_share: null,
    });
  });

  it("gives the training thread's CPU and its wait for a CPU over the whole window, not the last second", () => {
    const base = { cpu_main_s: 0, cpu_workers_s: 0, workers: 2, rss_bytes: 1e9, cgroup_nr_periods: null, cgroup_nr_throttled: null, cgroup_throttled_usec: null, cgroup_quota_cores: null, cgroup_usage_usec: null };
    // On a CPU 60% of the time and waiting for one 30%, over 4 s; the last second alone would say 10%.
    const process: ProcessAt[] = [
      { at_ns: 0, at: 0, ...base, train_cpu_s: 5, train_wait_s: 1 },
      { at_ns: 3e9, at: 3_000, ...base, train_cpu_s: 6.8, train_wait_s: 2.1 },
      { at_ns: 4e9, at: 4_000, ...base, train_cpu_s: 7.4, train_wait_s: 2.2 },
    ];
    const window = rankWindow({ from: 0, to: 4_000, steps: new StepBuckets().between(0, 4_000), stepMs: [], gpu: null, host: [], process, memory: [] });
    expect(window.process).toMatchObject({ train_cpu_cores: 0.6, train_wait_share: 0.3 });
  });
});

describe('the allocator over a window', () => {
  const sample = (at: number, allocated: number, retries: number) => ({
    at,
    at_ns: at * 1e6,
    device: 0,
    allocated_bytes: allocated,
    reserved_bytes: 30e9,
    peak_allocated_bytes: allocated + 2e9,
    alloc_retries: retries,
    ooms: 0,
    inactive_split_bytes: 3e9,
    total_bytes: 80e9,
    free_bytes: null,
  });

  it('counts retries in the window and forecasts when growth fills the device', () => {
    // 10 minutes at 1 a second, allocated memory growing 10 MB a second.
    const samples = Array.from({ length: 600 }, (_, i) => sample(i * 1000, 20e9 + i * 1e7, i >= 596 ? 5 : 0));
    const memory = memoryWindow(samples, 595_000, 599_000)!;
    expect(memory).toMatchObject({ alloc_retries: 5, ooms: 0, reserved_frac: 0.375, fragmentation: 0.1, growth_bytes_per_s: 10_000_000 });
    // Headroom: 80e9 − (20e9 + 599e7 + 2e9) = 52.01e9 bytes at 1e7 a second.
    expect(memory.exhausted_in_s).toBe(5201);
  });

  it('makes no forecast from under two minutes of samples, nor for memory that does not grow', () => {
    const short = Array.from({ length: 60 }, (_, i) => sample(i * 1000, 20e9 + i * 1e8, 0));
    expect(memoryWindow(short, 55_000, 59_000)).toMatchObject({ growth_bytes_per_s: null, exhausted_in_s: null });
    const flat = Array.from({ length: 300 }, (_, i) => sample(i * 1000, 20e9 + (i % 2) * 1e6, 0));
    expect(memoryWindow(flat, 295_000, 299_000)!.exhausted_in_s).toBeNull();
    expect(memoryWindow([], 0, 1)).toBeNull();
  });
});
