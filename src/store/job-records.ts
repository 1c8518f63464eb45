import type { ProcessAt } from '../analysis/window.js';
import type { Env, StepRecord } from '../protocol/messages.js';
import type { LogHistogram } from './histogram.js';
import type { Ring } from './ring.js';
import type { StepBuckets, StepSums } from './step-buckets.js';

/** The shapes the job store keeps: one job, its ranks, and each process (session) of a rank. */

export type EndReason = 'all-ranks-ended' | 'disconnected' | 'shutdown';

export interface Session {
  id: string;
  job: Job;
  rank: Rank;
  pid: number;
  host: string;
  maxSeq: number;
  dropped: number;
  duplicates: number;
  connections: number;
  ended: boolean;
  /** Sidecar clock minus hook wall clock, measured when hello arrived (includes transit). */
  clockOffsetMs: number;
  /** Sidecar time and hook monotonic time at the latest hello: maps hook times onto the sidecar's clock. */
  helloAt: number;
  monoAtHello: number;
}

/** A step record placed on the sidecar's clock. */
export interface TimedStep {
  record: StepRecord;
  endAt: number;
}

export interface Rank {
  rank: number;
  localRank: number;
  latest: Session;
  /** The newest processes of this rank (a restarted process is a new session), oldest first. */
  sessions: Session[];
  /** What the sessions forgotten to keep `sessions` bounded had counted. */
  forgotten: { sessions: number; dropped: number; duplicates: number };
  env: Env;
  steps: number;
  lastStep: number;
  lastStepAt: number | null;
  /** Sidecar-clock end of the newest step. */
  lastStepEndAt: number | null;
  totals: StepSums;
  recent: Ring<TimedStep>;
  buckets: StepBuckets;
  histogram: LogHistogram;
  process: Ring<ProcessAt>;
}

export interface Job {
  id: string;
  worldSize: number;
  startedAt: number;
  ranks: Map<number, Rank>;
  connections: number;
  disconnectedSince: number | null;
  endedAt: number | null;
  endReason: EndReason | null;
}


/** Hook monotonic ns -> sidecar clock ms, through the latest hello's pair of readings. */
export function toSidecarMs(session: Session, monoNs: number): number {
  return session.helloAt + (monoNs - session.monoAtHello) / 1e6;
}
