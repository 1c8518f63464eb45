import type { StepGpuWindow, StepWindow } from '../src/analysis/window.js';
import { describe, expect, it } from 'vitest';
import { findStraggler } from '../src/model/straggler.js';
import { VerdictTracker } from '../src/analysis/tracker.js';
import { judge, type RankContext } from '../src/analysis/verdict.js';
import { margin } from '../src/analysis/limiters.js';
import { gpu, window } from './support/rank-window.js';
import { WasteLedger } from '../src/analysis/waste.js';

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

  it('judges 1 ms steps by their share like any other: 30% of them waiting for data is input-bound', () => {
    const tiny = judge(window({ data: 0.3 }, { step_ms_mean: 1, step_ms_p50: 1, steps: 4000 }), context());
    expect(tiny).toMatchObject({ verdict: 'input-bound', evidence: { lost: { input: 0.3 } } });
    expect(tiny.limiters).toEqual([{ limiter: 'input', share: 0.3, low: 0.3, level: 'high' }]);
  });

  it('weighs the share at its bound across the window: bursts of waiting in tiny steps stay quiet', () => {
    const bursty = window({ data: 0.25 }, { step_ms_mean: 1, lost: { slices: 16, input: { share: 0.25, low: 0.04 }, transfer: { share: 0, low: 0 }, host: { share: 0, low: 0 }, communication: null } });
    const judgement = judge(bursty, context());
    expect(judgement.verdict).toBe('compute-bound');
    expect(judgement.limiters).toEqual([]);
    // Held across the window only in part: named beside the verdict, as moderate.
    const partly = judge(window({ data: 0.25 }, { lost: { slices: 16, input: { share: 0.25, low: 0.17 }, transfer: { share: 0, low: 0 }, host: { share: 0, low: 0 }, communication: null } }), context());
    expect(partly.verdict).toBe('compute-bound');
    expect(partly.limiters).toEqual([{ limiter: 'input', share: 0.25, low: 0.17, level: 'moderate' }]);
  });

  it('waits for a first verdict while its window has too few slices to tell a limiter from none', () => {
    // Two slices of a steady job of 1 ms steps, 36% and 30% waiting for data: at one degree of freedom
    // the bound lies far below the share.
    const low = 0.33 - margin([{ share: 0.36, weight: 1 }, { share: 0.3, weight: 1 }])!;
    expect(low).toBeCloseTo(0.141, 3);
    const lost = (slices: number) => ({ slices, input: { share: 0.33, low }, transfer: { share: 0, low: 0 }, host: { share: 0, low: 0 }, communication: null });
    const thin = window({ data: 0.33 }, { step_ms_mean: 1, step_ms_p50: 1, steps: 500, lost: lost(2) });
    const loader = { env: { loader: { num_workers: 0 } } };
    for (const current of [null, 'warming-up'] as const) {
      const judgement = judge(thin, context({ ...loader, current }));
      expect(judgement.verdict).toBe('warming-up');
      expect(judgement.evidence.rule).toBe('deciding: loading 33% of step time, at least 14% across 2 slices of time: too few yet to tell whether it is over 20%');
    }
    // A verdict in force is judged as before; so is a window of 8 slices, and one whose every step
    // has a slice of its own (slow steps: waiting a tick adds no slice).
    expect(judge(thin, context({ ...loader, current: 'compute-bound' })).verdict).toBe('compute-bound');
    expect(judge(window({ data: 0.33 }, { step_ms_mean: 1, step_ms_p50: 1, steps: 2000, lost: lost(8) }), context(loader)).verdict).toBe('compute-bound');
    expect(judge(window({ data: 0.33 }, { step_ms_mean: 1000, step_ms_p50: 1000, steps: 2, lost: lost(2) }), context(loader)).verdict).toBe('compute-bound');
    // Under its bar, nothing to decide: compute-bound at once.
    expect(judge(window({ data: 0.15 }, { steps: 500, lost: { ...lost(2), input: { share: 0.15, low: 0.05 } } }), context(loader)).verdict).toBe('compute-bound');
  });

  it('lists every limiter costing 5% or more beside the verdict, with its level, most costly first', () => {
    const judgement = judge(window({ data: 0.18, other: 0.07, h2d: 0.03 }), context());
    expect(judgement.verdict).toBe('compute-bound');
    expect(judgement.limiters).toEqual([
      { limiter: 'input', share: 0.18, low: 0.18, level: 'moderate' },
      { limiter: 'host', share: 0.07, low: 0.07, level: 'moderate' },
    ]);
    const bound = judge(window({ data: 0.3, other: 0.27 }), context());
    expect(bound.verdict).toBe('input-bound');
    expect(bound.limiters.map((l) => [l.limiter, l.level])).toEqual([
      ['input', 'high'],
      ['host', 'high'],
    ]);
    // A verdict held by its stickiness below its entry bar stays high while it holds.
    const held = judge(window({ data: 0.17 }), context({ current: 'input-bound' }));
    expect(held.verdict).toBe('input-bound');
    expect(held.limiters).toEqual([{ limiter: 'input', share: 0.17, low: 0.17, level: 'high' }]);
  });

  it.each([
    ['cgroup-throttled', { process: { seconds: 1, cpu_main_cores: 0.3, cpu_workers_cores: 1.9, workers: 4, rss_bytes: 1, cgroup_quota_cores: 2, cgroup_usage_cores: 2, cgroup_throttled_share: 0.6, cgroup_throttled_s_per_s: 0.5 } }],
    ['io-wait', { host: { samples: 4, cpu_pct_mean: 30, iowait_pct_mean: 25, steal_pct_mean: 0, load1: 5, mem_used_frac: 0.3 } }],
    ['cpu-saturated', { host: { samples: 4, cpu_pct_mean: 97, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 9, mem_used_frac: 0.3 } }],
    ['few-workers', { process: { seconds: 1, cpu_main_cores: 0.3, cpu_workers_cores: 3.8, workers: 4, rss_bytes: 1, cgroup_quota_cores: null, cgroup_usage_cores: null, cgroup_throttled_share: null, cgroup_throttled_s_per_s: null } }],
    ['unknown', {}],
  ] as const)('names the input-bound cause %s from the counters', (cause, over) => {
    expect(judge(window({ data: 0.5 }, over as Partial<StepWindow>), context())).toMatchObject({ verdict: 'input-bound', cause });
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

  it('names evaluation as the cause where it took most of the time outside the phases, its advice first', () => {
    const judged = judge(window({ other: 0.5 }, { eval_share: 0.42, gpu: null }), context());
    expect(judged).toMatchObject({ verdict: 'host-bound', cause: 'evaluation' });
    expect(judged.evidence.rule).toMatch(/evaluation inside the loop took 42% of step time/);
    expect(judged.causes.map((c) => [c.cause, c.gain])).toEqual([['evaluation', 0.42], ['outside-phases', 0.08]]);
    expect(judged.recommendations[0]!.id).toBe('evaluate-less-often');
    expect(judged.recommendations.map((r) => r.id)).toContain('reduce-logging');
  });

  it('leads with logging where evaluation was measured and cost little', () => {
    const judged = judge(window({ other: 0.5 }, { eval_share: 0.02, gpu: null }), context());
    expect(judged).toMatchObject({ verdict: 'host-bound', cause: 'outside-phases' });
    expect(judged.causes.map((c) => c.cause)).toEqual(['outside-phases']);
    expect(judged.recommendations[0]!.id).toBe('reduce-logging');
    expect(judged.recommendations.map((r) => r.id)).not.toContain('evaluate-less-often');
  });

  it('keeps outside-phases alone where the hook does not measure evaluation', () => {
    const judged = judge(window({ other: 0.5 }, { eval_share: null, gpu: null }), context());
    expect(judged.causes.map((c) => c.cause)).toEqual(['outside-phases']);
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

  it('quotes the bar the figure passed: a held verdict never reads "17% (≥ 20%)"', () => {
    const held = judge(window({ data: 0.17 }), context({ current: 'input-bound' })).evidence.rule;
    expect(held).toMatch(/^17% of step time .*\(held: ≥ 15% while in force, 20% to enter\)/);
    expect(held).not.toContain('(≥ 20%)');
    const entered = judge(window({ data: 0.3 }), context({ current: 'input-bound' })).evidence.rule;
    expect(entered).toMatch(/^30% of step time .*\(≥ 20%\)/);
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
    const saturated = judge(window({ data: 0.5 }, { host: { samples: 4, cpu_pct_mean: 97, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 9, mem_used_frac: 0.3, cpu_pressure_pct: null, memory_pressure_pct: null, top_consumers: null } }), context());
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

describe('communication, memory and what compute is made of', () => {
  const comm = (wait: number, bytesPerS: number | null = 2e9) => ({ comm: { steps: 100, share: wait + 0.1, wait_share: wait, bytes_per_s: bytesPerS } });
  const memory = (over: Partial<NonNullable<StepWindow['memory']>> = {}): Partial<StepWindow> => ({
    memory: {
      device: 0,
      allocated_bytes: 60e9,
      reserved_bytes: 70e9,
      peak_allocated_bytes: 65e9,
      total_bytes: 80e9,
      reserved_frac: 0.875,
      fragmentation: 0.1,
      alloc_retries: 12,
      ooms: 0,
      growth_bytes_per_s: null,
      exhausted_in_s: null,
      ...over,
    },
  });

  it('names the slow rank the collectives wait for, when a peer waits far less', () => {
    const judgement = judge(window({ compute: 0.9 }, comm(0.35)), context({ peers: [{ rank: 1, commWaitShare: 0.02, stepMsMean: 40 }, { rank: 2, commWaitShare: 0.33, stepMsMean: 40 }] }));
    expect([judgement.verdict, judgement.cause]).toEqual(['communication-bound', 'slow-rank']);
    expect(judgement.evidence.rule).toMatch(/collectives wait for rank 1/);
    expect(judgement.evidence.lost.communication).toBe(0.35);
  });

  it('blames the collective itself when every rank waits alike, with its bandwidth', () => {
    const judgement = judge(window({ compute: 0.9 }, comm(0.3, 1.25e9)), context({ peers: [{ rank: 1, commWaitShare: 0.28, stepMsMean: 40 }] }));
    expect([judgement.verdict, judgement.cause]).toEqual(['communication-bound', 'slow-collective']);
    expect(judgement.evidence.rule).toMatch(/1\.25 GB\/s/);
    expect(judgement.recommendations.map((r) => r.id)).toContain('overlap-communication');
  });

  it('stays compute-bound below the communication bar', () => {
    expect(judge(window({ compute: 0.9 }, comm(0.1)), context()).verdict).toBe('compute-bound');
  });

  it('is memory-bound only when the allocator retries, and says why it must', () => {
    expect(judge(window({ compute: 0.9 }, memory({ alloc_retries: 0 })), context()).verdict).toBe('compute-bound');
    const thrash = judge(window({ compute: 0.9 }, memory()), context());
    expect([thrash.verdict, thrash.cause]).toEqual(['memory-bound', 'allocator-thrash']);
    expect(judge(window({ compute: 0.9 }, memory({ fragmentation: 0.45 })), context()).cause).toBe('fragmentation');
    expect(judge(window({ compute: 0.9 }, memory({ reserved_frac: 0.97 })), context()).cause).toBe('near-capacity');
    expect(judge(window({ compute: 0.9 }, memory({ alloc_retries: 0, ooms: 1, reserved_frac: 0.99 })), context()).cause).toBe('near-capacity');
  });

  it('splits compute-bound by the profiling counters, and says when they are absent', () => {
    const split = (over: Partial<StepGpuWindow>) => judge(window({ compute: 0.95 }, { gpu: gpu(over) }), context());
    expect(split({}).cause).toBeNull();
    expect(split({}).evidence.figures.compute_split).toMatch(/not measured/);
    expect(split({ util_mean: 97, sm_active_mean: 0.12 }).cause).toBe('launch-bound');
    expect(split({ sm_active_mean: 0.8, dram_active_mean: 0.75 }).cause).toBe('memory-bandwidth');
    expect(split({ sm_active_mean: 0.8, tensor_active_mean: 0.01 }).cause).toBe('tensor-cores-idle');
    expect(split({ sm_active_mean: 0.8, tensor_active_mean: 0.4, dram_active_mean: 0.3 }).cause).toBeNull();
  });
});

describe('the waste ledger', () => {
  it('adds each limiter\'s lost share over time, with energy where power is known, priced when asked', () => {
    const ledger = new WasteLedger();
    for (let i = 0; i < 3600; i++) ledger.add(1, { input: 0.25, host: 0.05, throttle: 0 }, i < 1800 ? 300 : null);
    ledger.add(3600, { input: 1 }, null);
    const waste = ledger.view(2.5);
    expect(waste.gpu_seconds).toBe(3610);
    expect(waste.by_cause.map((entry) => [entry.cause, entry.gpu_seconds, entry.energy_j])).toEqual([
      ['input', 910, 135_000],
      ['host', 180, 27_000],
    ]);
    expect(waste.lost_cost).toBeCloseTo((1090 / 3600) * 2.5, 2);
    expect(WasteLedger.load(ledger.dump()).view(null)).toEqual({ ...waste, price_per_gpu_hour: null, lost_cost: null });
  });
});

describe('throttling that cannot be checked', () => {
  it('says so in a compute-bound verdict rather than calling it healthy in silence', () => {
    const blind = gpu({ sm_clock_max_mhz: null, sm_clock_frac_mean: null, sm_clock_frac_min: null, throttle_unchecked: 'the GPU counters carry neither clock-event (throttle) reasons nor the maximum SM clock' });
    const judgement = judge(window({ compute: 0.95 }, { gpu: blind }), context());
    expect(judgement.verdict).toBe('compute-bound');
    expect(judgement.evidence.rule).toMatch(/throttling could not be checked: the GPU counters carry neither/);
    expect(judgement.evidence.figures.throttle_check).toMatch(/neither clock-event/);
    expect(judge(window({ compute: 0.95 }), context()).evidence.figures.throttle_check).toBe('checked');
  });
});

describe('whose CPU, and host memory', () => {
  const busyHost = (over: Partial<NonNullable<StepWindow['host']>> = {}) => ({
    host: { samples: 4, cpu_pct_mean: 95, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 8, mem_used_frac: 0.5, cpu_pressure_pct: 40, memory_pressure_pct: 0, top_consumers: null, ...over },
  });

  it('tells a neighbour eating the CPU (contention) from the job\'s own loaders using it up', () => {
    const starved = window({ data: 0.4 }, busyHost());
    const neighbour = judge(starved, context({ hostCores: 8, jobCpuCores: 1.5 }));
    expect([neighbour.verdict, neighbour.cause]).toEqual(['input-bound', 'contention']);
    expect(neighbour.evidence.rule).toMatch(/this job's processes use only 1\.5 of the 7\.6 busy cores/);
    expect(neighbour.recommendations[0]!.id).toBe('find-neighbour');
    const own = judge(starved, context({ hostCores: 8, jobCpuCores: 7 }));
    expect([own.verdict, own.cause]).toEqual(['input-bound', 'cpu-saturated']);
    expect(own.recommendations.map((r) => r.id)).toContain('cpu-balanced-instance');
    // Without the job's own figures, it cannot tell: saturated, as before.
    expect(judge(starved, context({ hostCores: 8 })).cause).toBe('cpu-saturated');
  });

  it('names host memory pressure (PSI) as the cause of input stalls', () => {
    const judgement = judge(window({ data: 0.4 }, busyHost({ cpu_pct_mean: 50, memory_pressure_pct: 25 })), context());
    expect([judgement.verdict, judgement.cause]).toEqual(['input-bound', 'memory-pressure']);
  });
});

describe('a cause that cannot be told yet', () => {
  it('names no input cause in a container with a CPU quota until its throttling has a rate', () => {
    const process = (share: number | null) => ({
      process: { seconds: share === null ? 0 : 1, cpu_main_cores: 0.2, cpu_workers_cores: null, workers: 0, rss_bytes: 1e8, cgroup_quota_cores: 0.2, cgroup_usage_cores: null, cgroup_throttled_share: share, cgroup_throttled_s_per_s: null },
    });
    const pending = judge(window({ data: 0.6 }, process(null)), context({ current: 'compute-bound' }));
    expect([pending.verdict, pending.cause]).toEqual(['compute-bound', null]);
    expect(pending.evidence.rule).toMatch(/needs a second process sample/);
    expect(judge(window({ data: 0.6 }, process(0.9)), context({ current: 'compute-bound' })).cause).toBe('cgroup-throttled');
  });
});

describe('who else and what else slows the step: recompiles, a shared GPU, the busiest neighbours', () => {
  const compiling = { compile: { in_use: true, recompiles_1m: 12, recompile_s_1m: 3 } };

  it('names torch.compile recompiling again and again before the profiling split, with its advice', () => {
    const judged = judge(window({ compute: 0.9 }), context({ env: compiling }));
    expect([judged.verdict, judged.cause]).toEqual(['compute-bound', 'recompiles']);
    expect(judged.evidence.rule).toMatch(/torch\.compile recompiled 12 times in the last minute/);
    expect(judged.evidence.figures).toMatchObject({ recompiles_1m: 12, recompile_s_1m: 3 });
    expect(judged.recommendations.map((r) => r.id)).toContain('mark-dynamic');
    const outside = judge(window({ other: 0.4, compute: 0.6 }), context({ env: compiling }));
    expect([outside.verdict, outside.cause]).toEqual(['host-bound', 'recompiles']);
    // A few recompiles a minute, cheap ones: not a cause.
    const few = judge(window({ compute: 0.9 }), context({ env: { compile: { in_use: true, recompiles_1m: 3, recompile_s_1m: 0.2 } } }));
    expect(few.cause).toBeNull();
  });

  it('names another process holding the GPU, only where the job\'s own pid was seen beside it', () => {
    const others = (jobPidSeen: boolean) => ({ scope: 'gpu' as const, job_pid_seen: jobPidSeen, processes: [{ pid: 4242, name: 'gpu_burn', used_mib: 7_484 }], used_mib: 7_484 });
    const shared = judge(window({ compute: 0.9 }, { gpu: gpu({ other_processes: others(true) }) }), context());
    expect([shared.verdict, shared.cause]).toEqual(['compute-bound', 'gpu-shared']);
    expect(shared.evidence.rule).toMatch(/gpu_burn \(pid 4242\) 7484 MiB/);
    expect(shared.recommendations.map((r) => r.id)).toEqual(['gpu-to-itself']);
    expect(judge(window({ compute: 0.9 }, { gpu: gpu({ other_processes: others(false) }) }), context()).cause).toBeNull();
    expect(judge(window({ compute: 0.9 }, { gpu: gpu({ other_processes: null }) }), context()).cause).toBeNull();
  });

  it('lists the busiest other processes under contention, with what could not be seen', () => {
    const top = { visible: 'pod' as const, truncated: false, job_seen: true, processes: [{ pid: 77, name: 'ffmpeg', cores: 5.1 }] };
    const judged = judge(
      window({ data: 0.4 }, { host: { samples: 4, cpu_pct_mean: 95, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 8, mem_used_frac: 0.5, cpu_pressure_pct: 40, memory_pressure_pct: 0, top_consumers: top } }),
      context({ hostCores: 8, jobCpuCores: 1.5 }),
    );
    expect(judged.cause).toBe('contention');
    expect(judged.evidence.rule).toMatch(/busiest others: ffmpeg \(pid 77\) 5\.1 cores \(only the sidecar's pod is visible\)$/);
  });
});
