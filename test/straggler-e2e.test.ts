import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupList } from './support/cleanup-list.js';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { startFakeProc } from './support/fake-proc.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ALL_E2E, expectScenario, RECORDING, recordScenario, type ScenarioMeta } from './support/scenarios.js';
import { startSidecar, tempDir } from './support/sidecar.js';
import { freePort } from './support/listening.js';

/**
 * A real two-rank data-parallel job (torch.distributed, gloo on CPU) in which rank 1's loader is
 * slow: rank 0 waits for it in the all-reduce, so both ranks' steps take the same time, and only
 * the ranks' own delays (data wait) show who holds the job back.
 *
 * Live only with STEPSCOPE_E2E=all (.ci/run's framework stage) or when recording: which rank waits
 * how long is the machine's to stretch. `npm test` replays its recording (test/verdicts-replay.test.ts).
 */

const torch = findPython(['torch', 'torch.distributed']);

const cleanups = cleanupList();

function killByPidFile(pidFile: string) {
  if (!existsSync(pidFile)) return;
  try {
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // already gone
  }
}


describe.skipIf(!torch.python || !ALL_E2E)(`straggler in a real torch.distributed job${torch.python ? '' : ` (skipped: ${torch.why})`}`, () => {
  it("names rank 1, whose loader is slow, though both ranks' steps take the same time", async (context) => {
    const proc = startFakeProc({ cpuPct: 30 });
    cleanups.push(() => proc.stop());
    const out = tempDir();
    const gpu = fakeNvidiaSmiEnv({ gpus: 2 });
    cleanups.push(() => rmSync(out, { recursive: true, force: true }));
    cleanups.push(() => rmSync(gpu.dir, { recursive: true, force: true }));
    const sidecar = await startSidecar(['--gpu-source', 'nvidia-smi', '--proc-root', proc.root, '--out', out, '--exit-on-end', '--end-grace', '1', '--hold', '1'], gpu.env);
    cleanups.push(() => sidecar.stop('SIGKILL'));

    const port = await freePort();
    const job = 'ddp-slow-loader';
    const loop = ['--steps', '200', '--data-ms', '1', '--slow-rank', '1', '--slow-data-ms', '30', '--compute-ms', '5'];
    const ranks = [0, 1].map((rank) => {
      const pidFile = path.join(out, `rank${rank}.pid`);
      cleanups.push(() => killByPidFile(pidFile));
      return runPython(
        torch.python!,
        fixture('ddp_loop.py'),
        ['--port', String(port), ...loop, '--pid-file', pidFile],
        { STEPSCOPE_URL: sidecar.ingestUrl, STEPSCOPE_JOB: job, RANK: String(rank), WORLD_SIZE: '2', LOCAL_RANK: String(rank), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port) },
        90_000,
      );
    });
    const runs = await Promise.all(ranks);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.result).toMatchObject({ steps: 200, closed: true });
    }
    // The fast rank waited in the all-reduce: the two ranks took the same time.
    const [fast, slow] = runs.map((run) => run.result);
    expect(Math.abs(fast.elapsed_s - slow.elapsed_s) / slow.elapsed_s).toBeLessThan(0.05);
    expect(slow.data_s).toBeGreaterThan(5 * fast.data_s);

    const exit = await Promise.race([sidecar.exited, new Promise<null>((resolve) => setTimeout(() => resolve(null), 20_000))]);
    expect(exit, 'the sidecar exits once the job has ended (--exit-on-end)').toEqual({ code: 0, signal: null });
    const summary = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
    expect(summary).toMatchObject({ job, world_size: 2, steps: 400 });

    // Equal step times: the step time alone cannot tell the ranks apart.
    const [r0, r1] = summary.ranks;
    expect(Math.abs(r0.step_ms.mean - r1.step_ms.mean) / r1.step_ms.mean).toBeLessThan(0.05);
    // Rank 1's own delay is its data wait; rank 0's wait for it lands in its compute.
    // Nominally 30 of ~36 ms; the bounds leave room for a loaded machine stretching the all-reduce.
    expect(r1.breakdown.data).toBeGreaterThan(Math.max(0.4, 4 * r0.breakdown.data));
    expect(r0.breakdown.data).toBeLessThan(0.15);
    expect(r0.breakdown.compute).toBeGreaterThan(0.6);

    expect(summary.straggler, summary.headline).toMatchObject({ rank: 1, reason: 'data' });
    expect(summary.straggler.excess_ms).toBeGreaterThan(20);
    expect(summary.straggler.seconds).toBeGreaterThan(0);
    expect(summary.ranks.map((r: any) => [r.rank, r.straggler])).toEqual([
      [0, false],
      [1, true],
    ]);
    // The job is held back by its straggler, so the job's verdict is the straggler's.
    expect(r1).toMatchObject({ verdict: 'input-bound' });
    expect([summary.verdict, summary.cause], summary.headline).toEqual([r1.verdict, r1.cause]);
    // Rank 0 computes, then waits in the all-reduce for rank 1: the hook times the collective, so the
    // fast rank is communication-bound, waiting for the slow rank, which the evidence names.
    expect([r0.verdict, r0.cause]).toEqual(['communication-bound', 'slow-rank']);
    expect(summary.gpus.map((g: any) => [g.index, g.ranks])).toEqual([
      [0, [0]],
      [1, [1]],
    ]);

    // What test/verdicts-replay.test.ts checks on the recording (STEPSCOPE_RECORD).
    const meta: ScenarioMeta = {
      format: 'stepscope.scenario/v1',
      title: context.task.name,
      suite: context.task.suite?.name ?? '',
      test: 'test/straggler-e2e.test.ts',
      job,
      worldSize: 2,
      steps: 400,
      script: { loop, host: { cpuPct: 30 }, gpu: { gpus: 2 } },
      expect: {
        verdict: summary.ranks[1].verdict,
        cause: summary.ranks[1].cause,
        // The job's timeline as it came out (this test pins down the straggler, not the timeline).
        timeline: summary.timeline.slice(summary.timeline.findIndex((s: any) => s.verdict !== 'warming-up' && s.verdict !== 'idle')).map((s: any) => [s.verdict, s.cause]),
        straggler: { rank: 1, reason: 'data' },
        ranks: [
          { rank: 0, verdict: 'communication-bound', straggler: false },
          { rank: 1, verdict: 'input-bound', straggler: true },
        ],
        gpus: [
          { index: 0, ranks: [0] },
          { index: 1, ranks: [1] },
        ],
      },
      recordedAt: new Date().toISOString(),
    };
    expectScenario(summary, meta);
    if (RECORDING && !context.task.result?.errors?.length) recordScenario(out, meta);
  });
});
