import type { CountersState, JobState, RankState, SidecarState } from '../../protocol/state.js';
import type { HistoryState } from './history.js';

/**
 * Jobs that ended, as they were when they ended. Once a run is over the sidecar stops judging it
 * (its verdicts go null, its windows empty) while the GPUs it ran on go on: shown as sent, an ended
 * job would lose its verdict and keep changing. The viewer keeps what it last saw of the run live,
 * with the figures that only grew since (steps, end reason). Pure.
 */

export interface FrozenJob {
  run: number;
  job: JobState;
  counters: CountersState;
  history: HistoryState | null;
  /** The run's end (its last step), ms: what the view's clock stops at. */
  at: number;
}

/** Ended jobs kept frozen per sidecar; older ones go. */
const KEPT = 16;

export const frozenKey = (job: string) => job;

function frozenRank(live: RankState | undefined, final: RankState): RankState {
  if (!live) return final;
  return { ...live, verdict: live.verdict ? { ...live.verdict, pending: null } : null, connected: final.connected, ended: final.ended, steps: final.steps, last_step: final.last_step, last_step_at: final.last_step_at, dropped: final.dropped, duplicates: final.duplicates, samples: final.samples };
}

function freezeJob(final: JobState, live: JobState | undefined, liveCounters: CountersState | undefined, counters: CountersState, history: HistoryState | null): FrozenJob {
  const job: JobState = live
    ? {
        ...final,
        // A verdict that was about to take over never did: the run ended first.
        verdict: live.verdict ? { ...live.verdict, pending: null } : null,
        straggler: live.straggler,
        ranks: final.ranks.map((r) => frozenRank(live.ranks.find((l) => l.rank === r.rank), r)),
      }
    : final;
  return { run: final.run, job, counters: liveCounters ?? counters, history, at: Date.parse(final.started_at) + final.duration_s * 1000 };
}

/**
 * The frozen jobs after a new state: a job seen ended for the first time is frozen from the state
 * before (where it still ran); a job running again (a new run) is thawed.
 */
export function freezeEnded(
  held: ReadonlyMap<string, FrozenJob>,
  before: SidecarState | null,
  after: SidecarState,
  history: HistoryState | null,
): ReadonlyMap<string, FrozenJob> {
  const next = new Map<string, FrozenJob>();
  for (const job of after.jobs) {
    if (!job.ended) continue;
    const key = frozenKey(job.job);
    const kept = held.get(key);
    if (kept && kept.run === job.run) {
      next.set(key, kept);
      continue;
    }
    const live = before?.jobs.find((j) => j.job === job.job && j.run === job.run && !j.ended);
    next.set(key, freezeJob(job, live, live ? before!.counters : undefined, after.counters, history));
  }
  return next.size > KEPT ? new Map([...next].sort(([, a], [, b]) => b.at - a.at).slice(0, KEPT)) : next;
}
