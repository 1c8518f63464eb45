import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { SIDECAR_MALLOC_ENV, SIDECAR_NODE_FLAGS } from '../ingest/node-flags.js';

/** The processes the demo runs: the sidecar (as `stepscope serve`) and the Python ranks. */

export class DemoError extends Error {}

export interface Exited {
  code: number | null;
  signal: NodeJS.Signals | null;
}

function exitOf(child: ChildProcess): Promise<Exited> {
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/** The Python to run the loop with ($STEPSCOPE_PYTHON, else python3), or a one-line reason why there is none. */
export function findPython(): string {
  const python = process.env.STEPSCOPE_PYTHON || 'python3';
  const probe = spawnSync(python, ['-c', 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)'], { stdio: 'ignore', timeout: 30_000 });
  if (probe.error) throw new DemoError(`${python} not found: the demo's training loop needs Python 3.8 or later (install python3, or set STEPSCOPE_PYTHON)`);
  if (probe.status !== 0) throw new DemoError(`${python} is older than Python 3.8, which the demo's training loop needs (set STEPSCOPE_PYTHON to a newer one)`);
  return python;
}

/** How many GPUs `python` can train on (PyTorch with CUDA), for --real; an error if none. */
export function cudaDevices(python: string): number {
  const probe = spawnSync(python, ['-c', 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)'], { encoding: 'utf8', timeout: 120_000 });
  if (probe.status !== 0) throw new DemoError(`--real: ${python} cannot import torch (install PyTorch with CUDA, or run the demo without --real)`);
  const count = Number(probe.stdout.trim());
  if (!(count > 0)) throw new DemoError(`--real: ${python} has PyTorch but no CUDA device`);
  return count;
}

export interface SidecarChild {
  url: string;
  /** Sidecar clock (ms) when its GPU counters started: the simulated scenario counts from here. */
  gpuStartedAt: number;
  exited: Promise<Exited>;
  stop(): void;
}

/** `node cli.js serve ...`, its JSON log kept in `logFile`; resolves once it listens. */
export async function startSidecar(cli: string, args: string[], logFile: string): Promise<SidecarChild> {
  const child = spawn(process.execPath, [...SIDECAR_NODE_FLAGS, cli, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...SIDECAR_MALLOC_ENV, ...process.env } });
  const log = createWriteStream(logFile);
  const exited = exitOf(child);
  let gpuStartedAt: number | null = null;
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
    log.write(chunk);
  });
  const listening = new Promise<string>((resolve, reject) => {
    let buffered = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      log.write(chunk);
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        let entry: { msg?: string; time?: number; url?: string };
        try {
          entry = JSON.parse(line);
        } catch {
          continue;
        }
        if (entry.msg === 'GPU counter source chosen') gpuStartedAt = entry.time ?? Date.now();
        if (entry.msg === 'listening' && entry.url) resolve(entry.url);
      }
    });
    void exited.then(({ code }) => reject(new DemoError(`the sidecar exited (${code}) before listening: ${stderr.trim() || `see ${logFile}`}`)));
  });
  const url = await listening;
  void exited.then(() => log.end());
  return {
    url,
    gpuStartedAt: gpuStartedAt ?? Date.now(),
    exited,
    stop: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    },
  };
}

export interface PythonChild {
  exited: Promise<Exited & { result: unknown; stderr: string }>;
  stop(): void;
}

/** A Python process whose output goes to `logFile`; its last stdout line, if JSON, is its result. */
export function startPython(python: string, args: string[], env: NodeJS.ProcessEnv, logFile: string): PythonChild {
  const child = spawn(python, args, { env: { ...process.env, PYTHONUNBUFFERED: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const log = createWriteStream(logFile);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => ((stdout += chunk), log.write(chunk)));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => ((stderr += chunk), log.write(chunk)));
  const exited = exitOf(child).then((exit) => {
    log.end();
    let result: unknown = null;
    try {
      result = JSON.parse(stdout.trim().split('\n').at(-1) ?? '');
    } catch {
      result = null;
    }
    return { ...exit, result, stderr };
  });
  return {
    exited,
    stop: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    },
  };
}
