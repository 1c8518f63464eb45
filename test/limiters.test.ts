import type { StepWindow } from '../src/analysis/window.js';
import { describe, expect, it } from 'vitest';
import { inputFixes, type FixContext } from '../src/analysis/fix-estimate.js';
import { margin, t95, windowLost } from '../src/analysis/limiters.js';
import { judge, type RankContext } from '../src/analysis/verdict.js';
import type { StepRecord } from '../src/protocol/messages.js';
import { StepBuckets } from '../src/store/step-buckets.js';
import { window } from './support/rank-window.js';

/**
 * What each limiter costs (src/analysis/limiters.ts) and what fixing each cause would buy
 * (src/analysis/fix-estimate.ts): the statistics on slices built by the store itself, the estimates
 * on windows whose figures are worked out by hand below.
 */

const step = (seq: number, ms: { dur: number; data: number }): StepRecord => ({
  seq,
  step: seq,
  endNs: 0,
  durNs: ms.dur * 1e6,
  dataNs: ms.data * 1e6,
  h2dNs: 0,
  computeNs: (ms.dur - ms.data) * 1e6,
  samples: null,
  gpuH2dNs: null,
  gpuComputeNs: null,
  gpuIdleNs: null,
  commNs: null,
  commWaitNs: null,
  commBytes: null, evalNs: null,
});

/** 4 s of 1 ms steps whose data share in each 250 ms slice is `share(slice)`. */
function oneMsSteps(share: (slice: number) => number) {
  const buckets = new StepBuckets();
  let seq = 0;
  for (let at = 0; at < 4_000; at++) buckets.add(step(++seq, { dur: 1, data: share(Math.floor(at / 250)) }), at);
  return windowLost(buckets.between(0, 4_000), buckets.slicesBetween(0, 4_000))!;
}

describe('the share a limiter costs, and the bound it holds at across the window', () => {
  it('counts a steady 30% of 1 ms steps as 30%, a little jitter barely lowering the bound', () => {
    expect(oneMsSteps(() => 0.3).input).toEqual({ share: 0.3, low: 0.3 });
    const jittery = oneMsSteps((slice) => (slice % 2 ? 0.28 : 0.32)).input;
    expect(jittery.share).toBeCloseTo(0.3, 4);
    expect(jittery.low).toBeGreaterThan(0.27);
    expect(jittery.low).toBeLessThan(0.3);
  });

  it('counts bursts of waiting in an otherwise quiet window for little', () => {
    const bursty = oneMsSteps((slice) => (slice === 3 || slice === 11 ? 0.9 : 0.05)).input;
    expect(bursty.share).toBeCloseTo(0.156, 3);
    expect(bursty.low).toBeLessThan(0.05);
  });

  it('sees a change of regime as fast as the mean: a trend is one successive difference, not spread', () => {
    const changed = oneMsSteps((slice) => (slice < 8 ? 0.05 : 0.45)).input;
    expect(changed.share).toBeCloseTo(0.25, 3);
    expect(changed.low).toBeGreaterThan(0.2);
  });

  it('has no spread to judge by with one slice: the bound is the share', () => {
    expect(margin([{ share: 0.4, weight: 1 }])).toBeNull();
    const buckets = new StepBuckets();
    buckets.add(step(1, { dur: 60_000, data: 30_000 }), 59_900);
    expect(windowLost(buckets.between(0, 60_000), buckets.slicesBetween(0, 60_000))).toEqual({
      slices: 1,
      input: { share: 0.5, low: 0.5 },
      transfer: { share: 0, low: 0 },
      host: { share: 0, low: 0 },
      communication: null,
    });
  });

  it("takes Student's t from the table, never narrower than the exact quantile", () => {
    expect(t95(1)).toBe(6.314);
    expect(t95(15)).toBe(1.753);
    expect(t95(16)).toBe(1.753);
    expect(t95(1000)).toBe(1.658);
    expect(t95(0)).toBe(Number.POSITIVE_INFINITY);
  });
});

const process = (over: Partial<NonNullable<StepWindow['process']>> = {}): NonNullable<StepWindow['process']> => ({
  seconds: 1,
  cpu_main_cores: 1,
  cpu_workers_cores: null,
  workers: 0,
  rss_bytes: 1e9,
  cgroup_quota_cores: null,
  cgroup_usage_cores: null,
  cgroup_throttled_share: null,
  cgroup_throttled_s_per_s: null,
  ...over,
});

const host = (cpuPct: number, over: Partial<NonNullable<StepWindow['host']>> = {}): NonNullable<StepWindow['host']> => ({
  samples: 4,
  cpu_pct_mean: cpuPct,
  iowait_pct_mean: 0,
  steal_pct_mean: 0,
  load1: 2,
  mem_used_frac: 0.3,
  cpu_pressure_pct: null,
  memory_pressure_pct: null,
  top_consumers: null,
  ...over,
});

/**
 * The case: num_workers=0, ~50 ms of loading a step against 0.66 ms of training (98.7% of
 * the step waiting for data), a CPU-only job.
 */
const loadingInProcess = (over: Partial<StepWindow>) => window({ data: 0.987 }, { step_ms_mean: 50.66, step_ms_p50: 50.66, gpu: null, ...over });
const context = (over: Partial<RankContext> = {}): RankContext => ({ totalSteps: 1000, sinceLastStepMs: 50, env: { loader: { num_workers: 0 } }, hostCores: 2, current: null, ...over });

describe('causes ranked by what fixing them buys', () => {
  it('on a busy node, ranks the neighbour first and shows what more workers would buy: nothing, no core is free', () => {
    // Host 98% busy, the training process gets 0.4 of a core, tasks wait for a CPU 60% of the time.
    const busy = loadingInProcess({ host: host(98, { cpu_pressure_pct: 60 }), process: process({ cpu_main_cores: 0.4 }) });
    const judgement = judge(busy, context({ jobCpuCores: 0.4 }));
    expect([judgement.verdict, judgement.cause]).toEqual(['input-bound', 'contention']);
    expect(judgement.causes.map((c) => [c.cause, c.gain])).toEqual([
      ['contention', 0.592],
      ['few-workers', 0],
    ]);
    expect(judgement.causes[0]!.basis).toMatch(/waited for a CPU 60% of the time \(PSI\)/);
    expect(judgement.causes[1]!.basis).toMatch(/1 worker on 0\.04 cores \(0\.04 cores free; .*\) would not shorten the 50\.0 ms wait/);
    // The advice follows: the neighbour first, then the loader — not more workers: no core is free (issue 26).
    expect(judgement.recommendations.map((r) => r.id).slice(0, 2)).toEqual(['find-neighbour', 'no-free-core']);
    expect(judgement.recommendations.map((r) => r.id)).not.toContain('raise-num-workers');
    expect(judgement.recommendations[1]!.because).toBe('0.0 cores idle: the host 98% busy of 2 cores');
  });

  it('on a host with cores to spare, ranks more workers by the batches they can make', () => {
    // 8 cores, 30% busy: 5.6 free; 7 workers the cores allow; 50 ms of CPU a batch: a batch every 8.9 ms.
    const idle = loadingInProcess({ host: host(30), process: process({ cpu_main_cores: 1 }) });
    const judgement = judge(idle, context({ hostCores: 8, jobCpuCores: 1 }));
    expect(judgement.causes).toEqual([
      {
        cause: 'few-workers',
        limiter: 'input',
        gain: 0.824,
        upto: 0.987,
        basis: expect.stringMatching(/loading takes 50\.0 ms of CPU a batch in the training process; 7 workers on 5\.6 cores .* would leave 8\.3 ms of the 50\.0 ms wait/),
        unknown: null,
      },
    ]);
  });

  it('keeps a cause it cannot estimate at its most, says what is unknown, and ranks it by that', () => {
    const ioBound = loadingInProcess({ host: host(20, { iowait_pct_mean: 30 }), process: process({ cpu_main_cores: 0.1 }) });
    const causes = judge(ioBound, context({ hostCores: 8, jobCpuCores: 0.1 })).causes;
    expect(causes.map((c) => [c.cause, c.gain, c.upto])).toEqual([
      ['io-wait', null, 0.987],
      ['few-workers', expect.any(Number), 0.987],
    ]);
    expect(causes[0]!.unknown).toMatch(/how much faster the storage could serve/);
    expect(causes[1]!.gain!).toBeGreaterThan(0.5);
  });

  it('says so where the figure an estimate needs was not measured', () => {
    const context = (over: Partial<FixContext>): FixContext => ({ window: loadingInProcess({ host: host(98), process: null }), env: {}, hostCores: 2, jobCpuCores: null, ...over });
    const [neighbour] = inputFixes([{ cause: 'contention', why: 'others take the CPU' }], 0.987, context({}));
    expect(neighbour).toMatchObject({ gain: null, upto: 0.987, unknown: expect.stringMatching(/no CPU pressure figures/) });
    const [workers] = inputFixes([{ cause: 'few-workers', why: 'loaded in the training process' }], 0.987, context({ env: { loader: { num_workers: 0 } } }));
    expect(workers).toMatchObject({ gain: null, unknown: expect.stringMatching(/CPU not measured/) });
  });

  it('gives back the throttled time of a container that hits its CPU limit, at most the data wait', () => {
    const limited = loadingInProcess({
      host: host(30),
      process: process({ cpu_main_cores: 0.2, cgroup_quota_cores: 0.2, cgroup_usage_cores: 0.2, cgroup_throttled_share: 0.9, cgroup_throttled_s_per_s: 0.8 }),
    });
    const causes = judge(limited, context({ hostCores: 8, jobCpuCores: 0.2 })).causes;
    expect(causes.map((c) => [c.cause, c.gain])).toEqual([
      ['cgroup-throttled', 0.8],
      // The quota's cores are all used: none is free for workers.
      ['few-workers', 0],
    ]);
  });

  it('estimates the other verdicts by their whole share (Amdahl), communication by its exposed wait only', () => {
    expect(judge(window({ other: 0.4 }), context()).causes).toEqual([{ cause: 'outside-phases', limiter: 'host', gain: 0.4, upto: 0.4, basis: expect.any(String), unknown: null }]);
    expect(judge(window({ data: 0.02 }), context()).causes).toEqual([]);
  });
});
