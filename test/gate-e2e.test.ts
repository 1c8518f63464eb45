import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ALL_E2E } from './support/scenarios.js';
import { CLI, startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * `stepscope gate` as a CI pipeline runs it: one real sidecar keeping the job's history, a short
 * canary (the real hook in test/fixtures/verdict_loop.py) run again and again, the gate after each.
 * Two equal canaries pass against the history; a canary whose data loading now takes twice its
 * compute fails, naming the data phase. The margins (a 3× slower step; a 15% floor for the equal
 * runs) are far from anything load can do to sleeping loops. STEPSCOPE_E2E=all (.ci/run).
 */

const plain = findPython();
const LOOP = fixture('verdict_loop.py');
const JOB = 'canary';

describe.skipIf(!ALL_E2E || !plain.python)('gate on real canary runs', { timeout: 180_000 }, () => {
  const out = tempDir('stepscope-gate-e2e-');
  let sidecar: RunningSidecar | null = null;
  afterAll(async () => {
    await sidecar?.stop('SIGKILL');
    rmSync(out, { recursive: true, force: true });
  });

  /** One canary run to its end: resolves with its summary file, once the sidecar has written it. */
  async function canary(run: number, args: string[]): Promise<string> {
    const result = await runPython(plain.python!, LOOP, ['--steps', '200', ...args], { STEPSCOPE_URL: sidecar!.ingestUrl, STEPSCOPE_JOB: JOB, RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' }, 60_000);
    expect(result.code, result.stderr).toBe(0);
    const file = path.join(out, run === 1 ? `summary-${JOB}.json` : `summary-${JOB}.${run}.json`);
    await waitFor(() => existsSync(file), 30_000);
    // The history entry is written after the summary: wait for this run's.
    await waitFor(() => existsSync(path.join(out, 'history', JOB)) && readFileSyncCount(path.join(out, 'history', JOB)) >= run, 30_000);
    return file;
  }

  function gate(file: string, ...extra: string[]) {
    const junit = `${file}.junit.xml`;
    const run = spawnSync(process.execPath, [CLI, 'gate', file, '--history', path.join(out, 'history'), '--junit', junit, ...extra], { encoding: 'utf8' });
    return { status: run.status, stdout: run.stdout, stderr: run.stderr, junit: readFileSync(junit, 'utf8') };
  }

  it('passes equal canaries and fails the one whose data loading regressed, with JUnit', async () => {
    sidecar = await startSidecar(['--out', out, '--end-grace', '1', '--hold', '1']);
    const steady = ['--data-ms', '1', '--compute-ms', '20'];
    const first = await canary(1, steady);
    // The first run has no history to be judged against.
    expect(gate(first).status).toBe(2);
    await canary(2, steady);
    const third = await canary(3, steady);
    const equal = gate(third, '--min-change', '15');
    expect(equal.status, equal.stdout + equal.stderr).toBe(0);
    expect(equal.stdout).toMatch(/^pass: canary is within bounds of the median of the last 2 runs/);
    expect(equal.junit).toMatch(/failures="0"/);
    const regressed = gate(await canary(4, ['--data-ms', '40', '--compute-ms', '20']), '--min-change', '15');
    expect(regressed.status, regressed.stdout + regressed.stderr).toBe(1);
    expect(regressed.stdout).toMatch(/^REGRESSION: canary is \d+\.\d% slower/);
    expect(regressed.stdout).toMatch(/phase that grew most: data/);
    expect(regressed.junit).toMatch(/failures="1"/);
  });
});

function readFileSyncCount(dir: string): number {
  return readdirSync(dir).filter((name) => name.endsWith('.json')).length;
}
