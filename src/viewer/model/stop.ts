import { jobStop, rankList, type RankStop } from '../../model/stall.js';
import type { Cause } from '../../model/verdict.js';
import type { CodeFrame } from '../../protocol/capture.js';
import type { JobState, RankState } from '../../protocol/state.js';

/**
 * A job that stopped stepping, as the viewer shows it at the top: hung, stalled or gone, for how
 * long, the rank the others wait for, the innermost lines of its own code and what the others wait
 * in. One sidecar's job says it (`jobs[].stop`); a job spread over several is put together by the
 * sidecar's own rule (src/model/stall.ts) from every rank's `stall`. Pure.
 */

export interface StopView {
  verdict: 'hung' | 'stalled' | 'gone';
  cause: Cause;
  seconds: number;
  step: number;
  culprits: number[];
  waiting: number[];
  waitsIn: string | null;
  /** The first culprit's own code, innermost first. */
  where: CodeFrame[];
  /** Where the first culprit is, in words (its verdict's rule). */
  text: string;
}

function fromState(job: JobState, at: number): StopView | null {
  const stop = job.stop;
  if (!stop) return null;
  return {
    verdict: stop.verdict,
    cause: stop.cause,
    seconds: job.ended ? stop.seconds : Math.max(0, (at - Date.parse(stop.since)) / 1000),
    step: stop.step,
    culprits: stop.culprits,
    waiting: stop.waiting,
    waitsIn: stop.waits_in,
    where: stop.where,
    text: stop.text,
  };
}

const rankStop = (rank: RankState): RankStop | null => {
  const stall = rank.stall;
  if (!stall) return null;
  const since = stall.no_step_s === null ? null : -stall.no_step_s * 1000;
  return {
    rank: rank.rank,
    state: stall.state,
    cause: rank.verdict?.cause ?? null,
    since,
    wentAt: null,
    lastStep: stall.last_step,
    collectives: stall.collectives,
    inCollective: stall.in_collective,
    progressing: stall.progressing,
    capturePending: stall.capture_pending,
  };
};

/** The job's stop over the ranks of every sidecar it reports to; null while it steps. */
export function stopView(jobs: readonly JobState[], ranks: readonly RankState[], at: number): StopView | null {
  if (jobs.length === 1) return fromState(jobs[0]!, at);
  if (!jobs.some((job) => job.stop)) return null;
  const stops = ranks.map(rankStop).filter((r): r is RankStop => r !== null);
  const stop = jobStop(stops);
  if (stop === null || stop === 'pending') {
    // A sidecar that sees the stop says it; the others are still making up their minds.
    const told = jobs.find((job) => job.stop);
    return told ? fromState(told, at) : null;
  }
  const lead = ranks.find((r) => r.rank === stop.culprits[0]);
  const step = lead?.stall?.last_step ?? Math.max(...stops.map((s) => s.lastStep));
  return {
    verdict: stop.verdict,
    cause: stop.cause,
    // Ranks' times are "seconds ago" here: the stop began the longest ago among those behind.
    seconds: Math.max(0, -stop.since / 1000),
    step,
    culprits: stop.culprits,
    waiting: stop.waiting,
    waitsIn: stop.waitsIn,
    where: lead?.stall?.where ?? [],
    text: lead?.verdict?.evidence.rule ?? `rank${stop.culprits.length === 1 ? '' : 's'} ${rankList(stop.culprits)}`,
  };
}
