/**
 * Pure reading of `/proc/<pid>/stat` (proc(5)), for the processes that use the host's CPU: which are
 * busiest between two readings, with their parents, so the job's own process trees can be told
 * from everything else on the node.
 */

export interface PidStat {
  pid: number;
  /** `comm`: the executable's name, at most 15 bytes, as the kernel keeps it. */
  name: string;
  ppid: number;
  /** utime + stime, clock ticks. */
  cpuTicks: number;
  /** starttime, clock ticks after boot: with the pid, tells a reused pid from the old process. */
  startTicks: number;
}

/** One busy process between two readings. `ancestors`: its parent, the parent's parent, … (up to 32). */
export interface TopProcess {
  pid: number;
  name: string;
  cores: number;
  ancestors: number[];
}

/**
 * What the sidecar can see: kernel threads (kthreadd is pid 2) exist only in the node's initial pid
 * namespace, so without them the sidecar is in a pod's (or container's) own namespace and sees only
 * its processes.
 */
export type ProcessVisibility = 'node' | 'pod';

export function visibilityOf(pid2Comm: string | null): ProcessVisibility {
  return pid2Comm?.trim() === 'kthreadd' ? 'node' : 'pod';
}

/**
 * `comm` is in parentheses and may itself hold spaces and parentheses, so the fields after it are
 * counted from the last ')'. Null for anything else (a process that exited mid-read leaves nothing).
 */
export function parsePidStat(text: string): PidStat | null {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 1 || close < open) return null;
  const pid = Number(text.slice(0, open).trim());
  // After comm: state(3) ppid(4) … utime(14) stime(15) … starttime(22), so index = field - 3.
  const rest = text.slice(close + 1).trim().split(/\s+/);
  const field = (n: number) => Number(rest[n - 3]);
  const ppid = field(4);
  const utime = field(14);
  const stime = field(15);
  const start = field(22);
  if (!Number.isInteger(pid) || ![ppid, utime, stime, start].every(Number.isFinite)) return null;
  return { pid, name: text.slice(open + 1, close), ppid, cpuTicks: utime + stime, startTicks: start };
}

export const identity = (stat: Pick<PidStat, 'pid' | 'startTicks'>) => `${stat.pid}@${stat.startTicks}`;

const MAX_DEPTH = 32;

/**
 * The busiest `keep` processes between two readings `seconds` apart (by the kernel's clock), with
 * their ancestors. A process not in the previous reading has no rate yet and is left out.
 */
export function topProcesses(previous: ReadonlyMap<string, PidStat>, current: readonly PidStat[], seconds: number, ticksPerS = 100, keep = 24): TopProcess[] {
  if (seconds <= 0) return [];
  const parents = new Map(current.map((stat) => [stat.pid, stat.ppid]));
  const ancestorsOf = (pid: number): number[] => {
    const out: number[] = [];
    for (let at = parents.get(pid); at !== undefined && at > 0 && out.length < MAX_DEPTH && !out.includes(at); at = parents.get(at)) out.push(at);
    return out;
  };
  return current
    .flatMap((stat) => {
      const before = previous.get(identity(stat));
      if (!before || stat.cpuTicks < before.cpuTicks) return [];
      const cores = (stat.cpuTicks - before.cpuTicks) / ticksPerS / seconds;
      return cores > 0 ? [{ pid: stat.pid, name: stat.name, cores: Math.round(cores * 1000) / 1000, ancestors: [] as number[] }] : [];
    })
    .sort((a, b) => b.cores - a.cores || a.pid - b.pid)
    .slice(0, keep)
    .map((top) => ({ ...top, ancestors: ancestorsOf(top.pid) }));
}

/** The scheduler state of a `/proc/<pid>/stat` line (R, S, D, T, t, Z, …) with its CPU and start ticks; null where it is not one. */
export function parsePidState(text: string): (PidStat & { state: string }) | null {
  const stat = parsePidStat(text);
  if (!stat) return null;
  const state = text.slice(text.lastIndexOf(')') + 1).trim().split(/\s+/)[0] ?? '';
  return /^[A-Za-z]$/.test(state) ? { ...stat, state } : null;
}

/** `/proc/<pid>/wchan`: the kernel function a sleeping task waits in; null where the kernel gives none ("0", empty). */
export function parseWchan(text: string | null): string | null {
  const value = text?.trim() ?? '';
  return value === '' || value === '0' ? null : value.slice(0, 128);
}
