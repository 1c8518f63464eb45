import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { recompileCause } from '../src/analysis/stack.js';
import { findVenvPython } from './support/python.js';
import { fixture, runProcess } from './support/run-python.js';
import { ROOT } from './support/sidecar.js';
import { runWithSidecar, stepSeconds } from './support/torch-runs.js';

/**
 * Real multi-rank and framework runs on current PyTorch (the test environment from PyPI), each
 * against a real sidecar: a DDP job under real `torchrun --nproc_per_node 2` on gloo through the
 * zero-code path (STEPSCOPE_AUTO=1, as the Kubernetes manifests run it), a Lightning run with
 * stepscope's Callback and a Hugging Face Trainer run with its TrainerCallback. Each is checked for
 * the exact step count, step times that add up to the wall time the script measured itself, and the
 * verdict (compute-bound: their data is a few percent of the step, the bar is 20%; the DDP job's
 * all-reduce, timed without a call, may make it communication-bound on a loaded machine). And the software
 * stack fingerprint of an unmodified loop on torch.compile and bf16 autocast whose shapes change.
 */

/** Heavier than the rest of `npm test` (Lightning and Transformers take seconds of CPU to import):
 * run by .ci/run after it, with STEPSCOPE_TEST_FRAMEWORKS=1. */
const ON = !!process.env.STEPSCOPE_TEST_FRAMEWORKS;
const venv = ON ? findVenvPython() : { python: null, why: 'set STEPSCOPE_TEST_FRAMEWORKS=1 to run them (.ci/run does, after npm test)' };
const TIMEOUT = 240_000;
const HOOK = path.join(ROOT, 'python-hook');
const zeroCodeEnv = { STEPSCOPE_AUTO: '1', PYTHONPATH: [path.join(HOOK, 'stepscope', '_boot'), HOOK].join(path.delimiter), OMP_NUM_THREADS: '1' };

describe.skipIf(!venv.python)(`real frameworks on current PyTorch${venv.python ? '' : ` (skipped: ${venv.why})`}`, () => {
  it.concurrent('a DDP job under torchrun with 2 ranks on gloo, unmodified (STEPSCOPE_AUTO=1): both ranks, every step', async () => {
    const torchrun = path.join(path.dirname(venv.python!), 'torchrun');
    const measured: any[] = [];
    // 240 steps a rank: a quiet step takes about 17 ms, and a rank's first verdict needs 2 s of
    // steps after its warm-up when a limiter is near its bar (8 slices); at 60 steps a fast run
    // ended with a rank still deciding (warming-up), seen in CI.
    const { summary } = await runWithSidecar(async (url, out) => {
      const run = await runProcess(
        torchrun,
        ['--standalone', '--nproc_per_node', '2', fixture('zero_code/ddp_torchrun.py'), '--size', '15360', '--batch-size', '32', '--out-dir', out],
        { ...zeroCodeEnv, STEPSCOPE_URL: url, STEPSCOPE_JOB: 'ddp' },
        200_000,
        'torchrun ddp_torchrun.py',
      );
      // What each rank measured itself (the launcher mixes the ranks' output).
      if (run.code === 0) for (const rank of [0, 1]) measured.push(JSON.parse(readFileSync(path.join(out, `rank${rank}.json`), 'utf8')));
      return [run];
    });
    expect(measured.map((m) => [m.rank, m.steps, m.world_size])).toEqual([
      [0, 240, 2],
      [1, 240, 2],
    ]);
    expect(summary).toMatchObject({ job: 'ddp', world_size: 2, steps: 480 });
    expect(summary.ranks.map((r: any) => [r.rank, r.steps])).toEqual([
      [0, 240],
      [1, 240],
    ]);
    for (const rank of summary.ranks) {
      const own = measured[rank.rank];
      expect(Math.abs(stepSeconds(rank) - own.train_s), `rank ${rank.rank}`).toBeLessThan(0.05 * own.train_s + 0.05);
      expect(rank.breakdown.data, `rank ${rank.rank}`).toBeLessThan(0.1);
      // DDP is watched without a call: its all-reduce of 5 MB of gradients a step is timed, and on a
      // shared 2-core machine it can take half the step. Which of the two it is depends on the load;
      // waiting alike, neither rank is ever the slow one.
      expect([rank.verdict, rank.cause], `rank ${rank.rank}: ${summary.headline}`).toSatisfy(
        ([verdict, cause]: [string, string | null]) => (verdict === 'compute-bound' && cause === null) || (verdict === 'communication-bound' && cause === 'slow-collective'),
      );
    }
    expect(summary.evidence.figures.comm_wait_share, 'the all-reduce is measured').not.toBeNull();
    expect(summary.straggler).toBeNull();
  }, TIMEOUT);

  it.concurrent('Lightning with StepscopeCallback: one step per optimizer step, validation outside the data', async () => {
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([
        runProcess(venv.python!, [fixture('frameworks/lightning_train.py'), '--steps', '60', '--val-every', '20'], { STEPSCOPE_URL: url, STEPSCOPE_JOB: 'lightning', OMP_NUM_THREADS: '1' }, 200_000, 'lightning_train.py'),
      ]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script.steps).toBe(60);
    const [rank] = summary.ranks;
    expect(summary).toMatchObject({ job: 'lightning', steps: 60 });
    expect(Math.abs(stepSeconds(rank) - script.train_s)).toBeLessThan(0.05 * script.train_s + 0.05);
    expect(rank.breakdown.data).toBeLessThan(0.15);
    expect([summary.verdict, rank.verdict], summary.headline).toEqual(['compute-bound', 'compute-bound']);
    expect(summary.env.instrumentation).toBe('lightning');
  }, TIMEOUT);

  it.concurrent('Hugging Face Trainer with StepscopeCallback: one step per optimizer step', async () => {
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([runProcess(venv.python!, [fixture('frameworks/hf_trainer.py'), '--steps', '60'], { STEPSCOPE_URL: url, STEPSCOPE_JOB: 'hf', OMP_NUM_THREADS: '1' }, 200_000, 'hf_trainer.py')]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script.steps).toBe(60);
    const [rank] = summary.ranks;
    expect(summary).toMatchObject({ job: 'hf', steps: 60 });
    expect(Math.abs(stepSeconds(rank) - script.train_s)).toBeLessThan(0.05 * script.train_s + 0.05);
    expect(rank.breakdown.data).toBeLessThan(0.15);
    expect([summary.verdict, rank.verdict], summary.headline).toEqual(['compute-bound', 'compute-bound']);
    expect(summary.env.instrumentation).toBe('transformers');
  }, TIMEOUT);

  it.concurrent('torch.compile with changing shapes and bf16 autocast, unmodified: the stack fingerprint names the dtype and counts the recompiles', async () => {
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([runProcess(venv.python!, [fixture('frameworks/compiled_amp.py'), '--steps', '48', '--lengths', '12'], { ...zeroCodeEnv, STEPSCOPE_URL: url, STEPSCOPE_JOB: 'compiled' }, 200_000, 'compiled_amp.py')]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script.steps).toBe(48);
    expect(summary).toMatchObject({ job: 'compiled', steps: 48 });
    const { stack, compile, nccl } = summary.env;
    // Autocast is entered inside the step, around the compiled model: seen through autocast.__enter__.
    expect(stack).toMatchObject({ amp: 'bfloat16', matmul_precision: 'high', cuda_in_use: false, deterministic_algorithms: false });
    expect(nccl, "PyPI's torch is a CUDA build: NCCL's version, read without initialising CUDA").toMatch(/^\d+\.\d+\.\d+/);
    // Two compiled functions see 12 sequence lengths with static shapes: each recompiles up to dynamo's limit of 8.
    expect(script.frames.total).toBeGreaterThanOrEqual(16);
    expect(compile).toMatchObject({ in_use: true, graph_breaks: 0 });
    expect(compile.recompiles).toBeGreaterThanOrEqual(14);
    expect(compile.recompiles).toBeLessThan(script.frames.total);
    expect(compile.recompiles_1m).toBe(compile.recompiles);
    expect(compile.recompile_s_1m).toBeGreaterThan(0);
    expect(recompileCause(summary.env)).toMatchObject({ cause: 'recompiles', why: expect.stringMatching(/recompiled \d+ times in the last minute/) });
    // Advice fits the job: nothing asks for what it already does (autocast, torch.compile) or cannot
    // use (pinned memory without a GPU). Where the rules named the recompiles, their advice leads.
    const ids: string[] = summary.recommendations.map((r: { id: string }) => r.id);
    expect(ids.filter((id) => ['use-bf16-autocast', 'allow-tf32', 'pin-memory'].includes(id))).toEqual([]);
    const asked = summary.recommendations.map((r: { text: string }) => r.text).join('\n');
    expect(asked).not.toMatch(/Mixed precision is off|pin_memory=True|Try torch\.compile|Fuse them with torch\.compile|train in bf16/);
    if (summary.cause === 'recompiles') expect(ids[0]).toBe('mark-dynamic');
  }, TIMEOUT);
});
