import type { Capture, ProcReading } from '../protocol/capture.js';
import type { MemorySample, ProcessSample } from '../protocol/counters.js';
import type { Env, StepRecord } from '../protocol/messages.js';
import type { DurationCounts } from './duration-counts.js';
import type { LogHistogram } from './histogram.js';
import type { Ring } from './ring.js';
import type { StepBuckets, StepSums } from './step-buckets.js';

/** A process sample from a rank's hook, placed on the sidecar's clock. */
export type ProcessAt = ProcessSample & { at: number };
/** An allocator sample from a rank's hook, placed on the sidecar's clock. */
export type MemoryAt = MemorySample & { at: number };

/** The shapes the job store keeps: one job, its ranks, and each process (session) of a rank. */

export const END_REASONS = ['all-ranks-ended', 'disconnected', 'shutdown'] as const;
export type EndReason = (typeof END_REASONS)[number];

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
  /** What a hello must present to resume this session (null: journaled before secrets existed). */
  secret: string | null;
  /** The highest seq the hook said was acknowledged when this sidecar first saw the session. */
  seqBase: number;
  /** Records refused for implausible times, counted (they are acknowledged, never applied). */
  refused: number;
  /**
   * Seqs passed over between the records held: what of the hook's `dropped` these frames used up.
   * A frame's `dropped` can count records dropped before its later frames' gaps reach the sidecar.
   */
  skipped: number;
  /** When a frame last came from it (not counter samples: a journal near its cap gives those up). */
  heardAt: number | null;
  /** The hook's promise of a frame at least this often (its hello); null: an older hook, no heartbeats. */
  heartbeatMs: number | null;
  /** Whether the hook answers `capture` requests. */
  captures: boolean;
  /** Its process's start in clock ticks after boot (hello.proc_start), to tell it in /proc; null if not given. */
  procStart: number | null;
  /** When its last connection went away while nothing said `end` (cleared when it connects). */
  disconnectedAt: number | null;
  /** How: its connection closed, the sidecar closed it as silent, or the sidecar itself restarted. */
  disconnectReason: SessionDisconnect | null;
}

export const SESSION_DISCONNECTS = ['closed', 'silent', 'restart'] as const;
export type SessionDisconnect = (typeof SESSION_DISCONNECTS)[number];

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
  /** Step durations in the Prometheus histogram's buckets, for /metrics. */
  durations: DurationCounts;
  process: Ring<ProcessAt>;
  /** Allocator samples (about 1 a second): the last 10 minutes give the growth trend. */
  memory: Ring<MemoryAt>;
  /** Where it was when the sidecar last asked (it had stalled); null before. */
  capture: Capture | null;
  /** Its process as the sidecar last read it in /proc; null before. */
  proc: (ProcReading & { at: number }) | null;
}

export interface Job {
  id: string;
  /** 1 for the first run of this job name, then one more for each run after one that ended. */
  run: number;
  worldSize: number;
  /** When the first hello came. */
  helloAt: number;
  /** Sidecar-clock start of the earliest step received: the job's real start, whenever the sidecar started. */
  firstStepAt: number | null;
  summarized: boolean;
  ranks: Map<number, Rank>;
  connections: number;
  disconnectedSince: number | null;
  endedAt: number | null;
  endReason: EndReason | null;
  /** When any of its ranks was last heard from (a frame, or a connection closing); null before. */
  lastHeardAt: number | null;
}


/** Hook monotonic ns -> sidecar clock ms, through the latest hello's pair of readings. */
export function toSidecarMs(session: Session, monoNs: number): number {
  return session.helloAt + (monoNs - session.monoAtHello) / 1e6;
}
