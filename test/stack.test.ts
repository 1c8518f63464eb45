import { describe, expect, it } from 'vitest';
import { envDrifts, nodeDrifts, rankDrifts, RECOMPILE_THRESHOLDS, recompileCause, type NodeFacts } from '../src/analysis/stack.js';

/** The stack's drifts between two envs, most telling first: what compare.ts reads them as. */
const stackDrifts = (baseline: Record<string, unknown>, current: Record<string, unknown>, observed: 'slower' | 'faster' | null = null) => rankDrifts(envDrifts(baseline, current), observed);

/** An env as the hook sends it (python-hook/stepscope/_env.py, _stack.py) on an A100 with bf16 and torch.compile. */
const BASE = {
  python: '3.11.7',
  torch: '2.5.1',
  cuda: '12.4',
  cudnn: 90100,
  nccl: '2.21.5',
  gpu_name: 'NVIDIA A100-SXM4-80GB',
  host: 'node-1',
  pid: 100,
  loader: { batch_size: 64, num_workers: 8, pin_memory: true, persistent_workers: true, prefetch_factor: 2 },
  stack: { amp: 'bfloat16', matmul_precision: 'high', cudnn_tf32: true, cudnn_benchmark: true, cudnn_deterministic: false, deterministic_algorithms: false, cuda_in_use: true, cpu_affinity: 16 },
  compile: { in_use: true, compiles: 4, graph_breaks: 0, unique_graphs: 4, compile_s: 41.2, recompiles: 0, recompiles_1m: 0, recompile_s_1m: 0 },
};
type Env = typeof BASE;
const env = (over: (e: Env) => void): Env => {
  const copy = structuredClone(BASE);
  over(copy);
  return copy;
};
const keys = (list: Array<{ key: string }>) => list.map((d) => d.key);

describe('what changed in the software stack, ranked by its usual effect on speed', () => {
  it('says nothing for the same stack, whatever the host, pid and the run-time figures of compiling', () => {
    const rerun = env((e) => {
      e.host = 'node-7';
      e.pid = 4242;
      e.compile.compile_s = 55;
      e.compile.compiles = 5;
      e.compile.recompiles_1m = 1;
    });
    expect(stackDrifts(BASE, rerun)).toEqual([]);
  });

  it('puts mixed precision turned off first, with a reason, before a version bump and a smaller batch', () => {
    const slower = env((e) => {
      e.stack.amp = 'off';
      e.torch = '2.6.0';
      e.loader.batch_size = 32;
    });
    const drifts = stackDrifts(BASE, slower, 'slower');
    expect(keys(drifts)).toEqual(['stack.amp', 'loader.batch_size', 'torch']);
    expect(drifts[0]).toMatchObject({ baseline: 'bfloat16', current: 'off', effect: 'large', direction: 'slower' });
    expect(drifts[0]!.reason).toMatch(/mixed precision off \(bfloat16 → fp32\)/);
    expect(drifts[2]).toMatchObject({ effect: 'medium', direction: 'either', reason: expect.stringMatching(/PyTorch 2\.5\.1 → 2\.6\.0: .*slower path/) });
  });

  it('weighs down a change that usually goes the other way: in a slower run, fewer workers explain more than AMP turned on', () => {
    const mixed = env((e) => {
      e.stack.amp = 'off';
      e.loader.num_workers = 4;
    });
    // Baseline without AMP and 8 workers; the current run turned AMP on but has 4 workers.
    const baseline = env((e) => (e.stack.amp = 'off'));
    const current = env((e) => (e.loader.num_workers = 4));
    expect(keys(stackDrifts(baseline, current, 'slower'))).toEqual(['loader.num_workers', 'stack.amp']);
    expect(keys(stackDrifts(baseline, current, 'faster'))).toEqual(['stack.amp', 'loader.num_workers']);
    expect(keys(stackDrifts(BASE, mixed))).toEqual(['stack.amp', 'loader.num_workers']);
  });

  it('treats TF32 turned off as large in fp32 training and medium under autocast', () => {
    const fp32 = env((e) => (e.stack.amp = 'off'));
    const tf32Off = (from: Env) => env((e) => Object.assign(e, structuredClone(from), { stack: { ...from.stack, matmul_precision: 'highest' } }));
    expect(envDrifts(fp32, tf32Off(fp32))).toEqual([
      { key: 'stack.matmul_precision', baseline: 'high', current: 'highest', effect: 'large', direction: 'slower', reason: expect.stringMatching(/TF32 off for matmuls/) },
    ]);
    expect(envDrifts(BASE, tf32Off(BASE))[0]).toMatchObject({ effect: 'medium', direction: 'slower' });
    // 'high' and 'medium' both allow TF32: no speed change worth a large rank.
    expect(envDrifts(BASE, env((e) => (e.stack.matmul_precision = 'medium')))[0]).toMatchObject({ effect: 'small' });
  });

  it('names torch.compile removed, and a hook that sends the stack but no compile group as not compiled', () => {
    const eager = env((e) => {
      delete (e as Partial<Env>).compile;
    });
    expect(stackDrifts(BASE, eager, 'slower')).toEqual([
      { key: 'compile.in_use', baseline: true, current: false, effect: 'large', direction: 'slower', reason: expect.stringMatching(/torch\.compile no longer in use/) },
    ]);
    // An older hook says nothing of either: no drift made up from its silence.
    const old = { torch: '2.5.1' };
    expect(stackDrifts(old, { torch: '2.5.1' })).toEqual([]);
  });

  it('compares counters by order of magnitude: 0 → 40 recompiles is a drift, 3 → 4 is not', () => {
    expect(stackDrifts(BASE, env((e) => (e.compile.recompiles = 4)))).toEqual([]);
    const churning = stackDrifts(BASE, env((e) => (e.compile.recompiles = 40)));
    expect(churning).toEqual([expect.objectContaining({ key: 'compile.recompiles', effect: 'medium', direction: 'slower', reason: expect.stringMatching(/recompiled 40 times, the baseline 0/) })]);
  });

  it('ranks loading moved into the training process above pin_memory, and both above persistent_workers', () => {
    const current = env((e) => {
      e.loader.num_workers = 0;
      e.loader.pin_memory = false;
      e.loader.persistent_workers = false;
    });
    const drifts = stackDrifts(BASE, current, 'slower');
    expect(drifts.map((d) => [d.key, d.effect])).toEqual([
      ['loader.num_workers', 'large'],
      ['loader.pin_memory', 'medium'],
      ['loader.persistent_workers', 'small'],
    ]);
    expect(drifts[0]!.reason).toMatch(/num_workers 0, the baseline 8/);
  });

  it('against a run whose hook sent no fingerprint (older), says nothing of the fingerprint, only of what both sent', () => {
    const old = { python: BASE.python, torch: '2.5.1', cuda: BASE.cuda, cudnn: BASE.cudnn, gpu_name: BASE.gpu_name, loader: { ...BASE.loader, num_workers: 4 } };
    expect(stackDrifts(old, BASE).map((d) => d.key)).toEqual(['loader.num_workers']);
  });

  it('lists a key only one run reported as of unknown effect, after the known ones', () => {
    const drifts = stackDrifts(BASE, env((e) => {
      delete (e.loader as Partial<Env['loader']>).prefetch_factor;
      e.loader.persistent_workers = false;
    }), 'slower');
    expect(drifts.map((d) => [d.key, d.effect, d.reason])).toEqual([
      ['loader.persistent_workers', 'small', 'persistent_workers off: workers are started again every epoch'],
      ['loader.prefetch_factor', 'unknown', 'loader.prefetch_factor reported by the baseline only'],
    ]);
  });

  it('puts keys it does not know last, as unknown', () => {
    const drifts = stackDrifts({ ...BASE, custom: 'a' }, { ...BASE, custom: 'b', python: '3.12.1' }, 'slower');
    expect(drifts.map((d) => [d.key, d.effect])).toEqual([
      ['python', 'small'],
      ['custom', 'unknown'],
    ]);
  });

  it('ranks deterministic mode and cudnn.benchmark as medium, slower', () => {
    const current = env((e) => {
      e.stack.cudnn_benchmark = false;
      e.stack.deterministic_algorithms = true;
    });
    expect(stackDrifts(BASE, current).map((d) => [d.key, d.effect, d.direction])).toEqual([
      ['stack.cudnn_benchmark', 'medium', 'slower'],
      ['stack.deterministic_algorithms', 'medium', 'slower'],
    ]);
  });
});

describe('what changed on the node', () => {
  const node: NodeFacts = { cpu_model: 'AMD EPYC 7763', cores_logical: 128, cores_physical: 64, memory_bytes: 1024 * 2 ** 30, gpu_models: [{ name: 'NVIDIA A100-SXM4-80GB', count: 8 }], gpu_count: 8, driver_version: '550.54.15', cuda_version: '12.4', cores_per_gpu: 16 };

  it('says "8 cores per GPU, the baseline 16", first, as a large slowdown', () => {
    const drifts = nodeDrifts(node, { ...node, cores_logical: 64, cores_per_gpu: 8, driver_version: '560.35.03' }, 'slower');
    expect(drifts.map((d) => [d.key, d.effect])).toEqual([
      ['node.cores_per_gpu', 'large'],
      ['node.driver_version', 'medium'],
      ['node.cores_logical', 'small'],
    ]);
    expect(drifts[0]!.reason).toBe("8 cores per GPU, the baseline 16: less CPU to feed each GPU's loader");
  });

  it('says nothing where either run has no inventory, or a figure is unknown in one of them', () => {
    expect(nodeDrifts(undefined, node)).toEqual([]);
    expect(nodeDrifts(node, null)).toEqual([]);
    expect(nodeDrifts(node, { ...node, cores_per_gpu: null, memory_bytes: null })).toEqual([]);
  });

  it('merges with the env drifts into one ranking', () => {
    const merged = rankDrifts([...envDrifts(BASE, env((e) => (e.torch = '2.6.0'))), ...nodeDrifts(node, { ...node, gpu_models: [{ name: 'NVIDIA H100 80GB HBM3', count: 8 }] })], 'slower');
    expect(keys(merged)).toEqual(['node.gpu_models', 'torch']);
  });
});

describe('frequent recompiles as a cause', () => {
  const withCompile = (compile: Record<string, unknown>) => ({ ...BASE, compile: { ...BASE.compile, ...compile } });

  it(`fires at ${RECOMPILE_THRESHOLDS.perMinute} recompiles in the last minute (dynamo's recompile limit), not at 7`, () => {
    expect(recompileCause(withCompile({ recompiles: 30, recompiles_1m: 7, recompile_s_1m: 0.5 }))).toBeNull();
    const cause = recompileCause(withCompile({ recompiles: 30, recompiles_1m: 8, recompile_s_1m: 0.5 }), { steps: 100, seconds: 10 });
    expect(cause).toEqual({ cause: 'recompiles', why: 'torch.compile recompiled 8 times in the last minute, 1% of that minute spent recompiling, about one recompile every 75 steps' });
  });

  it('fires on time: 2 recompiles that took 9 s of the last minute (15%)', () => {
    expect(recompileCause(withCompile({ recompiles_1m: 2, recompile_s_1m: 9 }))).toMatchObject({ cause: 'recompiles', why: expect.stringMatching(/15% of that minute/) });
    expect(recompileCause(withCompile({ recompiles_1m: 2, recompile_s_1m: 5 }))).toBeNull();
  });

  it('says nothing without recompiles in the last minute, or without the compile group (an eager job, an older torch)', () => {
    expect(recompileCause(withCompile({ recompiles: 50, recompiles_1m: 0, recompile_s_1m: 0 }))).toBeNull();
    expect(recompileCause({ torch: '2.1.0' })).toBeNull();
    expect(recompileCause({ compile: { in_use: true, compiles: 40 } })).toBeNull();
  });
});
