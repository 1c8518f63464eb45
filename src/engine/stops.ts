import type { StopEpisode } from '../analysis/job-analysis.js';
import type { RankStall } from '../analysis/stall.js';
import type { JobStopState, RankStallState } from '../protocol/stall-state.js';
import type { SnapshotStop } from './snapshot.js';

/** The state's views of a rank's stall and a job's stop (src/protocol/stall-state.ts), from the analysis. */

const s1 = (ms: number | null) => (ms === null ? null : Math.round(ms / 100) / 10);

export function rankStallState(stall: RankStall | null, proc: RankStallState['proc']): RankStallState | null {
  if (!stall) return null;
  const stopped = stall.stop.state === 'stalled' || stall.stop.state === 'gone';
  return {
    state: stall.stop.state,
    no_step_s: s1(stall.quietMs),
    stall_after_s: s1(stall.thresholdMs),
    heard_s_ago: s1(stall.heardAgoMs),
    unresponsive: stall.unresponsive,
    last_step: stall.stop.lastStep,
    collectives: stall.stop.collectives,
    in_collective: stall.stop.inCollective,
    progressing: stall.stop.progressing,
    capture_pending: stall.stop.capturePending,
    where: stall.where,
    capture: stall.capture,
    proc: stopped ? proc : null,
  };
}

/** The job's stop while it holds (`current`), else null. */
export function jobStopState(episode: StopEpisode | undefined, current: boolean, at: number): SnapshotStop | null {
  if (!episode || !current) return null;
  return {
    verdict: episode.verdict,
    cause: episode.cause as JobStopState['cause'],
    since: episode.since,
    seconds: Math.round((Math.max(episode.until, at) - episode.since) / 100) / 10,
    step: episode.step,
    culprits: episode.culprits,
    waiting: episode.waiting,
    waits_in: episode.waits_in,
    text: episode.text,
    where: episode.where,
    ...(episode.dumps ? { dumps: episode.dumps } : {}),
  };
}
