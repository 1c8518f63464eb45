import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { queryFields } from '../src/counters/nvidia-smi-parse.js';
import { findPython } from './support/python.js';
import { ROOT, tempDir } from './support/sidecar.js';

/**
 * scripts/gpu-check.sh, the one script that proves the GPU paths on a real GPU (docs/gpu-check.md),
 * checked here where no GPU exists: what it asks nvidia-smi is what the sidecar asks, it says a
 * failure as a FAIL line and a non-zero exit rather than swallowing it, and its checks pass on the
 * simulated CUDA layer and the stand-in drivers (`--simulate`). The whole --simulate run (zero-code
 * loops, NCCL on simulated GPUs, a sidecar's verdicts) takes a minute of mostly waiting: it runs in
 * .ci/run's framework stage (STEPSCOPE_TEST_FRAMEWORKS=1); npm test runs the parts below it.
 */

const SCRIPT = path.join(ROOT, 'scripts', 'gpu-check.sh');
const LINE = /^(PASS|FAIL|SKIP) [a-z0-9-]+: .+$|^(DONE|FAILED) gpu-check: \d+ s, output in .+$/;
const outs: string[] = [];
afterAll(() => outs.forEach((out) => rmSync(out, { recursive: true, force: true })));

function run(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number | null; lines: string[]; out: string }> {
  const out = tempDir('stepscope-gpu-check-');
  outs.push(out);
  return new Promise((resolve, reject) => {
    const child = spawn(SCRIPT, args, { env: { ...process.env, GPU_CHECK_OUT: out, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.resume();
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gpu-check.sh ran past ${timeoutMs} ms: ${stdout}`));
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, lines: stdout.trim().split('\n'), out });
    });
  });
}

const status = (lines: string[]) => Object.fromEntries(lines.map((line) => line.split(/[ :]/)).map(([s, name]) => [name, s]));

/** A Python that cannot import torch (the PATH's, in training images often without it). */
const noTorch = ['python3', '/usr/bin/python3'].find((python) => spawnSync(python, ['-c', 'import sys'], { encoding: 'utf8' }).status === 0 && spawnSync(python, ['-c', 'import torch'], { encoding: 'utf8' }).status !== 0);
const torch = findPython(['torch']);
const FRAMEWORKS = !!process.env.STEPSCOPE_TEST_FRAMEWORKS;

describe('scripts/gpu-check.sh', () => {
  it("asks nvidia-smi the sidecar's own query", () => {
    const script = readFileSync(SCRIPT, 'utf8');
    expect(/^QUERY_FIELDS="([^"]+)"$/m.exec(script)?.[1]).toBe(queryFields('event').join(','));
  });

  it.skipIf(!noTorch)('says what it cannot check as a FAIL line and exits 1, nvidia-smi captured all the same', async () => {
    const { code, lines, out } = await run(['--simulate'], { GPU_CHECK_PYTHON: noTorch! }, 30_000);
    expect(code).toBe(1);
    for (const line of lines) expect(line).toMatch(LINE);
    expect(status(lines)).toMatchObject({ 'nvidia-smi-query': 'PASS', 'torch-cuda': 'FAIL', sidecar: 'SKIP', 'gpu-check': 'FAILED' });
    expect(readFileSync(path.join(out, 'nvidia-smi', 'query-gpu.csv'), 'utf8')).toMatch(/^index, uuid, name,/);
  }, 40_000);

  it.skipIf(!torch.python)('its CUDA event and NVML/GPM checks pass on the simulated layer and the stand-in binding', () => {
    const out = tempDir('stepscope-gpu-check-');
    outs.push(out);
    const run = spawnSync(torch.python!, [path.join(ROOT, 'scripts', 'gpu_check.py'), '--simulate', '--out', out, '--only', 'cuda-events', '--only', 'nvml'], { encoding: 'utf8', timeout: 60_000 });
    expect(run.status, run.stderr).toBe(0);
    const lines = run.stdout.trim().split('\n');
    for (const line of lines) expect(line).toMatch(LINE);
    expect(status(lines)).toEqual({
      'torch-cuda': 'PASS',
      'cuda-event-unrecorded-query': 'PASS',
      'cuda-event-pending': 'PASS',
      'cuda-event-elapsed-before-completion-raises': 'PASS',
      'cuda-event-elapsed': 'PASS',
      'cuda-event-record-cost': 'PASS',
      'nvml-readings': 'PASS',
      'nvml-gpm-sm-active': 'PASS',
      'nvml-gpm-tensor': 'PASS',
    });
    const provenance = JSON.parse(readFileSync(path.join(out, 'provenance.json'), 'utf8'));
    expect(provenance).toMatchObject({ simulated: true, when_utc: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect(JSON.parse(readFileSync(path.join(out, 'readings', 'nvml-gpm.json'), 'utf8')).bf16.at(-1)).toMatchObject({ sm_active: 0.935, tensor_active: 0.031 });
  }, 70_000);

  it.skipIf(!FRAMEWORKS || !torch.python)('--simulate: every check passes end to end, a sidecar\'s verdicts included, in well under its 8 minutes', async () => {
    const started = Date.now();
    const { code, lines, out } = await run(['--simulate'], { GPU_CHECK_PYTHON: torch.python! }, 300_000);
    for (const line of lines) expect(line).toMatch(LINE);
    expect(lines.filter((line) => line.startsWith('FAIL')), lines.join('\n')).toEqual([]);
    expect(code).toBe(0);
    expect(lines.filter((line) => line.startsWith('SKIP')).map((line) => line.split(':')[0])).toEqual(['SKIP nccl-own-timing', 'SKIP nccl-two-ranks']);
    expect(status(lines)).toMatchObject({ 'sidecar-input-bound': 'PASS', 'sidecar-compute-bound': 'PASS', 'nccl-hook-rows': 'PASS', 'zero-code-gpu-h2d-compute-bound': 'PASS' });
    for (const file of ['provenance.json', 'results.json', 'nvidia-smi/q.txt', 'readings/cuda-events.json', 'recordings/zero-code-rows.json', 'recordings/nccl-one-rank.json', 'recordings/sidecar/summary-gpu-check-input.json']) {
      expect(existsSync(path.join(out, file)), file).toBe(true);
    }
    expect(Date.now() - started).toBeLessThan(8 * 60_000);
  }, 310_000);
});
