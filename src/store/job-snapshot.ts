import { round } from '../model/round.js';
import type { Env } from '../protocol/messages.js';
import type { Breakdown, JobState, RankState } from '../protocol/state.js';
import type { Job, Rank } from './job-records.js';
import { percentile, sortedAscending } from './ring.js';
import type { StepSums } from './step-buckets.js';

/** The JSON views of jobs and ranks that /v1/state, the summary and the viewer read. */

/**
 * A rank as the store describes it: the state's RankState without what the analysis adds (window,
 * verdict, straggler, stall, MFU), its time in ms since the epoch (only outputs/state.ts formats it).
 */
export type RankSnapshot = Omit<RankState, 'last_step_at' | 'env' | 'window' | 'verdict' | 'straggler' | 'stall' | 'mfu'> & {
  /** When its last step ended, ms since the epoch; null before the first. */
  last_step_at: number | null;
  env: Env;
};

/** A job as the store describes it: the state's JobState without what the analysis adds, its start in ms since the epoch. */
export type JobSnapshot = Omit<JobState, 'started_at' | 'ranks' | 'verdict' | 'straggler' | 'timeline' | 'baseline' | 'waste' | 'captures' | 'stop'> & {
  /** Its start in whole ms since the epoch (the state's ISO time, which the summary and the timeline are measured from). */
  started_at: number;
  ranks: RankSnapshot[];
};

const seconds = (ns: number) => ns / 1e9;
const ms = (ns: number) => Math.round(ns / 1e3) / 1e3;
const finiteOrNull = (value: number) => (Number.isFinite(value) ? value : null);

/** The shares to 4 digits, as the state and the summaries give them. */
export const roundBreakdown = (b: Breakdown): Breakdown => ({ data: round(b.data, 4), h2d: round(b.h2d, 4), compute: round(b.compute, 4), other: round(b.other, 4) });

export function breakdownOf(totals: StepSums): Breakdown {
  const total = totals.dataNs + totals.h2dNs + totals.computeNs + totals.otherNs;
  const share = (ns: number) => (total > 0 ? ns / total : 0);
  return {
    data: share(totals.dataNs),
    h2d: share(totals.h2dNs),
    compute: share(totals.computeNs),
    other: share(totals.otherNs),
  };
}

function rankSnapshot(rank: Rank): RankSnapshot {
  const recent = rank.recent.toArray();
  const stepMs = recent.map((step) => ms(step.record.durNs));
  const sorted = sortedAscending(stepMs);
  const totals = rank.totals;
  return {
    rank: rank.rank,
    local_rank: rank.localRank,
    host: rank.latest.host,
    pid: rank.latest.pid,
    sessions: rank.forgotten.sessions + rank.sessions.length,
    connected: rank.sessions.some((session) => session.connections > 0),
    ended: rank.latest.ended,
    steps: rank.steps,
    last_step: rank.lastStep,
    last_step_at: rank.lastStepAt,
    dropped: rank.sessions.reduce((total, session) => total + session.dropped, rank.forgotten.dropped),
    duplicates: rank.sessions.reduce((total, session) => total + session.duplicates, rank.forgotten.duplicates),
    samples: totals.samples,
    clock_offset_ms: Math.round(rank.latest.clockOffsetMs * 1000) / 1000,
    phase_s: {
      data: seconds(totals.dataNs),
      h2d: seconds(totals.h2dNs),
      compute: seconds(totals.computeNs),
      other: seconds(totals.otherNs),
    },
    breakdown: breakdownOf(totals),
    gpu_phase_s: {
      timed_steps: totals.gpuTimedSteps,
      h2d: seconds(totals.gpuH2dNs),
      compute: seconds(totals.gpuComputeNs),
      idle_steps: totals.gpuIdleSteps,
      idle: seconds(totals.gpuIdleNs),
    },
    step_ms: {
      last: stepMs.at(-1) ?? null,
      mean: finiteOrNull(stepMs.reduce((a, b) => a + b, 0) / stepMs.length),
      p50: finiteOrNull(percentile(sorted, 50)),
      p90: finiteOrNull(percentile(sorted, 90)),
    },
    recent_step_ms: stepMs.slice(-64),
    env: { ...rank.env },
  };
}

/** The start of the job's first step, wherever the sidecar joined it; its first hello before any step. */
export function jobStart(job: Job): number {
  return job.firstStepAt ?? job.helloAt;
}

/**
 * The end of its last step once ended (not the moment the sidecar noticed), else `at`. A run that had
 * stopped stepping when it ended (`throughSilence`: it hung, or lost a rank) ends when it was last
 * heard from: the stop is part of its time.
 */
export function jobEnd(job: Job, at: number, throughSilence = false): number {
  if (job.endedAt === null) return at;
  const lastStepEnd = Math.max(...[...job.ranks.values()].map((rank) => rank.lastStepEndAt ?? -Infinity));
  if (throughSilence && job.lastHeardAt !== null) return Math.min(job.endedAt, Math.max(job.lastHeardAt, Number.isFinite(lastStepEnd) ? lastStepEnd : -Infinity));
  return Number.isFinite(lastStepEnd) ? lastStepEnd : job.endedAt;
}

export function describeJob(job: Job, at: number, throughSilence = false): JobSnapshot {
  const ranks = [...job.ranks.values()].sort((a, b) => a.rank - b.rank).map((rank) => rankSnapshot(rank));
  const sum = (pick: (r: RankSnapshot) => number) => ranks.reduce((total, r) => total + pick(r), 0);
  const startedAt = jobStart(job);
  return {
    job: job.id,
    run: job.run,
    world_size: job.worldSize,
    started_at: Math.floor(startedAt),
    duration_s: Math.max(0, (jobEnd(job, at, throughSilence) - startedAt) / 1000),
    connected: job.connections > 0,
    ended: job.endedAt !== null,
    end_reason: job.endReason,
    steps: sum((r) => r.steps),
    dropped: sum((r) => r.dropped),
    duplicates: sum((r) => r.duplicates),
    ranks,
  };
}
