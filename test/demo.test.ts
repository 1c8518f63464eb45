import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupList } from './support/cleanup-list.js';
import { findPython } from './support/python.js';
import { CLI, tempDir as newTempDir } from './support/sidecar.js';
import { killTree, track } from './support/children.js';
import { ALL_E2E } from './support/scenarios.js';

/**
 * `stepscope demo` as a newcomer runs it, without a terminal: the whole story, then its summary.
 * The story is live (8 s a regime, judged as it runs), which a loaded machine can blur: it runs in
 * .ci/run's live stage (STEPSCOPE_E2E=all), not in `npm test`.
 */

const plain = findPython();
const cleanups = cleanupList();

/** A fresh folder, removed after the test. */
function tempDir(): string {
  const dir = newTempDir();
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function run(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = track(spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }), 'demo');
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  // Should the test fail before the demo ends, the demo and what it started do not outlive it (a no-op once it exited).
  cleanups.push(() => killTree(child));
  return new Promise((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

/** The timeline's verdicts in order, without warm-up, idle, or a verdict repeated for a change of cause. */
function regimes(timeline: Array<{ verdict: string }>): string[] {
  return timeline.map((s) => s.verdict).filter((v, i, all) => v !== 'warming-up' && v !== 'idle' && v !== all[i - 1]);
}

describe('stepscope demo', () => {
  const skip = !plain.python ? ` (skipped: ${plain.why})` : !ALL_E2E ? ' (live: STEPSCOPE_E2E=all)' : '';
  it.skipIf(skip !== '')(`lives through compute-bound, input-bound and throttled, live, then prints and writes the summary${skip}`, async () => {
    const out = path.join(tempDir(), 'demo');
    const { code, stdout, stderr } = await run(['demo', '--fast', '--out', out]);
    expect(code, stderr).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toBe(`stepscope demo: a 2-rank training loop, 8 s each compute-bound → input-bound → throttled (simulated GPUs); files in ${out}`);
    // Live, without a terminal: plain lines as the verdict moves on, and the changes as events.
    const live = lines.filter((l) => /^\S+Z job=demo verdict=/.test(l)).map((l) => ({ verdict: /verdict=(\S+)/.exec(l)![1]! }));
    expect(regimes(live)).toEqual(['compute-bound', 'input-bound', 'throttled']);
    expect(lines).toContainEqual(expect.stringMatching(/event=verdict job=demo rank=- from=input-bound to=throttled cause=thermal$/));
    expect(lines).toContainEqual(expect.stringMatching(/gpu1 util=97% sm=63% temp=90C power=118\/150W thr=HwThermalSlowdown/));

    const summary = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
    expect(regimes(summary.timeline)).toEqual(['compute-bound', 'input-bound', 'throttled']);
    expect(summary).toMatchObject({ job: 'demo', world_size: 2, end_reason: 'all-ranks-ended', straggler: { rank: 1, reason: 'gpu-clocks' } });
    expect(summary.timeline.find((s: { verdict: string }) => s.verdict === 'throttled').cause).toBe('thermal');
    const advice: string[] = summary.recommendations.map((r: { id: string }) => r.id);
    expect(advice).toContain('check-cooling');
    // More workers only while a core is free: the demo reads this machine's real load, which other work may take.
    expect(advice.filter((id) => id === 'raise-num-workers' || id === 'no-free-core')).toHaveLength(1);
    expect(stdout).toContain('stepscope summary: demo');
    expect(stdout).toMatch(/^Timeline\n-+\n/m);
    expect(stdout).toContain(`Summary written to ${path.join(out, 'summary.md')}`);
    expect(readFileSync(path.join(out, 'summary.md'), 'utf8')).toMatch(/^# stepscope: demo/);
    for (const file of ['sidecar.log', 'rank-0.log', 'rank-1.log', 'gpu-scenario.json', 'wal-00000001.log', 'report.html', 'report-demo.html']) expect(existsSync(path.join(out, file)), file).toBe(true);
    // The report's charts cover the whole story.
    expect(summary.series.steps.length).toBeGreaterThanOrEqual(20);
    expect(summary.series.gpus.find((g: { index: number }) => g.index === 1).throttled).toContain(1);
  });

  it('says in one line that python3 is missing', async () => {
    const { code, stdout, stderr } = await run(['demo', '--fast', '--out', path.join(tempDir(), 'demo')], { PATH: tempDir(), STEPSCOPE_PYTHON: '' });
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe("stepscope demo: python3 not found: the demo's training loop needs Python 3.8 or later (install python3, or set STEPSCOPE_PYTHON)\n");
  });
});
