import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runEnvironment } from '../src/run-command.js';
import { track } from './support/children.js';
import { findPython } from './support/python.js';
import { runProcess, stepscopeRun } from './support/run-python.js';
import { ROOT } from './support/sidecar.js';

/**
 * `stepscope run`: the environment it gives the command, the exit status it passes on, and the
 * signals it forwards. (The zero-code path it switches on is tested on real PyTorch in
 * zero-code-e2e.test.ts.)
 */

const HOOK = path.join(ROOT, 'python-hook');
const python = findPython();

describe('stepscope run: the environment', () => {
  it('switches the zero-code path on, puts the start-up folder and the hook first on PYTHONPATH, once each', () => {
    const env = runEnvironment({ env: { PYTHONPATH: ['/opt/lib', HOOK].join(path.delimiter), STEPSCOPE_HOOK_PATH: HOOK, KEEP: 'me' }, url: 'ws://10.1.2.3:9477/v1/ingest', job: 'j' });
    expect(env.STEPSCOPE_AUTO).toBe('1');
    expect(env.PYTHONPATH!.split(path.delimiter)).toEqual([path.join(HOOK, 'stepscope', '_boot'), HOOK, '/opt/lib']);
    expect(env).toMatchObject({ STEPSCOPE_URL: 'ws://10.1.2.3:9477/v1/ingest', STEPSCOPE_JOB: 'j', KEEP: 'me' });
    expect(runEnvironment({ env: {} }).STEPSCOPE_URL).toBeUndefined();
  });
});

describe.skipIf(!python.python)(`stepscope run: the command${python.python ? '' : ` (skipped: ${python.why})`}`, () => {
  const run = stepscopeRun();

  it("runs the command with its own arguments and options, and exits with its status", async () => {
    const code = 'import os, sys; print(os.environ["STEPSCOPE_AUTO"], os.environ["STEPSCOPE_JOB"], sys.argv[1:]); sys.exit(7)';
    const result = await runProcess(run.command, [...run.args, '--job', 'a-job', python.python!, '-c', code, '--job', 'not-ours', '--url'], { PYTHONPATH: '' }, 30_000, 'stepscope run');
    expect(result.code, result.stderr).toBe(7);
    expect(result.stdout.trim()).toBe("1 a-job ['--job', 'not-ours', '--url']");
  });

  it('says when the command cannot be run (127) and when there is none (2)', async () => {
    const missing = await runProcess(run.command, [...run.args, '--', 'no-such-command-here'], {}, 30_000, 'stepscope run');
    expect(missing.code).toBe(127);
    expect(missing.stderr).toMatch(/stepscope run: cannot run no-such-command-here/);
  });

  it('forwards SIGTERM to the command and exits as it did', async () => {
    const code = [
      'import signal, sys, time',
      'signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(42)))',
      'print("ready", flush=True)',
      'time.sleep(30)',
    ].join('\n');
    const child = track(spawn(run.command, [...run.args, '--', python.python!, '-c', code], { stdio: ['ignore', 'pipe', 'pipe'] }), 'stepscope run (signals)');
    let stdout = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "ready": ${stdout}`)), 20_000);
      child.stdout!.on('data', () => {
        if (stdout.includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    child.kill('SIGTERM');
    const exitCode = await new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    expect(stdout).toContain('got SIGTERM');
    expect(exitCode).toBe(42);
  });
});
