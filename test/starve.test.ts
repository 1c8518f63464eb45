import type { StepWindow } from '../src/analysis/window.js';
import { describe, expect, it } from 'vitest';
import { judge, workersStarveStep, type RankContext } from '../src/analysis/verdict.js';
import { window } from './support/rank-window.js';
import type { ProcessWindow } from '../src/protocol/state.js';

/**
 * Loader workers that starve the step (issue 26): under neighbour load the step slowed by 42% while
 * the loop waited in next() only 2% of the time. The training thread's wait for a CPU (schedstat)
 * beside its workers' CPU and the host's pressure is what shows it.
 */

const process = (over: Partial<ProcessWindow> = {}): ProcessWindow => ({
  seconds: 1, cpu_main_cores: 0.6, cpu_workers_cores: 1.2, workers: 2, rss_bytes: 1e9, cgroup_quota_cores: null, cgroup_usage_cores: null,
  cgroup_throttled_share: null, cgroup_throttled_s_per_s: null, train_cpu_cores: 0.55, train_wait_share: 0.35, ...over,
});
const host = (cpuPct: number, psi: number | null) => ({ samples: 4, cpu_pct_mean: cpuPct, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 2, mem_used_frac: 0.3, cpu_pressure_pct: psi, memory_pressure_pct: null, top_consumers: null });
const starved = (over: Partial<StepWindow> = {}) => window({ data: 0.02 }, { gpu: null, host: host(98, 60), process: process(), ...over });
const context = (over: Partial<RankContext> = {}): RankContext => ({
  totalSteps: 1000, sinceLastStepMs: 20, env: { torch: '2.5.1', loader: { num_workers: 2 }, stack: { cuda_in_use: false } }, hostCores: 2, jobCpuCores: 1.8, current: null, ...over,
});

describe('loader workers that starve the step', () => {
  it('are input-bound (workers-starve-step) though the loop hardly waits in next(), with advice that fits', () => {
    const judged = judge(starved(), context());
    expect([judged.verdict, judged.cause]).toEqual(['input-bound', 'workers-starve-step']);
    // The workers' 1.2 cores beside the training thread's 0.55 are 69% of their CPU; it waited 35%: 35% at most.
    expect(judged.causes[0]).toMatchObject({ cause: 'workers-starve-step', gain: 0.35 });
    expect(judged.evidence.lost.input).toBeCloseTo(0.02 + 0.35, 3);
    expect(judged.evidence.rule).toMatch(/waiting for a CPU its loader workers hold/);
    const ids = judged.recommendations.map((r) => r.id);
    expect(ids.slice(0, 3)).toEqual(['fewer-or-niced-workers', 'preprocess-offline', 'more-cpu']);
    expect(ids).not.toContain('raise-num-workers');
    expect(judged.recommendations[0]!.because).toMatch(/2 loader workers using 1\.2 cores; the training thread waited for a CPU 35% of the time/);
  });

  it('counts what the workers\' CPU would give the training thread, where a neighbour takes the rest of its wait', () => {
    // The thread on a CPU 0.2 of the time, its workers 0.087: with theirs it would run 0.287, its step 30% shorter, at most.
    const found = workersStarveStep(starved({ process: process({ cpu_workers_cores: 0.087, train_cpu_cores: 0.2, train_wait_share: 0.78 }), host: host(100, 99) }));
    expect(found!.share).toBeCloseTo(0.087 / 0.287, 3);
    expect(found!.why).toMatch(/waited for a CPU 78% of the time while its 2 loader workers used 0\.09 cores beside its 0\.20 .*: the workers cost the step up to 30%/);
  });

  it.each([
    ['no pressure on the host: the wait is not the workers\'', { host: host(40, 5) }, null],
    ['the training thread hardly waits for a CPU', { process: process({ train_wait_share: 0.05 }) }, null],
    ['no loader workers', { process: process({ workers: 0, cpu_workers_cores: 0 }) }, null],
    ['an older hook: the wait not measured', { process: process({ train_wait_share: null }) }, null],
  ])('are not named where %s', (_title, over, expected) => {
    expect(workersStarveStep(starved(over as Partial<StepWindow>))).toBe(expected);
    expect(judge(starved(over as Partial<StepWindow>), context()).verdict).toBe('compute-bound');
  });

  it('take the step of a GPU job too (its launching thread starved the same way)', () => {
    const judged = judge(starved(), context({ env: { torch: '2.5.1', cuda: '12.4', gpu_name: 'NVIDIA A10', loader: { num_workers: 2 } } }));
    expect(judged.cause).toBe('workers-starve-step');
    expect(judged.recommendations.find((r) => r.id === 'more-cpu')!.text).toMatch(/per GPU/);
  });
});
