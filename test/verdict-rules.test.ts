import { describe, expect, it } from 'vitest';
import { findStraggler } from '../src/model/straggler.js';
import { VerdictTracker } from '../src/analysis/tracker.js';
import { judge, type RankContext } from '../src/analysis/verdict.js';
import type { GpuWindow, RankWindow } from '../src/analysis/window.js';

const gpu = (over: Partial<GpuWindow> = {}): GpuWindow => ({
  index: 0,
  uuid: 'GPU-0',
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
  power_w_mean: 140,
  power_limit_w: 150,
  power_frac_mean: 0.93,
  temp_c_max: 70,
  mem_used_mib_max: 14_000,
  mem_total_mib: 23_028,
  mem_used_frac: 0.61,
  sm_active_mean: null,
  tensor_active_mean: null,
  latest: { at: '', util: 95, sm_clock_mhz: 1695, temp_c: 70, throttle_reasons: [] },
  ...over,
});

const window = (shares: { data?: number; h2d?: number; compute?: number; other?: number }, over: Partial<RankWindow> = {}): RankWindow => {
  const data = shares.data ?? 0;
  const h2d = shares.h2d ?? 0;
  const other = shares.other ?? 0;
  const compute = shares.compute ?? 1 - data - h2d - other;
  return {
    from: '',
    to: '',
    seconds: 4,
    steps: 100,
    step_ms_mean: 40,
    step_ms_p50: 40,
    step_ms_p90: 42,
    samples_per_s: 800,
    breakdown: { data, h2d, compute, other },
    gpu_idle_share: null,
    gpu: gpu(),
    host: { samples: 4, cpu_pct_mean: 30, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 1, mem_used_frac: 0.3 },
    process: null,
    ...over,
  };
};

const context = (over: Partial<RankContext> = {}): RankContext => ({
  totalSteps: 1000,
  sinceLastStepMs: 20,
  env: { loader: { num_workers: 4, pin_memory: true, persistent_workers: true, prefetch_factor: 2 } },
  hostCores: 8,
  current: null,
  ...over,
});

describe('the verdict rules', () => {
  it('calls a job that computes at full clocks compute-bound', () => {
    expect(judge(window({ data: 0.03, other: 0.05 }), context())).toMatchObject({ verdict: 'compute-bound', cause: null });
  });

  it('calls 20% or more of step time waiting for data input-bound, and names the cause', () => {
    const j = judge(window({ data: 0.4 }), context({ env: { loader: { num_workers: 0 } } }));
    expect(j).toMatchObject({ verdict: 'input-bound', cause: 'few-workers' });
    expect(j.evidence.lost.input).toBe(0.4);
    expect(j.evidence.rule).toMatch(/40% of step time waiting for data/);
    expect(j.recommendations[0]!.id).toBe('raise-num-workers');
  });

  it('does not call 15% of data wait input-bound (moderate, under the 20% bar)', () => {
    expect(judge(window({ data: 0.15 }), context()).verdict).toBe('compute-bound');
  });

  it('ignores data wait of tiny steps under 2 ms a step', () => {
    expect(judge(window({ data: 0.5 }, { step_ms_mean: 3 }), context()).verdict).toBe('compute-bound');
  });

  it.each([
    ['cgroup-throttled', { process: { seconds: 1, cpu_main_cores: 0.3, cpu_workers_cores: 1.9, workers: 4, rss_bytes: 1, cgroup_quota_cores: 2, cgroup_usage_cores: 2, cgroup_throttled_share: 0.6, cgroup_throttled_s_per_s: 0.5 } }],
    ['io-wait', { host: { samples: 4, cpu_pct_mean: 30, iowait_pct_mean: 25, steal_pct_mean: 0, load1: 5, mem_used_frac: 0.3 } }],
    ['cpu-saturated', { host: { samples: 4, cpu_pct_mean: 97, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 9, mem_used_frac: 0.3 } }],
    ['few-workers', { process: { seconds: 1, cpu_main_cores: 0.3, cpu_workers_cores: 3.8, workers: 4, rss_bytes: 1, cgroup_quota_cores: null, cgroup_usage_cores: null, cgroup_throttled_share: null, cgroup_throttled_s_per_s: null } }],
    ['unknown', {}],
  ] as const)('names the input-bound cause %s from the counters', (cause, over) => {
    expect(judge(window({ data: 0.5 }, over as Partial<RankWindow>), context())).toMatchObject({ verdict: 'input-bound', cause });
  });

  it('with CUDA idle gaps, counts only the data wait the GPU felt', () => {
    const overlapped = window({ data: 0.4 }, { gpu_idle_share: 0.02 });
    expect(judge(overlapped, context()).verdict).toBe('compute-bound');
    const starved = window({ data: 0.4 }, { gpu_idle_share: 0.35 });
    expect(judge(starved, context())).toMatchObject({ verdict: 'input-bound', evidence: { lost: { input: 0.35 } } });
  });

  it('calls slow host-to-device copies transfer-bound', () => {
    expect(judge(window({ h2d: 0.3 }), context()).verdict).toBe('transfer-bound');
  });

  it('calls time outside the phases host-bound', () => {
    expect(judge(window({ other: 0.35 }), context())).toMatchObject({ verdict: 'host-bound', cause: 'outside-phases' });
  });

  it('calls a compute phase with the GPU mostly idle host-bound', () => {
    expect(judge(window({ data: 0.02 }, { gpu: gpu({ util_mean: 20 }) }), context())).toMatchObject({ verdict: 'host-bound', cause: 'gpu-idle-in-compute' });
  });

  it.each([
    ['thermal', { HwThermalSlowdown: 1 }],
    ['power', { SwPowerCap: 0.9 }],
    ['hw-slowdown', { HwSlowdown: 0.8 }],
  ] as const)('calls a busy GPU held below its clocks by %s throttled', (cause, shares) => {
    const j = judge(window({ data: 0.02 }, { gpu: gpu({ sm_clock_frac_mean: 0.55, throttle_share: shares }) }), context());
    expect(j).toMatchObject({ verdict: 'throttled', cause });
    expect(j.evidence.lost.throttle).toBeCloseTo(0.98 * 0.45, 2);
  });

  it('calls a busy GPU far below its clocks with no reason clocks-low', () => {
    expect(judge(window({}, { gpu: gpu({ sm_clock_frac_mean: 0.5 }) }), context())).toMatchObject({ verdict: 'throttled', cause: 'clocks-low' });
  });

  it('does not call a GPU at its power cap throttled when its clocks stay above 85%', () => {
    expect(judge(window({}, { gpu: gpu({ sm_clock_frac_mean: 0.9, throttle_share: { SwPowerCap: 1 } }) }), context()).verdict).toBe('compute-bound');
  });

  it('does not call an idle GPU with low clocks throttled', () => {
    expect(judge(window({}, { gpu: gpu({ util_mean: 10, sm_clock_frac_mean: 0.2, throttle_share: { GpuIdle: 1 } }) }), context()).verdict).not.toBe('throttled');
  });

  it('names the limiter that costs most when several are over their bars', () => {
    const both = window({ data: 0.25, compute: 0.75 }, { gpu: gpu({ sm_clock_frac_mean: 0.5, throttle_share: { HwThermalSlowdown: 1 } }) });
    expect(judge(both, context()).verdict).toBe('throttled');
    const dataWins = window({ data: 0.6, compute: 0.4 }, { gpu: gpu({ sm_clock_frac_mean: 0.7, throttle_share: { HwThermalSlowdown: 1 } }) });
    expect(judge(dataWins, context()).verdict).toBe('input-bound');
  });

  it('keeps a verdict in force until its share falls well under the bar (no flapping at 20%)', () => {
    expect(judge(window({ data: 0.17 }), context({ current: 'input-bound' })).verdict).toBe('input-bound');
    expect(judge(window({ data: 0.17 }), context({ current: 'compute-bound' })).verdict).toBe('compute-bound');
    expect(judge(window({ data: 0.1 }), context({ current: 'input-bound' })).verdict).toBe('compute-bound');
  });

  it('says warming-up for the first steps and idle when steps stop', () => {
    expect(judge(window({ data: 0.5 }), context({ totalSteps: 5 })).verdict).toBe('warming-up');
    expect(judge(window({ data: 0.5 }), context({ sinceLastStepMs: 30_000 })).verdict).toBe('idle');
    expect(judge(window({ data: 0.5 }), context({ sinceLastStepMs: null, totalSteps: 0 })).verdict).toBe('warming-up');
  });
});

describe('VerdictTracker', () => {
  const j = (verdict: 'compute-bound' | 'input-bound') => judge(window(verdict === 'input-bound' ? { data: 0.5 } : {}), context());

  it('lets a new verdict take over only after it has held for the hold time, dated from when it began', () => {
    const tracker = new VerdictTracker(3_000);
    expect(tracker.update(j('compute-bound'), 0)?.to).toBe('compute-bound');
    expect(tracker.update(j('input-bound'), 1_000)).toBeNull();
    expect(tracker.update(j('input-bound'), 3_000)).toBeNull();
    const change = tracker.update(j('input-bound'), 4_000);
    expect(change).toMatchObject({ from: 'compute-bound', to: 'input-bound', since: 1_000, at: 4_000 });
  });

  it('does not restart the hold when only the cause of the pending verdict settles', () => {
    const tracker = new VerdictTracker(2_000);
    tracker.update(j('compute-bound'), 0);
    const fewWorkers = judge(window({ data: 0.5 }), context({ env: { loader: { num_workers: 0 } } }));
    const saturated = judge(window({ data: 0.5 }, { host: { samples: 4, cpu_pct_mean: 97, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 9, mem_used_frac: 0.3 } }), context());
    expect(tracker.update(fewWorkers, 1_000)).toBeNull();
    expect(tracker.update(saturated, 2_000)).toBeNull();
    expect(tracker.update(saturated, 3_000)).toMatchObject({ to: 'input-bound', cause: 'cpu-saturated', since: 1_000 });
  });

  it('ignores a blip shorter than the hold time', () => {
    const tracker = new VerdictTracker(3_000);
    tracker.update(j('compute-bound'), 0);
    expect(tracker.update(j('input-bound'), 1_000)).toBeNull();
    expect(tracker.update(j('compute-bound'), 2_000)).toBeNull();
    expect(tracker.update(j('input-bound'), 3_500)).toBeNull();
    expect(tracker.current?.judgement.verdict).toBe('compute-bound');
  });
});

describe('findStraggler', () => {
  it('names the rank whose own data wait holds the others back, though every step time is the same', () => {
    const fast = window({ data: 0.02, compute: 0.9, other: 0.08 });
    const slow = window({ data: 0.55, compute: 0.4, other: 0.05 });
    expect(findStraggler([
      { rank: 0, window: fast },
      { rank: 1, window: slow },
      { rank: 2, window: fast },
    ])).toMatchObject({ rank: 1, reason: 'data' });
  });

  it("names a rank whose GPU runs at lower clocks", () => {
    const cool = window({ data: 0.02 });
    const hot = window({ data: 0.02 }, { gpu: gpu({ sm_clock_frac_mean: 0.6 }) });
    expect(findStraggler([{ rank: 0, window: cool }, { rank: 1, window: hot }])).toMatchObject({ rank: 1, reason: 'gpu-clocks' });
  });

  it('names nobody when the ranks are alike', () => {
    const w = window({ data: 0.1 });
    expect(findStraggler([{ rank: 0, window: w }, { rank: 1, window: window({ data: 0.11 }) }])).toBeNull();
  });
});
