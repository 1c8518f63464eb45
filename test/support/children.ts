import type { ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/**
 * Every process the test support starts (sidecars, Python loops) is registered here until it exits,
 * so that nothing outlives a test file, whatever happened in it: test/support/cleanup.ts (a vitest
 * setup file) kills whatever is still registered after each file's own afterAll hooks have run.
 * Vitest isolates each test file's modules, so each file has a registry of its own.
 */

interface Tracked {
  child: ChildProcess;
  what: string;
}

const alive = new Set<Tracked>();
const cleanups = new Set<() => unknown>();

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Registers `child` until it exits; returns it. */
export function track<T extends ChildProcess>(child: T, what = 'child'): T {
  const entry = { child, what };
  alive.add(entry);
  child.once('exit', () => alive.delete(entry));
  // A spawn that failed (no such binary) emits 'error' and no 'exit'.
  child.once('error', () => {
    if (child.pid === undefined || exited(child)) alive.delete(entry);
  });
  return child;
}

/** Registers something else to undo at the end of the file (a stand-in procfs's timer, say), if not undone before. */
export function atFileEnd(cleanup: () => unknown): () => void {
  cleanups.add(cleanup);
  return () => void cleanups.delete(cleanup);
}

/**
 * Whether `pid` runs: neither gone nor a zombie. A process that died before its parent reaped
 * it (the parent exited first) is an orphaned zombie until PID 1 reaps it, and some init processes
 * (this CI machine's) never do; kill(pid, 0) still succeeds on one.
 */
export function runs(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    // No such process, or no /proc: ask the kernel.
    try {
      process.kill(pid, 0);
      return !existsSync('/proc/self/stat');
    } catch {
      return false;
    }
  }
}

/** The pids of `pid`'s descendants (Linux /proc), children before grandchildren; none where /proc is not there. */
export function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  for (const name of entries) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parentOf.set(Number(name), ppid);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  let generation = [pid];
  while (generation.length) {
    const next = [...parentOf].filter(([, ppid]) => generation.includes(ppid)).map(([child]) => child);
    found.push(...next);
    generation = next;
  }
  return found;
}

/**
 * SIGKILLs `child` and every process below it (a sidecar's nvidia-smi, a loop's loader workers):
 * the descendants are listed first, as they are reparented once their parent dies.
 */
export function killTree(child: ChildProcess): void {
  if (child.pid === undefined) return;
  const below = exited(child) ? [] : descendants(child.pid);
  if (!exited(child)) child.kill('SIGKILL');
  for (const pid of below) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** The processes still registered (running), for reports. */
export function running(): Array<{ pid: number | undefined; what: string }> {
  return [...alive].filter(({ child }) => !exited(child)).map(({ child, what }) => ({ pid: child.pid, what }));
}

/**
 * Kills every registered process that is still running (and what it started), waits for them to
 * exit, and runs the registered cleanups. Returns what had to be killed.
 */
export async function killAll(): Promise<Array<{ pid: number | undefined; what: string }>> {
  const left = [...alive].filter(({ child }) => !exited(child));
  const gone = left.map(
    ({ child }) =>
      new Promise<void>((resolve) => {
        if (exited(child)) return resolve();
        child.once('exit', () => resolve());
        // Never wait forever on a process that cannot be killed (stuck in the kernel).
        setTimeout(resolve, 5_000).unref();
      }),
  );
  for (const { child } of left) killTree(child);
  await Promise.all(gone);
  for (const entry of left) alive.delete(entry);
  for (const cleanup of [...cleanups]) {
    cleanups.delete(cleanup);
    try {
      await cleanup();
    } catch {
      // keep cleaning up
    }
  }
  return left.map(({ child, what }) => ({ pid: child.pid, what }));
}
