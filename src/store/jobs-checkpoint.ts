import { Type, type Static } from '@sinclair/typebox';
import { CaptureSchema, ProcReadingSchema } from '../protocol/capture.js';
import { EnvSchema } from '../protocol/hook-schema.js';
import { Held, Keys, Names, Nullable } from '../protocol/schema.js';
import { STEP_BUCKETS_S } from './duration-counts.js';
import { HISTOGRAM_TOP } from './histogram.js';
import { END_REASONS, SESSION_DISCONNECTS, type MemoryAt, type ProcessAt } from './job-records.js';
import { STEP_SUM_FIELDS } from './step-buckets.js';

/**
 * The job store's part of a checkpoint (src/engine/checkpoint.ts): every job, its ranks and their
 * sessions as plain data. The schema is the type: `JobStore.dump` writes it, `JobStore.load` reads
 * it once the whole checkpoint has been checked against it.
 */

const Int = Type.Integer({ minimum: 0 });
const IntOrNull = Nullable(Type.Integer());
const NumOrNull = Nullable(Type.Number());

const StepRecordCheckpoint = Type.Composite([
  Keys(['seq', 'step', 'endNs', 'durNs', 'dataNs', 'h2dNs', 'computeNs'] as const, Type.Number()),
  Keys(['samples', 'gpuH2dNs', 'gpuComputeNs', 'gpuIdleNs', 'commNs', 'commWaitNs', 'commBytes', 'evalNs'] as const, NumOrNull),
]);

const SessionCheckpoint = Type.Object({
  id: Type.String({ minLength: 1 }),
  pid: Type.Integer(),
  host: Type.String(),
  maxSeq: Type.Integer(),
  dropped: Int,
  duplicates: Int,
  connections: Int,
  ended: Type.Boolean(),
  clockOffsetMs: Type.Number(),
  helloAt: Type.Number(),
  monoAtHello: Type.Number(),
  secret: Nullable(Type.String()),
  seqBase: Type.Integer(),
  refused: Int,
  skipped: Int,
  heardAt: NumOrNull,
  heartbeatMs: NumOrNull,
  captures: Type.Boolean(),
  procStart: IntOrNull,
  disconnectedAt: NumOrNull,
  disconnectReason: Nullable(Names(SESSION_DISCONNECTS)),
});

const RankCheckpoint = Type.Object({
  rank: Int,
  localRank: Type.Integer(),
  /** The id of its latest session, one of `sessions`. */
  latest: Type.String(),
  sessions: Type.Array(SessionCheckpoint, { minItems: 1 }),
  forgotten: Keys(['sessions', 'dropped', 'duplicates'] as const, Int),
  env: EnvSchema,
  steps: Int,
  lastStep: Type.Integer(),
  lastStepAt: NumOrNull,
  lastStepEndAt: NumOrNull,
  totals: Keys(STEP_SUM_FIELDS, Type.Number()),
  recent: Type.Array(Type.Object({ record: StepRecordCheckpoint, endAt: Type.Number() })),
  /** Each slice held: its number, then its sums in STEP_SUM_FIELDS order. */
  buckets: Type.Array(Type.Unsafe<number[]>(Type.Tuple([Int, ...STEP_SUM_FIELDS.map(() => Type.Number())]))),
  /** The step-time histogram's non-empty buckets as [index, count]. */
  histogram: Type.Array(Type.Tuple([Type.Integer({ minimum: 0, maximum: HISTOGRAM_TOP }), Int])),
  durations: Type.Object({
    buckets: Type.Array(Int, { minItems: STEP_BUCKETS_S.length + 1, maxItems: STEP_BUCKETS_S.length + 1 }),
    sumS: Type.Number(),
    count: Int,
  }),
  process: Type.Array(Held<ProcessAt>(['at', 'at_ns'], 'a process sample from the hook, at its sidecar time')),
  memory: Type.Array(Held<MemoryAt>(['at', 'at_ns'], 'an allocator sample from the hook, at its sidecar time')),
  capture: Nullable(CaptureSchema),
  proc: Nullable(Type.Composite([ProcReadingSchema, Type.Object({ at: Type.Number() })])),
});

export const JobsCheckpointSchema = Type.Array(
  Type.Object({
    id: Type.String({ minLength: 1 }),
    run: Type.Integer({ minimum: 1 }),
    worldSize: Type.Integer(),
    helloAt: Type.Number(),
    firstStepAt: NumOrNull,
    summarized: Type.Boolean(),
    connections: Int,
    disconnectedSince: NumOrNull,
    endedAt: NumOrNull,
    endReason: Nullable(Names(END_REASONS)),
    lastHeardAt: NumOrNull,
    ranks: Type.Array(RankCheckpoint),
  }),
);
export type JobsCheckpoint = Static<typeof JobsCheckpointSchema>;
