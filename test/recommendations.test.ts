import type { StepWindow } from '../src/analysis/window.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Env } from '../src/protocol/messages.js';
import { RECOMPILE_ADVICE, recommendationsFor } from '../src/analysis/recommendations.js';
import { CAUSES, VERDICTS, type Cause, type Verdict } from '../src/model/verdict.js';
import { gpu, window as rankWindow } from './support/rank-window.js';
import type { ProcessWindow } from '../src/protocol/state.js';

/** Advice fitted to the job (src/analysis/recommendations.ts): nothing its setup contradicts, the largest expected gain first. */

const processWindow = (over: Partial<ProcessWindow>): ProcessWindow => ({
  seconds: 4,
  cpu_main_cores: 1,
  cpu_workers_cores: null,
  workers: null,
  rss_bytes: null,
  cgroup_quota_cores: null,
  cgroup_usage_cores: null,
  cgroup_throttled_share: null,
  cgroup_throttled_s_per_s: null,
  ...over,
});

const a100 = gpu({ name: 'NVIDIA A100-SXM4-80GB', sm_clock_mhz_mean: 1410, sm_clock_max_mhz: 1410, power_w_mean: 300, power_limit_w: 400, power_frac_mean: 0.75, temp_c_max: 60, mem_used_mib_max: 40_000, mem_total_mib: 81_920, mem_used_frac: 0.5 });
const window = (over: Partial<StepWindow> = {}): StepWindow => rankWindow({ data: 0.4, compute: 0.6 }, { gpu: a100, host: null, ...over });

const GPU_ENV: Env = { torch: '2.5.1', cuda: '12.4', gpu_name: 'NVIDIA A100-SXM4-80GB' };
const CPU_ENV: Env = { torch: '2.5.1', stack: { cuda_in_use: false, amp: 'off', matmul_precision: 'highest' } };

const advise = (verdict: Verdict, cause: Cause, env: Env, over: { window?: Partial<StepWindow>; hostCores?: number | null } = {}) =>
  recommendationsFor(verdict, cause, { window: window(over.window), env, hostCores: over.hostCores === undefined ? 64 : over.hostCores });
const ids = (list: Array<{ id: string }>) => list.map((r) => r.id);
const text = (list: Array<{ text: string }>) => list.map((r) => r.text).join('\n');

describe('advice that fits the job', () => {
  it('with num_workers=0, asks for workers first and never for prefetch_factor or persistent_workers', () => {
    const env: Env = { ...GPU_ENV, loader: { num_workers: 0, pin_memory: false, persistent_workers: false, prefetch_factor: 2 } };
    const advice = advise('input-bound', 'few-workers', env);
    expect(ids(advice)).toEqual(['raise-num-workers', 'pin-memory', 'cache-or-offline-augmentation']);
    // With workers, the same settings are worth changing, by expected gain: pinned copies, prefetch depth, restarts per epoch.
    const withWorkers = advise('input-bound', 'few-workers', { ...env, loader: { ...(env.loader as object), num_workers: 4 } });
    expect(ids(withWorkers)).toEqual(['raise-num-workers', 'pin-memory', 'prefetch', 'persistent-workers', 'cache-or-offline-augmentation']);
  });

  it('never suggests pinned memory to a job without a GPU', () => {
    const env: Env = { ...CPU_ENV, loader: { num_workers: 2, pin_memory: false } };
    expect(ids(advise('input-bound', 'few-workers', env, { window: { gpu: null } }))).not.toContain('pin-memory');
    // A CPU build of torch (no CUDA version) and no GPU seen: CPU-only too.
    expect(ids(advise('input-bound', 'unknown', { torch: '1.13.0', loader: { num_workers: 2, pin_memory: false } }, { window: { gpu: null } }))).not.toContain('pin-memory');
    // The same settings on a GPU job: pin it.
    expect(ids(advise('input-bound', 'few-workers', { ...GPU_ENV, loader: { num_workers: 2, pin_memory: false } }))).toContain('pin-memory');
  });

  it('raises num_workers only up to the cores the rank can use, and says which bound', () => {
    const loader = (n: number) => ({ ...GPU_ENV, loader: { num_workers: n } });
    // 8 cores on the host: 7 workers beside the training process is the most.
    expect(ids(advise('input-bound', 'few-workers', loader(7), { hostCores: 8 }))).toEqual(['cores-at-bound', 'cache-or-offline-augmentation']);
    expect(text(advise('input-bound', 'few-workers', loader(7), { hostCores: 8 }))).toMatch(/num_workers=7 already uses the host's 8 cores/);
    expect(advise('input-bound', 'few-workers', loader(3), { hostCores: 8 })[0]!.text).toBe(
      'Raise DataLoader num_workers (now 3) so that loading runs in parallel with the step; this host has 8 cores to share among its GPUs.',
    );
    // The container's CPU limit is tighter than the host.
    const quota = advise('input-bound', 'few-workers', loader(2), { hostCores: 64, window: { process: processWindow({ cgroup_quota_cores: 4 }) } });
    expect(quota[0]!.text).toMatch(/up to 3, the container's CPU limit of 4 cores less one for the training loop/);
    // 32 CPUs of affinity shared by 4 ranks on the host: 8 a rank, 7 workers.
    const shared = { ...loader(2), stack: { cpu_affinity: 32, local_world_size: 4 } };
    expect(advise('input-bound', 'few-workers', shared, { hostCores: 64 })[0]!.text).toMatch(/up to 7, the 32 CPUs the process may run on shared by 4 ranks/);
    expect(ids(advise('input-bound', 'few-workers', { ...shared, loader: { num_workers: 7 } }, { hostCores: 64 }))).not.toContain('raise-num-workers');
  });

  it('lets workers that mostly wait (remote storage) outnumber the cores', () => {
    const env: Env = { ...GPU_ENV, loader: { num_workers: 2 } };
    const waiting = advise('input-bound', 'unknown', env, { hostCores: 2, window: { process: processWindow({ cpu_workers_cores: 0.2, workers: 2 }) } });
    expect(waiting[0]).toMatchObject({ id: 'raise-num-workers', text: expect.stringMatching(/wait more than they compute, so they may outnumber the cores/) });
    const busy = advise('input-bound', 'unknown', env, { hostCores: 2, window: { process: processWindow({ cpu_workers_cores: 1.9, workers: 2 }) } });
    expect(ids(busy)).not.toContain('raise-num-workers');
  });

  it('does not ask for mixed precision or torch.compile where the job already uses them', () => {
    const tuned: Env = { ...GPU_ENV, stack: { amp: 'bfloat16', matmul_precision: 'high', cudnn_tf32: true }, compile: { in_use: true } };
    const advice = advise('compute-bound', null, tuned);
    expect(ids(advice)).toEqual(['faster-compute']);
    expect(advice[0]!.text).toBe('Compute-bound, the healthy state: to go faster, use fused kernels or a larger batch.');
    // Unknown setup (an older hook): the general advice, as before.
    expect(advise('compute-bound', null, GPU_ENV)[0]!.text).toBe('Compute-bound, the healthy state: to go faster, use mixed precision (bf16), torch.compile, fused kernels or a larger batch.');
  });

  it('orders precision advice by expected gain: bf16 autocast (2× and more) before TF32, before the rest', () => {
    const fp32: Env = { ...GPU_ENV, stack: { amp: 'off', matmul_precision: 'highest', cudnn_tf32: true } };
    const advice = advise('compute-bound', null, fp32);
    expect(ids(advice)).toEqual(['use-bf16-autocast', 'allow-tf32', 'faster-compute']);
    expect(advice[1]!.text).toMatch(/TF32 is off for fp32 matmuls: set torch\.backends\.cuda\.matmul\.allow_tf32 = True/);
    // TF32 already on: not asked for.
    expect(ids(advise('compute-bound', null, { ...GPU_ENV, stack: { amp: 'off', matmul_precision: 'high', cudnn_tf32: true } }))).toEqual(['use-bf16-autocast', 'faster-compute']);
  });

  it('for idle tensor cores: bf16 where AMP is off; where it is on, checks what runs outside autocast', () => {
    expect(ids(advise('compute-bound', 'tensor-cores-idle', { ...GPU_ENV, stack: { amp: 'off', matmul_precision: 'high' } }))).toEqual(['use-bf16-autocast']);
    const on = advise('compute-bound', 'tensor-cores-idle', { ...GPU_ENV, stack: { amp: 'bfloat16', matmul_precision: 'high', cudnn_tf32: true } });
    expect(on).toEqual([{ id: 'use-tensor-cores', text: expect.stringMatching(/Mixed precision is on \(bfloat16\) yet the tensor cores sit idle: check that the heavy layers run inside autocast/), because: 'compute-bound (tensor-cores-idle)' }]);
  });

  it('for slow copies with pin_memory already on, leads with non-blocking copies', () => {
    expect(ids(advise('transfer-bound', null, { ...GPU_ENV, loader: { num_workers: 4, pin_memory: true } }))[0]).toBe('non-blocking-copies');
    expect(ids(advise('transfer-bound', null, GPU_ENV))[0]).toBe('pin-memory');
  });

  it('has advice for frequent recompiles, most effective first', () => {
    expect(ids([...RECOMPILE_ADVICE])).toEqual(['mark-dynamic', 'pad-shapes', 'guarded-values']);
    expect(RECOMPILE_ADVICE[0]!.text).toMatch(/mark_dynamic.*dynamic=True/);
  });

  it('never contradicts the setup, whatever the verdict and the setup', () => {
    const setup = fc.record({
      workers: fc.option(fc.integer({ min: 0, max: 64 }), { nil: undefined }),
      pin: fc.option(fc.boolean(), { nil: undefined }),
      persistent: fc.option(fc.boolean(), { nil: undefined }),
      prefetch: fc.option(fc.integer({ min: 1, max: 8 }), { nil: undefined }),
      amp: fc.option(fc.constantFrom('off', 'bfloat16', 'float16'), { nil: undefined }),
      precision: fc.option(fc.constantFrom('highest', 'high', 'medium'), { nil: undefined }),
      cudnnTf32: fc.option(fc.boolean(), { nil: undefined }),
      compiled: fc.option(fc.boolean(), { nil: undefined }),
      gpu: fc.boolean(),
      hostCores: fc.option(fc.integer({ min: 1, max: 256 }), { nil: null }),
      quota: fc.option(fc.integer({ min: 1, max: 64 }), { nil: null }),
    });
    fc.assert(
      fc.property(fc.constantFrom(...VERDICTS), fc.constantFrom(...CAUSES, null), setup, (verdict, cause, s) => {
        const defined = (o: Record<string, string | number | boolean | undefined>): Record<string, string | number | boolean> =>
          Object.fromEntries(Object.entries(o).filter((e): e is [string, string | number | boolean] => e[1] !== undefined));
        const loader = defined({ num_workers: s.workers, pin_memory: s.pin, persistent_workers: s.persistent, prefetch_factor: s.prefetch });
        const stack = defined({ amp: s.amp, matmul_precision: s.precision, cudnn_tf32: s.cudnnTf32, cuda_in_use: s.gpu });
        const env: Env = { torch: '2.5.1', ...(s.gpu ? { cuda: '12.4', gpu_name: 'NVIDIA A100' } : {}), loader, stack, ...(s.compiled === undefined ? {} : { compile: { in_use: s.compiled } }) };
        const advice = recommendationsFor(verdict, cause, { env, hostCores: s.hostCores, window: window({ gpu: s.gpu ? a100 : null, process: processWindow({ cgroup_quota_cores: s.quota }) }) });
        const got = new Set(ids(advice));
        const all = text(advice);
        if (s.workers === 0) expect([...got].filter((id) => id === 'prefetch' || id === 'persistent-workers')).toEqual([]);
        if (!s.gpu) expect(got.has('pin-memory') || /pin_memory=True/.test(all)).toBe(false);
        if (s.pin === true) expect(got.has('pin-memory')).toBe(false);
        if (s.amp === 'bfloat16' || s.amp === 'float16') expect(got.has('use-bf16-autocast') || /use mixed precision/.test(all)).toBe(false);
        if (s.precision === 'high' || s.precision === 'medium') expect(/allow_tf32 = True \(or/.test(all)).toBe(false);
        if (s.compiled === true) expect(/try torch\.compile|use .*torch\.compile|Fuse them with torch\.compile/i.test(all)).toBe(false);
        const cores = Math.min(...[s.hostCores, s.quota].filter((c): c is number => c !== null));
        if (s.workers !== undefined && Number.isFinite(cores) && s.workers >= cores - 1) expect(got.has('raise-num-workers')).toBe(false);
        expect(got.size, 'no advice twice').toBe(advice.length);
      }),
      { numRuns: 500 },
    );
  });
});

/**
 * Advice that fits the machine it ran on (issue 26): a CPU-only job is never told about GPUs, more
 * loader workers are advised only while a core is free (the host's load by every process, the
 * container's quota, the workers already running), and every line carries the fact it rests on.
 * Each rule against the job shapes it must and must not fire for.
 */
describe('advice that fits the machine: CPU-only, GPU, no free core, free cores', () => {
  const hostAt = (cpuPct: number) => ({ samples: 4, cpu_pct_mean: cpuPct, iowait_pct_mean: 0, steal_pct_mean: 0, load1: 1, mem_used_frac: 0.3, cpu_pressure_pct: null, memory_pressure_pct: null, top_consumers: null });
  type Shape = { env: Env; window: Partial<StepWindow>; hostCores: number; cpuOnly: boolean; free: boolean };
  const SHAPES: Record<string, Shape> = {
    'CPU-only, free cores': { env: CPU_ENV, window: { gpu: null, host: hostAt(30) }, hostCores: 8, cpuOnly: true, free: true },
    'CPU-only, no free core (a neighbour holds the other core)': { env: CPU_ENV, window: { gpu: null, host: hostAt(99) }, hostCores: 2, cpuOnly: true, free: false },
    'GPU, free cores': { env: GPU_ENV, window: { host: hostAt(30) }, hostCores: 8, cpuOnly: false, free: true },
    'GPU, no free core': { env: GPU_ENV, window: { host: hostAt(97) }, hostCores: 8, cpuOnly: false, free: false },
    "GPU, an idle host but the container's quota used up": { env: GPU_ENV, window: { host: hostAt(15), process: processWindow({ cgroup_quota_cores: 4, cgroup_usage_cores: 3.9 }) }, hostCores: 32, cpuOnly: false, free: false },
    'GPU, workers already running, no core left': { env: { ...GPU_ENV, loader: { num_workers: 2 } }, window: { host: hostAt(98), process: processWindow({ workers: 2, cpu_workers_cores: 1.9 }) }, hostCores: 4, cpuOnly: false, free: false },
  };
  const adviseOn = (shape: Shape, verdict: Verdict, cause: Cause, loader: Record<string, unknown> = {}) =>
    recommendationsFor(verdict, cause, { window: window(shape.window), env: { ...shape.env, loader: { num_workers: 0, pin_memory: false, ...((shape.env.loader as object) ?? {}), ...loader } }, hostCores: shape.hostCores });

  // Verdicts a job without a GPU can have, with their causes (the GPU's own causes left out).
  const GPU_ONLY = new Set<Cause>(['gpu-idle-in-compute', 'launch-bound', 'memory-bandwidth', 'tensor-cores-idle', 'gpu-shared']);
  const CPU_CASES: Array<[Verdict, Cause]> = [
    ...(['cgroup-throttled', 'memory-pressure', 'io-wait', 'contention', 'cpu-saturated', 'few-workers', 'unknown'] as const).map((c): [Verdict, Cause] => ['input-bound', c]),
    ['host-bound', 'evaluation'], ['host-bound', 'outside-phases'], ['host-bound', 'recompiles'],
    ['compute-bound', null], ['compute-bound', 'recompiles'],
    ['communication-bound', 'slow-rank'], ['communication-bound', 'slow-collective'],
  ];

  for (const [name, shape] of Object.entries(SHAPES)) {
    describe(name, () => {
      it(`${shape.free ? 'advises' : 'does not advise'} more loader workers${shape.free ? '' : ', and says no core is free'}`, () => {
        for (const cause of ['few-workers', 'unknown', 'contention', 'cpu-saturated'] as const) {
          const advice = adviseOn(shape, 'input-bound', cause);
          expect(ids(advice).includes('raise-num-workers'), `${cause}: ${ids(advice)}`).toBe(shape.free);
          if (shape.free) expect(advice.find((a) => a.id === 'raise-num-workers')!.because).toMatch(/cores idle: the host 30% busy of 8 cores/);
        }
        const fewWorkers = adviseOn(shape, 'input-bound', 'few-workers');
        expect(ids(fewWorkers).includes('no-free-core')).toBe(!shape.free);
        if (!shape.free) expect(fewWorkers.find((a) => a.id === 'no-free-core')!.because).toMatch(/cores (idle|free within the container's CPU limit of 4)/);
      });

      it(`${shape.cpuOnly ? 'never speaks of GPUs' : 'gives the GPU advice where it fits'}`, () => {
        for (const [verdict, cause] of CPU_CASES) {
          const advice = adviseOn(shape, verdict, cause);
          if (shape.cpuOnly) expect(text(advice), `${verdict}/${cause}`).not.toMatch(/GPU|CUDA|NCCL|tensor core|pin_memory|autocast/i);
        }
        const loading = ids(adviseOn(shape, 'input-bound', 'few-workers'));
        expect(loading.includes('pin-memory')).toBe(!shape.cpuOnly);
        const healthy = adviseOn(shape, 'compute-bound', null, {});
        const withAmpOff = recommendationsFor('compute-bound', null, { window: window(shape.window), env: { ...shape.env, stack: { ...((shape.env.stack as object) ?? {}), amp: 'off' } }, hostCores: shape.hostCores });
        expect(ids(withAmpOff).includes('use-bf16-autocast')).toBe(!shape.cpuOnly);
        expect(text(healthy).includes('mixed precision')).toBe(!shape.cpuOnly);
      });

      it('carries, on every line, the fact it was conditioned on', () => {
        for (const [verdict, cause] of [...CPU_CASES, ...(shape.cpuOnly ? [] : [...GPU_ONLY].map((c): [Verdict, Cause] => [c === 'gpu-idle-in-compute' ? 'host-bound' : 'compute-bound', c]))]) {
          for (const line of adviseOn(shape, verdict, cause)) {
            expect(line.because, `${verdict}/${cause}: ${line.id}`).toMatch(/\S/);
            if (shape.cpuOnly && !line.because!.includes('idle') && !line.because!.includes('workers')) expect(line.because).toMatch(/CPU only/);
          }
        }
      });
    });
  }
});
