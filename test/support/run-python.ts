import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { killTree, track } from './children.js';
import { CLI, ROOT } from './sidecar.js';

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
  return runProcess(python, [script, ...args], env, timeoutMs, `${path.basename(python)} ${path.basename(script)}`);
}

/**
 * Runs any command (a launcher such as `torchrun`, `stepscope run`) like runPython: the hook from
 * this checkout on PYTHONPATH, killed with what it started past `timeoutMs`, the last stdout line
 * parsed as JSON.
 */
/** `started`: told of the child as soon as it is spawned (to signal it while it runs). */
export function runProcess(command: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000, what = path.basename(command), started?: (child: ChildProcess) => void): Promise<PythonRun> {
  return new Promise((resolve, reject) => {
    const child = track(
      spawn(command, args, {
        env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python-hook'), PYTHONUNBUFFERED: '1', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      what,
    );
    started?.(child);
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${command} could not be started: ${error.message}`));
    });
    const timer = setTimeout(() => {
      killTree(child);
      reject(new Error(`${what} ran past ${timeoutMs} ms; stderr: ${stderr}`));
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

/**
 * How to call `stepscope run`: `node dist/cli.js run` where the CLI has it, else the same command
 * registered by src/run-command.ts on a bare commander program (what src/cli.ts does).
 */
export function stepscopeRun(): { command: string; args: string[] } {
  const help = spawnSync(process.execPath, [CLI, 'run', '--help'], { encoding: 'utf8', timeout: 30_000 });
  if (help.status === 0 && /zero-code/.test(help.stdout)) return { command: process.execPath, args: [CLI, 'run'] };
  const module = pathToFileURL(path.join(ROOT, 'dist', 'run-command.js')).href;
  const commander = pathToFileURL(createRequire(import.meta.url).resolve('commander')).href;
  const shim = `import { Command } from '${commander}'; import { registerRunCommand } from '${module}'; const p = new Command('stepscope'); registerRunCommand(p); await p.parseAsync(process.argv.slice(1), { from: 'user' });`;
  return { command: process.execPath, args: ['--input-type=module', '-e', shim, 'run'] };
}
