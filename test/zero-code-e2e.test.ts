import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { findVenvPython } from './support/python.js';
import { fixture, runProcess, stepscopeRun } from './support/run-python.js';
import { runWithSidecar, stepSeconds } from './support/torch-runs.js';
import { ROOT } from './support/sidecar.js';

/**
 * The zero-code path on current PyTorch (the test environment from PyPI, python-hook/
 * requirements-test.txt): training scripts in the style of PyTorch's own examples, which know
 * nothing of stepscope, timed from outside and checked against a real sidecar for the exact step
 * count, step times that add up to the wall time the scripts measured themselves, and the verdict.
 * The Debian-PyTorch (1.13) tests of the explicit API stay in hook-e2e and straggler-e2e; the
 * zero-code path on 1.13 is in the hook's own suite (python-hook/tests/test_auto.py).
 *
 * The two scenarios run at once, one process each; single-threaded torch keeps them off each
 * other's core. Verdicts are far from their bars: the slow transform makes ~85% of the step data
 * (the bar is 20%; sleeping, it stays far above it however loaded the machine), the CNN's data is ~1%.
 */

// Importing current torch twice costs ~20 s of CPU: run by .ci/run after `npm test` (with the framework
// runs), whose budget is 3 minutes on 2 cores; the zero-code unit tests run in `npm test` on 1.13 and 2.15.
const venv = process.env.STEPSCOPE_TEST_FRAMEWORKS ? findVenvPython() : { python: null, why: 'set STEPSCOPE_TEST_FRAMEWORKS=1 to run it (.ci/run does, after npm test)' };
const quiet = { OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1' };
/** A loaded machine takes its time importing torch; the runs themselves are seconds. */
const TIMEOUT = 180_000;

describe.skipIf(!venv.python)(`zero-code path on current PyTorch${venv.python ? '' : ` (skipped: ${venv.why})`}`, () => {
  it.concurrent('`stepscope run -- python` an unmodified MNIST example: every optimizer step, compute-bound', async () => {
    const run = stepscopeRun();
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([
        runProcess(
          run.command,
          [...run.args, '--url', url, '--job', 'mnist', '--', venv.python!, fixture('zero_code/mnist_like.py'), '--train-size', '240', '--batch-size', '4'],
          { ...quiet, PYTHONPATH: '' },
          170_000,
          'stepscope run mnist_like.py',
        ),
      ]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script).toMatchObject({ steps: 60, samples: 240 });
    expect(script.torch).toMatch(/^2\./);
    const [rank] = summary.ranks;
    expect(summary).toMatchObject({ job: 'mnist', world_size: 1, steps: 60 });
    expect(rank.steps).toBe(60);
    // The steps tile the training loop: from its first batch to its last optimizer step.
    expect(Math.abs(stepSeconds(rank) - script.train_s)).toBeLessThan(0.05 * script.train_s + 0.05);
    expect(rank.breakdown.data).toBeLessThan(0.1);
    expect(rank.breakdown.compute).toBeGreaterThan(0.7);
    expect([summary.verdict, rank.verdict], summary.headline).toEqual(['compute-bound', 'compute-bound']);
    expect(summary.samples_per_s).toBeGreaterThan(0);
    expect(summary.env).toMatchObject({ instrumentation: 'auto', loader: { batch_size: 4, num_workers: 0 } });
    expect(summary.env.torch).toMatch(/^2\./);
    // The stack fingerprint of a plain fp32 loop on the CPU: steps ran without autocast, nothing compiled, no CUDA.
    expect(summary.env.stack).toMatchObject({ amp: 'off', matmul_precision: 'highest', cuda_in_use: false, deterministic_algorithms: false });
    expect(summary.env.compile).toBeUndefined();
  }, TIMEOUT);

  it.concurrent('`python -m stepscope run` an ImageNet-style loop with a slow transform: input-bound, the data share it measured', async () => {
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([
        runProcess(
          venv.python!,
          ['-m', 'stepscope', 'run', fixture('zero_code/imagenet_like.py'), '--images', '960', '--batch-size', '16', '--decode-ms', '3', '--workers', '0'],
          { ...quiet, STEPSCOPE_URL: url, STEPSCOPE_JOB: 'imagenet' },
          170_000,
          'python -m stepscope run imagenet_like.py',
        ),
      ]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script.steps).toBe(60);
    const [rank] = summary.ranks;
    expect(summary).toMatchObject({ job: 'imagenet', steps: 60 });
    expect(rank.steps).toBe(60);
    // The example's own batch times (one fetch to the next) add up to the steps' time...
    expect(Math.abs(stepSeconds(rank) - script.batch_s)).toBeLessThan(0.05 * script.batch_s + 0.05);
    // ...and its own data time is the data share stepscope found.
    const measured = script.data_s / script.batch_s;
    expect(measured).toBeGreaterThan(0.3); // ~0.85 on an idle machine; the verdict's bar is 0.2
    expect(Math.abs(rank.breakdown.data - measured)).toBeLessThanOrEqual(0.1 * measured);
    expect([summary.verdict, rank.verdict], summary.headline).toEqual(['input-bound', 'input-bound']);
    expect(summary.env).toMatchObject({ instrumentation: 'auto', loader: { batch_size: 16, num_workers: 0, pin_memory: false } });
    // Advice that fits the job (whichever cause the machine's load makes it): no prefetch or persistent
    // workers without workers, no pinned memory without a GPU.
    const ids = summary.recommendations.map((r: { id: string }) => r.id);
    expect(ids.filter((id: string) => ['pin-memory', 'prefetch', 'persistent-workers'].includes(id))).toEqual([]);
  }, TIMEOUT);
  // Issue 26: a loop with neither a DataLoader nor an optimizer (batches sliced from a tensor, weights
  // updated by hand), evaluating every 5 steps under @torch.no_grad() with the model in eval mode.
  // 25 batches each time: evaluation then takes about five times the rest of the time outside the
  // phases (each step's own batch slicing). With 10, about twice, and at a load of 8 a window in
  // which preemptions fell on the slicing read outside-phases (once in 12 runs).
  it.concurrent('a hand-written-SGD loop without a DataLoader, evaluating every 5 steps: host-bound (evaluation), every step seen', async () => {
    const run = stepscopeRun();
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([
        runProcess(run.command, [...run.args, '--url', url, '--job', 'lm', '--', venv.python!, path.join(ROOT, 'scripts', 'accuracy', 'handwritten_lm.py'), '--seconds', '6', '--eval-every', '5', '--eval-batches', '25'], { ...quiet, PYTHONPATH: '' }, 170_000, 'stepscope run handwritten_lm.py'),
      ]),
    );
    const [script] = runs.map((r) => r.result);
    expect(script.torch).toMatch(/^2\./);
    // Every training step, the last one ended at its close: the evaluation makes no step of its own.
    expect(summary.steps).toBe(script.steps);
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['host-bound', 'evaluation']);
    expect(summary.causes[0]).toMatchObject({ cause: 'evaluation' });
    expect(summary.recommendations[0].id).toBe('evaluate-less-often');
  }, TIMEOUT);
});
