import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { killTree, track } from './children.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CLI = path.join(ROOT, 'dist', 'cli.js');

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export interface RunningSidecar {
  process: ChildProcess;
  port: number;
  http: string;
  ingestUrl: string;
  logs: LogLine[];
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  state(): Promise<any>;
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
}

export function tempDir(prefix = 'stepscope-test-'): string {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

/**
 * Starts the real sidecar (`node dist/cli.js serve`) on a free port and waits until it listens
 * (`listenTimeoutMs`). If it does not (it exits first, the wait times out, or it cannot be spawned),
 * the sidecar and whatever it started are killed before this rejects: a failed start leaves nothing
 * running. Registered with ./children.ts, so that it is killed at the end of the file at the latest.
 */
export async function startSidecar(args: string[] = [], env: NodeJS.ProcessEnv = {}, { listenTimeoutMs = MIN_WAIT_MS }: { listenTimeoutMs?: number } = {}): Promise<RunningSidecar> {
  const child = track(
    spawn(process.execPath, [CLI, 'serve', '--port', '0', ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    `sidecar ${args.join(' ')}`,
  );
  const logs: LogLine[] = [];
  const stderr: string[] = [];
  const listeners = new Set<() => void>();
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    for (const line of lines) {
      if (!line.trim()) continue;
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        logs.push({ level: 0, msg: line });
      }
    }
    for (const listener of listeners) listener();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => stderr.push(chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  // A spawn that fails emits 'error' (and no 'exit'); unheard, it would take the test worker down.
  const spawnFailed = new Promise<never>((_resolve, reject) => child.once('error', (error) => reject(new Error(`sidecar could not be started: ${error.message}`))));
  spawnFailed.catch(() => undefined);

  const waitForLog = (predicate: (line: LogLine) => boolean, asked = MIN_WAIT_MS): Promise<LogLine> =>
    new Promise((resolve, reject) => {
      const timeoutMs = Math.max(asked, MIN_WAIT_MS);
      const check = () => {
        const found = logs.find(predicate);
        if (found) {
          listeners.delete(check);
          clearTimeout(timer);
          resolve(found);
        }
      };
      const timer = setTimeout(() => {
        listeners.delete(check);
        reject(new Error(`log line not seen within ${timeoutMs} ms; stderr: ${stderr.join('')}`));
      }, timeoutMs);
      listeners.add(check);
      check();
    });

  let listening: LogLine;
  try {
    listening = await Promise.race([
      waitForLog((line) => line.msg === 'listening', listenTimeoutMs),
      exited.then(({ code, signal }) => {
        throw new Error(`sidecar exited with ${code ?? signal} before listening: ${stderr.join('')}`);
      }),
      spawnFailed,
    ]);
  } catch (error) {
    // Exited early (its children may not have), never listened, or the wait timed out: kill it all.
    killTree(child);
    if (child.pid !== undefined) await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    throw error;
  }
  const port = listening.port as number;
  const http = `http://127.0.0.1:${port}`;
  return {
    process: child,
    port,
    http,
    ingestUrl: `ws://127.0.0.1:${port}/v1/ingest`,
    logs,
    stderr,
    exited,
    waitForLog,
    // Bounded: a sidecar that stops while a test polls it must not leave the test waiting for ever.
    state: async () => (await fetch(`${http}/v1/state`, { signal: AbortSignal.timeout(10_000) })).json(),
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/**
 * The least time any wait on a wall-clock condition is given, whatever its caller asks: on a loaded
 * machine (two busy loops on two cores) a sidecar, a hook or a terminal can take tens of seconds for
 * what takes one unloaded. A condition met returns at once: only a test that fails waits this long.
 */
export const MIN_WAIT_MS = 45_000;

/** `probe`'s first truthy value, asked every `intervalMs`; rejects after `timeoutMs` (at least MIN_WAIT_MS). */
export async function waitFor<T>(probe: () => Promise<T | undefined | null | false> | T | undefined | null | false, asked = MIN_WAIT_MS, intervalMs = 50): Promise<T> {
  const timeoutMs = Math.max(asked, MIN_WAIT_MS);
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
