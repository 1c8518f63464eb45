import { Type, type Static } from '@sinclair/typebox';
import { CaptureSchema, ProcReadingSchema } from '../protocol/capture.js';
import type { MemorySample, ProcessSample } from '../protocol/counters.js';
import { EnvSchema } from '../protocol/hook-schema.js';
import type { StepRecord } from '../protocol/messages.js';
import { Keys, Names, Nullable } from '../protocol/schema.js';
import { STEP_BUCKETS_S } from './duration-counts.js';
import type { LogHistogram } from './histogram.js';
import type { Ring } from './ring.js';
import { STEP_SUM_FIELDS, type StepBuckets } from './step-buckets.js';

/** A process sample from a rank's hook, placed on the sidecar's clock. */
export type ProcessAt = ProcessSample & { at: number };
/** An allocator sample from a rank's hook, placed on the sidecar's clock. */
export type MemoryAt = MemorySample & { at: number };

/** The shapes the job store keeps: one job, its ranks, and each process (session) of a rank. */

export const END_REASONS = ['all-ranks-ended', 'disconnected', 'shutdown'] as const;
export type EndReason = (typeof END_REASONS)[number];

export const SESSION_DISCONNECTS = ['closed', 'silent', 'restart'] as const;

const Int = Type.Integer({ minimum: 0 });
const NumOrNull = Nullable(Type.Number());

/**
 * The fields of a session, a rank and a job as plain data, written once: the schema is the type of
 * the store's records (below, with their links and rings) and of their part of a checkpoint
 * (src/store/jobs-checkpoint.ts).
 */
export const SessionFieldsSchema = Type.Object({
  id: Type.String({ minLength: 1 }),
  pid: Type.Integer(),
  host: Type.String(),
  maxSeq: Type.Integer(),
  dropped: Int,
  duplicates: Int,
  connections: Int,
  ended: Type.Boolean(),
  clockOffsetMs: Type.Number({ description: 'Sidecar clock minus hook wall clock, measured when hello arrived (includes transit).' }),
  helloAt: Type.Number({ description: 'Sidecar time at the latest hello: with monoAtHello, maps hook times onto the sidecar clock.' }),
  monoAtHello: Type.Number({ description: 'Hook monotonic time at the latest hello.' }),
  secret: Nullable(Type.String(), { description: 'What a hello must present to resume this session (null: journaled before secrets existed).' }),
  seqBase: Type.Integer({ description: 'The highest seq the hook said was acknowledged when this sidecar first saw the session.' }),
  refused: Type.Integer({ minimum: 0, description: 'Records refused for implausible times, counted (they are acknowledged, never applied).' }),
  /** A frame's `dropped` can count records dropped before its later frames' gaps reach the sidecar. */
  skipped: Type.Integer({ minimum: 0, description: "Seqs passed over between the records held: what of the hook's `dropped` these frames used up." }),
  heardAt: Nullable(Type.Number(), { description: 'When a frame last came from it (not counter samples: a journal near its cap gives those up).' }),
  heartbeatMs: Nullable(Type.Number(), { description: "The hook's promise of a frame at least this often (its hello); null: an older hook, no heartbeats." }),
  captures: Type.Boolean({ description: 'Whether the hook answers `capture` requests.' }),
  procStart: Nullable(Type.Integer(), { description: "Its process's start in clock ticks after boot (hello.proc_start), to tell it in /proc; null if not given." }),
  disconnectedAt: Nullable(Type.Number(), { description: 'When its last connection went away while nothing said `end` (cleared when it connects).' }),
  disconnectReason: Nullable(Names(SESSION_DISCONNECTS), { description: 'How: its connection closed, the sidecar closed it as silent, or the sidecar itself restarted.' }),
});
export type SessionFields = Static<typeof SessionFieldsSchema>;

export const RankFieldsSchema = Type.Object({
  rank: Int,
  localRank: Type.Integer(),
  forgotten: Keys(['sessions', 'dropped', 'duplicates'] as const, Int, { description: 'What the sessions forgotten to keep `sessions` bounded had counted.' }),
  env: EnvSchema,
  steps: Int,
  lastStep: Type.Integer(),
  lastStepAt: NumOrNull,
  lastStepEndAt: Nullable(Type.Number(), { description: 'Sidecar-clock end of the newest step.' }),
  totals: Keys(STEP_SUM_FIELDS, Type.Number()),
  durations: Type.Object(
    {
      buckets: Type.Array(Int, { minItems: STEP_BUCKETS_S.length + 1, maxItems: STEP_BUCKETS_S.length + 1 }),
      sumS: Type.Number(),
      count: Int,
    },
    { description: "Step durations in the Prometheus histogram's buckets, for /metrics." },
  ),
  capture: Nullable(CaptureSchema, { description: 'Where it was when the sidecar last asked (it had stalled); null before.' }),
  proc: Nullable(Type.Composite([ProcReadingSchema, Type.Object({ at: Type.Number() })]), { description: 'Its process as the sidecar last read it in /proc; null before.' }),
});
export type RankFields = Static<typeof RankFieldsSchema>;

export const JobFieldsSchema = Type.Object({
  id: Type.String({ minLength: 1 }),
  run: Type.Integer({ minimum: 1, description: '1 for the first run of this job name, then one more for each run after one that ended.' }),
  worldSize: Type.Integer(),
  helloAt: Type.Number({ description: 'When the first hello came.' }),
  firstStepAt: Nullable(Type.Number(), { description: "Sidecar-clock start of the earliest step received: the job's real start, whenever the sidecar started." }),
  summarized: Type.Boolean(),
  connections: Int,
  disconnectedSince: NumOrNull,
  endedAt: NumOrNull,
  endReason: Nullable(Names(END_REASONS)),
  lastHeardAt: Nullable(Type.Number(), { description: 'When any of its ranks was last heard from (a frame, or a connection closing); null before.' }),
});
export type JobFields = Static<typeof JobFieldsSchema>;

export interface Session extends SessionFields {
  job: Job;
  rank: Rank;
}

/** A step record placed on the sidecar's clock. */
export interface TimedStep {
  record: StepRecord;
  endAt: number;
}

export interface Rank extends RankFields {
  latest: Session;
  /** The newest processes of this rank (a restarted process is a new session), oldest first. */
  sessions: Session[];
  recent: Ring<TimedStep>;
  buckets: StepBuckets;
  histogram: LogHistogram;
  process: Ring<ProcessAt>;
  /** Allocator samples (about 1 a second): the last 10 minutes give the growth trend. */
  memory: Ring<MemoryAt>;
}

export interface Job extends JobFields {
  ranks: Map<number, Rank>;
}
