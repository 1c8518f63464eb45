import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compare } from '../src/analysis/compare.js';
import type { Summary } from '../src/analysis/summary.js';
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

  it('lists what changed in the environment, and not the noise (host, pid)', () => {
    expect(compare(baseline, current).env_changes).toEqual([{ key: 'torch', baseline: '2.1.2', current: '2.2.0' }]);
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
