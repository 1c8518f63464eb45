import { Type, type Static } from '@sinclair/typebox';
import { Held, Keys, Nullable } from '../protocol/schema.js';
import { HISTOGRAM_TOP } from './histogram.js';
import { JobFieldsSchema, RankFieldsSchema, SessionFieldsSchema, type MemoryAt, type ProcessAt } from './job-records.js';
import { STEP_SUM_FIELDS } from './step-buckets.js';

/**
 * The job store's part of a checkpoint (src/engine/checkpoint.ts): every job, its ranks and their
 * sessions as plain data. The schema is the type: `SessionTable.dump` writes it, `SessionTable.load` reads
 * it once the whole checkpoint has been checked against it.
 */

const Int = Type.Integer({ minimum: 0 });
const NumOrNull = Nullable(Type.Number());

const StepRecordCheckpoint = Type.Composite([
  Keys(['seq', 'step', 'endNs', 'durNs', 'dataNs', 'h2dNs', 'computeNs'] as const, Type.Number()),
  Keys(['samples', 'gpuH2dNs', 'gpuComputeNs', 'gpuIdleNs', 'commNs', 'commWaitNs', 'commBytes', 'evalNs'] as const, NumOrNull),
]);

/** A rank's fields, its sessions and its history's rings as plain data. */
const RankCheckpoint = Type.Composite([
  RankFieldsSchema,
  Type.Object({
    /** The id of its latest session, one of `sessions`. */
    latest: Type.String(),
    sessions: Type.Array(SessionFieldsSchema, { minItems: 1 }),
    recent: Type.Array(Type.Object({ record: StepRecordCheckpoint, endAt: Type.Number() })),
    /** Each slice held: its number, then its sums in STEP_SUM_FIELDS order. */
    buckets: Type.Array(Type.Unsafe<number[]>(Type.Tuple([Int, ...STEP_SUM_FIELDS.map(() => Type.Number())]))),
    /** The step-time histogram's non-empty buckets as [index, count]. */
    histogram: Type.Array(Type.Tuple([Type.Integer({ minimum: 0, maximum: HISTOGRAM_TOP }), Int])),
    process: Type.Array(Held<ProcessAt>(['at', 'at_ns'], 'a process sample from the hook, at its sidecar time')),
    memory: Type.Array(Held<MemoryAt>(['at', 'at_ns'], 'an allocator sample from the hook, at its sidecar time')),
  }),
]);

export const JobsCheckpointSchema = Type.Array(Type.Composite([JobFieldsSchema, Type.Object({ ranks: Type.Array(RankCheckpoint) })]));
export type JobsCheckpoint = Static<typeof JobsCheckpointSchema>;
