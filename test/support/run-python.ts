import { spawn } from 'node:child_process';
import path from 'node:path';
import { killTree, track } from './children.js';
import { ROOT } from './sidecar.js';

export interface PythonRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The last stdout line, parsed: the fixtures print their result as JSON there. */
  result: any;
}

export function fixture(name: string): string {
  return path.join(ROOT, 'test', 'fixtures', name);
}

/**
 * Runs a Python script with the hook from this checkout on its path. Past `timeoutMs` it is killed
 * with whatever it started (loader workers) and this rejects; registered with ./children.ts, so that
 * it is killed at the end of the file at the latest.
 */
export function runPython(python: string, script: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<PythonRun> {
  return new Promise((resolve, reject) => {
    const child = track(
      spawn(python, [script, ...args], {
        env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python-hook'), PYTHONUNBUFFERED: '1', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      `${path.basename(python)} ${path.basename(script)}`,
    );
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${python} ${script} could not be started: ${error.message}`));
    });
    const timer = setTimeout(() => {
      killTree(child);
      reject(new Error(`${script} ran past ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      const last = stdout.trim().split('\n').at(-1) ?? '';
      let result: unknown = null;
      try {
        result = JSON.parse(last);
      } catch {
        result = null;
      }
      resolve({ code, stdout, stderr, result });
    });
  });
}
