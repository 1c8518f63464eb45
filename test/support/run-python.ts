import { spawn } from 'node:child_process';
import path from 'node:path';
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

/** Runs a Python script with the hook from this checkout on its path. */
export function runPython(python: string, script: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<PythonRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [script, ...args], {
      env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python-hook'), PYTHONUNBUFFERED: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
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
