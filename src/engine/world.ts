import type { HostSample } from '../counters/host.js';
import { CounterStore } from '../counters/counter-store.js';
import type { AdmissionLimits } from '../store/admission.js';
import { RankHistory } from '../store/rank-history.js';
import { SessionTable } from '../store/session-table.js';
import { recordsOf, type JournalEntry } from './entries.js';

/** The data the engine holds: jobs and their steps, and the counters to match them with. */
export interface World {
  /** The jobs, their ranks and sessions: who is bound to what, and how far each session's seqs go. */
  jobs: SessionTable;
  /** Each rank's steps and counter samples. */
  history: RankHistory;
  counters: CounterStore<HostSample>;
  /** Whether GPU samples forwarded by hooks count (only when they are the chosen GPU source). */
  hookGpu: boolean;
  /**
   * Per job, the pids its ranks' processes said they had: what is the job's own when the host's and
   * the GPUs' processes are listed (in the hooks' pid namespace, which may not be the sidecar's).
   */
  pids: Map<string, Set<number>>;
}

/** A world around a session table (new, or loaded from a checkpoint), its ranks' history read through it. */
export const worldOf = (jobs: SessionTable, counters: CounterStore<HostSample>, hookGpu: boolean): World => ({ jobs, history: new RankHistory(jobs), counters, hookGpu, pids: new Map() });

/** An empty world that keeps no more jobs and ranks than `limits` (none: no bound). */
export const emptyWorld = (limits: AdmissionLimits | null = null): World => worldOf(new SessionTable({ limits }), new CounterStore<HostSample>(), false);

/** Bounded like the sessions a job keeps: a job restarted a thousand times does not grow this for ever. */
const PIDS_KEPT = 4096;

export function addPid(pids: Map<string, Set<number>>, job: string, pid: number): void {
  let held = pids.get(job);
  if (!held) pids.set(job, (held = new Set()));
  held.add(pid);
  if (held.size > PIDS_KEPT) held.delete(held.values().next().value!);
}

/** Applies one data entry to the world; the engine handles the others. Throws on an unknown session. */
export function applyData(world: World, entry: JournalEntry): void {
  const { jobs, history, counters } = world;
  switch (entry.t) {
    case 'hello':
      jobs.hello(entry.hello, entry.at, entry.secret ?? null);
      // A job the store forgot to make room for this one takes its pids with it.
      for (const job of world.pids.keys()) if (!jobs.hasJob(job)) world.pids.delete(job);
      addPid(world.pids, entry.hello.job, entry.hello.pid);
      break;
    case 'connect':
      jobs.connected(entry.session);
      break;
    case 'disconnect':
      jobs.disconnected(entry.session, entry.at, entry.reason ?? null);
      break;
    case 'env':
      jobs.env(entry.session, entry.env, entry.at);
      break;
    case 'beat':
      jobs.beat(entry.session, entry.at);
      break;
    case 'stack':
      jobs.stack(entry.session, entry.capture, entry.at);
      break;
    case 'proc':
      jobs.proc(entry.session, entry.reading, entry.at);
      break;
    case 'steps':
      // A journal row passes the checks a frame's row passed when it was taken (a forged or damaged one is skipped).
      history.steps(entry.session, recordsOf(entry), entry.dropped, entry.at, entry.duplicates ?? 0, entry.refused ?? null);
      break;
    case 'end':
      jobs.end(entry.session, entry.at);
      break;
    case 'counters': {
      const gpu = history.counters(entry.session, entry.batch, entry.at);
      // Not the GPU source: the hooks' NVML readings still fill the throttle signals the source lacks.
      if (world.hookGpu) counters.addGpuSamples(gpu);
      else counters.addFillSamples(gpu, 'hook');
      break;
    }
    case 'gpu':
      if (entry.fill) counters.addFillSamples(entry.samples, entry.fill);
      else counters.addGpuSamples(entry.samples);
      break;
    case 'host':
      counters.addHostSample(entry.sample);
      break;
    case 'apps':
      counters.addApps({ at: entry.at, apps: entry.apps });
      break;
    case 'summarized':
      jobs.summarized(entry.job, entry.run);
      break;
    default:
      break;
  }
}
