import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compare } from '../src/analysis/compare.js';
import type { Summary } from '../src/protocol/summary.js';
import { CLI, ROOT } from './support/sidecar.js';

const fixture = (name: string) => path.join(ROOT, 'test', 'fixtures', 'summaries', name);
const load = (name: string) => JSON.parse(readFileSync(fixture(name), 'utf8')) as Summary;

describe('compare against a baseline', () => {
  // The worked case: 28 → 39 minutes an epoch, GPU utilization 92% → 58%, new online augmentation.
  const baseline = load('a10-baseline.json');
  const current = load('a10-augmented.json');

  it('attributes the slowdown to the phase that grew', () => {
    const c = compare(baseline, current);
    expect(c.step_ms).toEqual({ baseline: 280, current: 390 });
    expect(c.change_pct).toBeCloseTo(39.3, 1);
    expect(c.grew_most).toBe('data');
    expect(c.delta_ms.data).toBeCloseTo(390 * 0.31 - 280 * 0.04, 2);
    expect(c.delta_ms.data!).toBeGreaterThan(c.delta_ms.compute!);
    expect(c.gpu.util_mean).toEqual({ baseline: 92, current: 58 });
    expect(c.verdict).toEqual({ baseline: 'compute-bound', current: 'input-bound', baseline_cause: null, current_cause: 'cpu-saturated' });
  });

  it('lists what changed in the environment, and not the noise (host, pid), with its usual effect', () => {
    expect(compare(baseline, current).env_changes).toEqual([
      { key: 'torch', baseline: '2.1.2', current: '2.2.0', effect: 'medium', direction: 'either', reason: 'PyTorch 2.1.2 → 2.2.0: a new version may have taken a slower path (kernels, defaults)' },
    ]);
  });

  // The same job after someone "cleaned up" the training script: AMP gone, TF32 gone, fewer workers, a new torch.
  type Flags = Record<string, string | number | boolean>;
  const withStack = (summary: Summary, stack: Flags, loader: Flags = {}, env: Flags = {}): Summary => ({
    ...summary,
    env: { ...summary.env, ...env, loader: { ...(summary.env.loader as Flags), ...loader }, stack: { cudnn_benchmark: true, cudnn_tf32: true, ...stack } },
  });
  const before = withStack(baseline, { amp: 'bfloat16', matmul_precision: 'high' });
  const after = withStack({ ...baseline, step_ms: { ...baseline.step_ms, mean: 560 } }, { amp: 'off', matmul_precision: 'highest' }, { num_workers: 2 }, { torch: '2.2.0' });

  it('orders what changed by its usual effect on speed, and names the largest first in the headline', () => {
    const c = compare(before, after);
    expect(c.change_pct).toBe(100);
    expect(c.env_changes.map((e) => [e.key, e.effect])).toEqual([
      ['stack.amp', 'large'],
      ['stack.matmul_precision', 'large'],
      ['loader.num_workers', 'medium'],
      ['torch', 'medium'],
    ]);
    expect(c.text.split('\n')[0]).toMatch(/; changed since: stack\.amp bfloat16→off, stack\.matmul_precision high→highest, loader\.num_workers 4→2 and 1 more\.$/);
    expect(c.text).toMatch(/stack\.amp: "bfloat16" → "off" \(large: mixed precision off/);
  });

  it('ranks first what goes the way the run went: a faster run leads with AMP turned on', () => {
    const faster = compare(after, { ...before, step_ms: { ...before.step_ms, mean: 140 } });
    expect(faster.env_changes[0]).toMatchObject({ key: 'stack.amp', direction: 'faster' });
    // Slower though AMP came on: the workers it lost explain it better than the AMP it gained.
    const slower = compare(withStack(baseline, { amp: 'off' }), withStack({ ...baseline, step_ms: { ...baseline.step_ms, mean: 400 } }, { amp: 'bfloat16' }, { num_workers: 1 }));
    expect(slower.env_changes.map((e) => e.key)).toEqual(['loader.num_workers', 'stack.amp']);
  });

  it('takes the node inventories where the summaries have them, ranked with the env', () => {
    const node = { cpu_model: 'AMD EPYC 7313', cores_logical: 32, cores_physical: 16, memory_bytes: 256 * 2 ** 30, gpu_models: [{ name: 'NVIDIA A10', count: 2 }], gpu_count: 2, driver_version: '535.104.05', cuda_version: '12.2', cores_per_gpu: 16 };
    const c = compare({ ...baseline, node }, { ...current, node: { ...node, cores_per_gpu: 8, gpu_count: 4 } });
    expect(c.env_changes.map((e) => e.key)).toEqual(['node.cores_per_gpu', 'torch', 'node.gpu_count']);
    expect(c.env_changes[0]!.reason).toMatch(/^8 cores per GPU, the baseline 16/);
    expect(compare({ ...baseline, node }, current).env_changes.map((e) => e.key)).toEqual(['torch']);
  });

  it('stepscope compare prints the human text, and --json the object', () => {
    const text = execFileSync(process.execPath, [CLI, 'compare', fixture('a10-baseline.json'), fixture('a10-augmented.json')], { encoding: 'utf8' });
    expect(text).toMatch(/Step time is 39.3% slower: 280.0 ms → 390.0 ms/);
    expect(text).toMatch(/Most of the change is data: \+109.7 ms a step/);
    expect(text).toMatch(/Verdict: compute-bound → input-bound \(cpu-saturated\)/);
    expect(text).toMatch(/torch: "2.1.2" → "2.2.0"/);
    const json = JSON.parse(execFileSync(process.execPath, [CLI, 'compare', '--json', fixture('a10-baseline.json'), fixture('a10-augmented.json')], { encoding: 'utf8' }));
    expect(Object.keys(json)).toEqual(expect.arrayContaining(['step_ms', 'delta_ms', 'verdict', 'env_changes']));
  });

  it('stepscope report renders a summary again, as text or Markdown', () => {
    const md = execFileSync(process.execPath, [CLI, 'report', '--format', 'md', fixture('a10-augmented.json')], { encoding: 'utf8' });
    expect(md).toMatch(/^# stepscope: detector-week2/);
    expect(md).toMatch(/\*\*input-bound \(cpu-saturated\) for 96% of the job/);
    expect(md).toMatch(/\| 20\.0 \| 2340\.0 \| input-bound \(cpu-saturated\) \|/);
    const text = execFileSync(process.execPath, [CLI, 'report', fixture('a10-augmented.json')], { encoding: 'utf8' });
    expect(text).toMatch(/^stepscope summary: detector-week2/);
  });

  it('refuses a file that is not a summary, with a one-line error', () => {
    let error = '';
    try {
      execFileSync(process.execPath, [CLI, 'report', path.join(ROOT, 'package.json')], { encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      error = String((e as { stderr: string }).stderr);
    }
    expect(error.trim()).toMatch(/^stepscope: .*package.json: not a stepscope summary/);
  });
});
