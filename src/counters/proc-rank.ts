import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { ProcReading } from '../protocol/capture.js';
import { parsePidState, parseWchan } from './proc-pid.js';

/**
 * A rank's process as the sidecar's /proc shows it, for a rank whose hook has gone silent: its
 * scheduler state and what the kernel waits in. Only where the process is visible: the same node,
 * and a pid namespace the sidecar shares (a pod with shareProcessNamespace, or hostPID); the pid is
 * checked against the start time its hook gave, so another process that has the same number in the
 * sidecar's own namespace is never taken for it. Says plainly why where it cannot.
 */

const TICKS_PER_S = 100;

export interface RankProcess {
  pid: number;
  /** The hook's host name, and its process's start in ticks after boot (null: an older hook). */
  host: string;
  procStart: number | null;
}

const hidden = (why: string): ProcReading => ({ visible: false, state: null, wchan: null, cpu_s: null, why });

export async function readRankProcess(rank: RankProcess, options: { procRoot: string; hostname: string }): Promise<ProcReading> {
  if (rank.host !== options.hostname) return hidden(`it runs on ${rank.host}, the sidecar on ${options.hostname}: only the sidecar of its own node can read its /proc`);
  if (rank.procStart === null) return hidden('its hook gave no process start time to check the pid against (an older hook)');
  const dir = path.join(options.procRoot, String(rank.pid));
  let stat: string;
  try {
    stat = await readFile(path.join(dir, 'stat'), 'utf8');
  } catch {
    return hidden(`no process ${rank.pid} in the sidecar's pid namespace: the pod does not share its process namespace (shareProcessNamespace: true), or the process has exited`);
  }
  const parsed = parsePidState(stat);
  if (!parsed) return hidden(`/proc/${rank.pid}/stat could not be read`);
  if (parsed.startTicks !== rank.procStart) return hidden(`pid ${rank.pid} here is another process (started at tick ${parsed.startTicks}, the rank's at ${rank.procStart}): the pod does not share its process namespace`);
  const wchan = await readFile(path.join(dir, 'wchan'), 'utf8').catch(() => null);
  return { visible: true, state: parsed.state, wchan: parseWchan(wchan), cpu_s: Math.round((parsed.cpuTicks / TICKS_PER_S) * 100) / 100, why: null };
}
