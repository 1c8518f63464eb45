import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { parseInput } from '../src/protocol/parse.js';
import { RunsResponseSchema } from '../src/protocol/runs.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * The run history through the real sidecar: three runs of one job into one --out, a scripted hook
 * each. The second doubles its batch and its step time (no slower per sample), the third waits on
 * data: slower per sample than the median of the two before, live in the state and in its summary.
 */

const cleanups = cleanupList();

const JOB = 'hist';

/** One run: a hello in a session of its own, `n` steps, then `end`; resolves once it is in. */
async function runOnce(sidecar: RunningSidecar, session: string, spec: { durMs: number; dataMs: number; samples: number; n?: number }, before?: () => Promise<void>) {
  const hook = await TestHook.connect(sidecar.ingestUrl);
  cleanups.push(() => hook.close());
  const n = spec.n ?? 80;
  // Its monotonic clock reads past its last step's end at hello: the steps ran before, as a hook's buffered ones do.
  hook.send(hello({ job: JOB, session, env: { python: '3.11.7', loader: { batch_size: spec.samples } }, clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: (n * spec.durMs + 100) * 1_000_000 } }));
  await hook.next((m) => m.type === 'welcome');
  hook.send(steps(range(1, n).map((seq) => row({ seq, durMs: spec.durMs, dataMs: spec.dataMs, h2dMs: 0.5, computeMs: spec.durMs - spec.dataMs - 1, samples: spec.samples }))));
  await hook.next((m) => m.type === 'ack' && m.ack >= n);
  await before?.();
  hook.send({ v: 1, type: 'end', reason: 'done' });
}

const summaryIn = (dir: string, name: string): Summary | null => (existsSync(path.join(dir, name)) ? (JSON.parse(readFileSync(path.join(dir, name), 'utf8')) as Summary) : null);

describe('the run history, through the sidecar', () => {
  it('compares each run with the ones before it, per sample, live and in its summary, and serves the history', async () => {
    const out = tempDir();
    const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out, '--end-grace', '1', '--regression-threshold', '15']);
    cleanups.push(() => sidecar.stop('SIGKILL'));

    await runOnce(sidecar, 'run-1', { durMs: 10, dataMs: 1, samples: 32 });
    const first = await waitFor(() => summaryIn(out, 'summary-hist.json'), 10_000);
    expect(first.baseline).toBeUndefined();
    expect(first.samples_per_step).toBe(32);

    // Twice the batch in twice the time: as fast per sample.
    await runOnce(sidecar, 'run-2', { durMs: 20, dataMs: 2, samples: 64 });
    const second = await waitFor(() => summaryIn(out, 'summary-hist.2.json'), 10_000);
    expect(second.baseline!.change_pct!).toBeCloseTo(0, 0);
    expect(second.baseline!.text).toMatch(/^About as fast per sample as the previous run/);
    expect(second.regression).toBeUndefined();
    expect(second.history!.map((r) => r.run)).toEqual([1]);

    // 30% slower per sample, all of it waiting for data: compared live while it runs, then in its summary.
    await runOnce(sidecar, 'run-3', { durMs: 13, dataMs: 4, samples: 32 }, async () => {
      const live = await waitFor(async () => {
        const state = await sidecar.state();
        const job = state.jobs.find((j: { job: string }) => j.job === JOB);
        return job?.run === 3 && job.baseline ? job.baseline : null;
      }, 10_000);
      expect(live.change_pct).toBeGreaterThan(20);
      expect(live.text).toMatch(/slower per sample than the median of the last 2 runs/);
      const metrics = await (await fetch(`${sidecar.http}/metrics`)).text();
      expect(Number(/^stepscope_job_slowdown_ratio\{training_job="hist"\} (\S+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0.2);
      // Not yet a regression: that takes 30 s past warm-up.
      expect(metrics).toMatch(/^stepscope_job_regression\{training_job="hist"\} 0$/m);
    });
    const third = await waitFor(() => summaryIn(out, 'summary-hist.3.json'), 10_000);
    expect(third.regression).toMatchObject({ threshold_pct: 15, against: expect.stringMatching(/^the median of the last 2 runs/) });
    expect(third.regression!.change_pct).toBeGreaterThan(20);
    expect(third.regression!.text).toMatch(/from data wait/);
    // The run's own files are written one after the other, its report last.
    await waitFor(() => existsSync(path.join(out, 'report-hist.3.html')), 10_000);
    expect(readFileSync(path.join(out, 'summary-hist.3.md'), 'utf8').split('\n')[2]).toMatch(/^\*\*Regression:\*\* \d+(\.\d)?% slower per sample/);
    const regressionLog = await sidecar.waitForLog((line) => line.level === 40 && /^regression: /.test(line.msg));
    expect(regressionLog).toMatchObject({ job: JOB, run: 3, threshold_pct: 15 });

    expect(readdirSync(path.join(out, 'history', JOB))).toHaveLength(3);
    const response = await fetch(`${sidecar.http}/v1/runs?job=${JOB}`);
    const runs = parseInput(RunsResponseSchema, await response.json(), 'runs');
    expect(runs.runs.map((r) => [r.run, r.regression])).toEqual([
      [3, true],
      [2, false],
      [1, false],
    ]);
    expect(runs).toMatchObject({ job: JOB, threshold_pct: 15, skipped: 0, reference: { kind: 'history', runs: 3 } });
    expect((await fetch(`${sidecar.http}/v1/runs`)).status).toBe(400);
    expect(await sidecar.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('warns at start that without --out no run history is kept', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const warning = await sidecar.waitForLog((line) => line.level === 40 && /^no --out/.test(line.msg));
    expect(warning.msg).toMatch(/no run history is kept/);
  });
});
