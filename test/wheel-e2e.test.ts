import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findVenvPython } from './support/python.js';
import { fixture, runProcess } from './support/run-python.js';
import { ROOT, tempDir } from './support/sidecar.js';
import { runWithSidecar } from './support/torch-runs.js';

/**
 * `pip install` of the built wheel, then `STEPSCOPE_AUTO=1 python train.py` with nothing on PYTHONPATH
 * (issue 21): the wheel's stepscope-auto.pth arms the zero-code path in every interpreter the variable
 * reaches, a 2-process torchrun's ranks included, and does nothing without it. In a fresh virtual
 * environment made from the test environment's interpreter, which sees that environment's PyTorch
 * through a .pth line (nothing is downloaded; Debian's PyTorch 1.13 cannot serve here: its torchrun
 * fails on Python 3.11 with or without stepscope), against real sidecars. Building a wheel and
 * importing torch in six interpreters take their seconds: run by .ci/run's framework stage
 * (STEPSCOPE_TEST_FRAMEWORKS=1), not npm test.
 */

const ON = !!process.env.STEPSCOPE_TEST_FRAMEWORKS;
const testEnv = ON ? findVenvPython() : { python: null, why: 'set STEPSCOPE_TEST_FRAMEWORKS=1 to run it (.ci/run does, after npm test)' };
const TIMEOUT = 240_000;
const work = tempDir('stepscope-wheel-');
let python = '';
let wheel = '';
/** Nothing of this checkout on the path: what runs is what pip installed. */
const installedOnly = { PYTHONPATH: '', OMP_NUM_THREADS: '1' };

afterAll(() => rmSync(work, { recursive: true, force: true }));

function must(command: string, args: string[], what: string) {
  const run = spawnSync(command, args, { encoding: 'utf8', timeout: 180_000, env: { ...process.env, PYTHONPATH: '', PIP_NO_INDEX: '1', PIP_DISABLE_PIP_VERSION_CHECK: '1' } });
  if (run.status !== 0) throw new Error(`${what} failed (${run.status}): ${run.stderr.slice(-2000)}`);
  return run.stdout;
}

describe.skipIf(!testEnv.python)(`the built wheel in a fresh virtual environment${testEnv.python ? '' : ` (skipped: ${testEnv.why})`}`, () => {
  beforeAll(() => {
    // Built from a copy: an in-place build would leave build/ and *.egg-info in the checkout.
    const source = path.join(work, 'src');
    cpSync(path.join(ROOT, 'python-hook'), source, { recursive: true, filter: (from) => !/(__pycache__|\.egg-info|[\\/]build$)/.test(from) });
    must(testEnv.python!, ['-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-w', path.join(work, 'dist'), source], 'pip wheel');
    wheel = path.join(work, 'dist', readdirSync(path.join(work, 'dist')).find((name) => name.endsWith('.whl'))!);
    const [base, torchSite] = must(testEnv.python!, ['-c', 'import sys, sysconfig; print(sys._base_executable); print(sysconfig.get_paths()["purelib"])'], 'the base interpreter').trim().split('\n');
    must(base!, ['-m', 'venv', path.join(work, 'venv')], 'python -m venv');
    python = path.join(work, 'venv', 'bin', 'python');
    const site = must(python, ['-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], 'purelib').trim();
    writeFileSync(path.join(site, 'test-environment-torch.pth'), `${torchSite}\n`);
    must(python, ['-m', 'pip', 'install', '--no-index', '--no-deps', wheel], 'pip install');
  }, TIMEOUT);

  it('installs the start-up line, which does nothing without STEPSCOPE_AUTO', () => {
    const site = must(python, ['-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], 'purelib').trim();
    expect(readFileSync(path.join(site, 'stepscope-auto.pth'), 'utf8')).toBe('import os; os.environ.get("STEPSCOPE_AUTO") and __import__("_stepscope_pth")\n');
    const probe = 'import sys, torch; print(" ".join(str(name in sys.modules) for name in ("stepscope", "_stepscope_pth")))';
    for (const env of [{}, { STEPSCOPE_AUTO: '0' }]) {
      const run = spawnSync(python, ['-c', probe], { encoding: 'utf8', env: { ...process.env, ...installedOnly, ...env } });
      expect(run.stdout.trim(), JSON.stringify(env)).toBe(env.STEPSCOPE_AUTO ? 'False True' : 'False False');
    }
  });

  it('`STEPSCOPE_AUTO=1 python train.py` reaches the sidecar: every optimizer step', async () => {
    const { summary, runs } = await runWithSidecar((url) =>
      Promise.all([
        runProcess(python, [fixture('zero_code/mnist_like.py'), '--train-size', '160', '--batch-size', '4'], { ...installedOnly, STEPSCOPE_AUTO: '1', STEPSCOPE_URL: url, STEPSCOPE_JOB: 'wheel' }, TIMEOUT, 'mnist_like.py'),
      ]),
    );
    expect(runs[0]!.result).toMatchObject({ steps: 40 });
    expect(summary).toMatchObject({ job: 'wheel', steps: 40, env: { instrumentation: 'auto' } });
  }, TIMEOUT);

  it('`STEPSCOPE_AUTO=1 torchrun --nproc_per_node 2`: both ranks, every step', async () => {
    const { summary } = await runWithSidecar(async (url, out) => [
      await runProcess(
        python,
        ['-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2', fixture('zero_code/ddp_torchrun.py'), '--size', '1280', '--batch-size', '32', '--out-dir', out],
        { ...installedOnly, STEPSCOPE_AUTO: '1', STEPSCOPE_URL: url, STEPSCOPE_JOB: 'wheel-ddp' },
        TIMEOUT,
        'torchrun ddp_torchrun.py',
      ),
    ]);
    expect(summary).toMatchObject({ job: 'wheel-ddp', world_size: 2, steps: 40 });
    expect(summary.ranks.map((r: any) => [r.rank, r.steps])).toEqual([
      [0, 20],
      [1, 20],
    ]);
  }, TIMEOUT);
});
