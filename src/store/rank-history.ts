import type { GpuSample } from '../model/gpu.js';
import { nvmlToGpuSample, type CounterBatch } from '../protocol/counters.js';
import type { Capture, ProcReading } from '../protocol/capture.js';
import type { Env, Hello, StepRecord } from '../protocol/messages.js';
import { plausibleFor, toSidecarMs } from './admission.js';
import { addDuration, emptyDurations, type DurationCounts } from './duration-counts.js';
import { LogHistogram } from './histogram.js';
import type { Job, MemoryAt, ProcessAt, Rank, Session, TimedStep } from './job-records.js';
import type { JobsCheckpoint } from './jobs-checkpoint.js';
import { Ring } from './ring.js';
import { addStep, emptySums, StepBuckets, type StepSums } from './step-buckets.js';

/** Allocator samples kept per rank: 10 minutes at the hook's 1 a second. */
const MEMORY_SAMPLES = 600;
/** Process samples kept per rank. */
const PROCESS_SAMPLES = 120;

/** Whether a rank's process is there and heard from: what tells a stalled rank from a gone one (its latest session's fields, and the rank's). */
export type RankLiveness = Pick<Session, 'pid' | 'host' | 'heardAt' | 'heartbeatMs' | 'captures' | 'procStart' | 'disconnectedAt' | 'disconnectReason'> & {
  connected: boolean;
  /** Its latest process said `end`. */
  ended: boolean;
  /** The last step's number (-1 before the first). */
  lastStep: number;
  capture: Capture | null;
  proc: (ProcReading & { at: number }) | null;
};

/** Read-only access to one rank's recent history, for windows and verdicts. */
export interface RankView {
  job: string;
  rank: number;
  localRank: number;
  env: Env;
  buckets: StepBuckets;
  histogram: LogHistogram;
  totals: StepSums;
  durations: DurationCounts;
  steps(): number;
  lastStepEndAt(): number | null;
  recent(): TimedStep[];
  process(): ProcessAt[];
  memory(): MemoryAt[];
  liveness(): RankLiveness;
}

export interface StepsResult {
  accepted: readonly StepRecord[];
  duplicates: number;
  ack: number;
}

/** A frame's rows as the session table took them: its session, and the rows the rank keeps. */
export interface TakenRows {
  session: Session;
  kept: readonly StepRecord[];
  duplicates: number;
}

/** What the history reads of the session table (src/store/session-table.ts): its sessions and jobs, and its count of a frame's seqs. */
export interface HeldSessions {
  /** Throws UnknownSessionError for a session not held. */
  session(sessionId: string): Session;
  /** Every job held, or one. */
  jobsOf(jobId?: string): Iterable<Job>;
  takeRows(sessionId: string, records: readonly StepRecord[], dropped: number, at: number, duplicatesSeen: number, refused: { count: number; through: number } | null): TakenRows;
}

/** A new rank's empty history beside the fields the session table sets. */
export function newRank(hello: Hello, recentSteps: number): Omit<Rank, 'latest'> {
  return {
    rank: hello.rank,
    localRank: hello.local_rank,
    sessions: [],
    forgotten: { sessions: 0, dropped: 0, duplicates: 0 },
    env: {},
    steps: 0,
    lastStep: -1,
    lastStepAt: null,
    lastStepEndAt: null,
    totals: emptySums(),
    recent: new Ring(recentSteps),
    buckets: new StepBuckets(),
    histogram: new LogHistogram(),
    durations: emptyDurations(),
    process: new Ring(PROCESS_SAMPLES),
    memory: new Ring(MEMORY_SAMPLES),
    capture: null,
    proc: null,
  };
}

/** A rank's history as a checkpoint holds it (its sessions are the table's). */
type HistoryDump = Pick<JobsCheckpoint[number]['ranks'][number], 'recent' | 'buckets' | 'histogram' | 'process' | 'memory'>;

export function dumpHistory(rank: Rank): HistoryDump {
  return { recent: rank.recent.toArray(), buckets: rank.buckets.dump(), histogram: rank.histogram.dump(), process: rank.process.toArray(), memory: rank.memory.toArray() };
}

/** A rank's history from a checkpoint. */
export function loadHistory(held: HistoryDump, recentSteps: number): Pick<Rank, 'recent' | 'buckets' | 'histogram' | 'process' | 'memory'> {
  return {
    recent: Ring.of(recentSteps, held.recent),
    buckets: StepBuckets.load(held.buckets),
    histogram: LogHistogram.load(held.histogram),
    process: Ring.of(PROCESS_SAMPLES, held.process),
    memory: Ring.of(MEMORY_SAMPLES, held.memory),
  };
}

/**
 * Each rank's steps and counter samples: what its windows, verdicts and /metrics are made of. Which
 * of a frame's rows are new is the session table's to say (the admission rule); the history keeps them.
 */
export class RankHistory {
  constructor(private readonly sessions: HeldSessions) {}

  /**
   * Adds the records not seen before. `refused`: records of the frame refused for implausible times,
   * up to seq `through`, which the acknowledgement covers all the same (never applied, never sent again).
   */
  steps(sessionId: string, records: readonly StepRecord[], dropped: number, at: number, duplicatesSeen = 0, refused: { count: number; through: number } | null = null): StepsResult {
    const { session, kept, duplicates } = this.sessions.takeRows(sessionId, records, dropped, at, duplicatesSeen, refused);
    const rank = session.rank;
    for (const record of kept) {
      addStep(rank.totals, record);
      const endAt = toSidecarMs(session, record.endNs);
      rank.recent.push({ record, endAt });
      rank.buckets.add(record, endAt);
      rank.histogram.add(record.durNs / 1e6);
      addDuration(rank.durations, record.durNs / 1e9);
      const startAt = endAt - record.durNs / 1e6;
      if (session.job.firstStepAt === null || startAt < session.job.firstStepAt) session.job.firstStepAt = startAt;
      rank.lastStepEndAt = Math.max(rank.lastStepEndAt ?? endAt, endAt);
      rank.steps += 1;
      rank.lastStep = record.step;
    }
    if (kept.length > 0) rank.lastStepAt = at;
    return { accepted: kept, duplicates, ack: session.maxSeq };
  }

  /**
   * Keeps the process counters on the rank; returns forwarded NVML samples as GPU samples, both
   * placed on the sidecar's clock (those the rank's clock could not give left out, as the ingest does).
   */
  counters(sessionId: string, batch: CounterBatch, at: number): GpuSample[] {
    const session = this.sessions.session(sessionId);
    const placed = <T extends { at_ns: number }>(samples: T[]) =>
      samples.filter((sample) => plausibleFor(session, sample.at_ns, at)).map((sample) => ({ ...sample, at: toSidecarMs(session, sample.at_ns) }));
    if (batch.source === 'process') {
      for (const sample of placed(batch.samples)) session.rank.process.push(sample);
      return [];
    }
    if (batch.source === 'memory') {
      for (const sample of placed(batch.samples)) session.rank.memory.push(sample);
      return [];
    }
    return placed(batch.samples).map((sample) => nvmlToGpuSample(sample, sample.at));
  }

  /** Every rank's view, or one job's. */
  views(jobId?: string): RankView[] {
    const views: RankView[] = [];
    for (const job of this.sessions.jobsOf(jobId)) for (const rank of job.ranks.values()) views.push(viewOf(job, rank));
    return views;
  }
}

function viewOf(job: Job, rank: Rank): RankView {
  return {
    job: job.id,
    rank: rank.rank,
    localRank: rank.localRank,
    env: rank.env,
    buckets: rank.buckets,
    histogram: rank.histogram,
    totals: rank.totals,
    durations: rank.durations,
    steps: () => rank.steps,
    lastStepEndAt: () => rank.lastStepEndAt,
    recent: () => rank.recent.toArray(),
    process: () => rank.process.toArray(),
    memory: () => rank.memory.toArray(),
    liveness: () => {
      const latest = rank.latest;
      return {
        connected: rank.sessions.some((session) => session.connections > 0),
        ended: latest.ended,
        pid: latest.pid,
        host: latest.host,
        heardAt: latest.heardAt,
        heartbeatMs: latest.heartbeatMs,
        captures: latest.captures,
        procStart: latest.procStart,
        disconnectedAt: latest.disconnectedAt,
        disconnectReason: latest.disconnectReason,
        lastStep: rank.lastStep,
        capture: rank.capture,
        proc: rank.proc,
      };
    },
  };
}
