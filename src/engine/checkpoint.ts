import { Type, type Static } from '@sinclair/typebox';
import { AnalysisCheckpointSchema } from '../analysis/analysis-checkpoint.js';
import { CountersCheckpointSchema } from '../counters/counters-checkpoint.js';
import { InputError, parseInput } from '../protocol/parse.js';
import { CountsBy, Names, Nullable } from '../protocol/schema.js';
import { ComparisonSchema, NodeInventorySchema } from '../protocol/state.js';
import { RegressionSchema } from '../protocol/summary.js';
import { JobsCheckpointSchema } from '../store/jobs-checkpoint.js';
import { ENGINE_CONFIG, ReferenceEntrySchema, type EngineConfig } from './entries.js';

/**
 * The checkpoint: the engine's whole state as one versioned document, each part's schema in its own
 * module (the job store's, the counter store's, each job's analysis) and the engine's own here. The
 * schema is the type: each part writes plain data of its schema's type and is built from it, and a
 * checkpoint is checked whole, against this schema, before any of it is used. Any change to what a
 * checkpoint holds changes CHECKPOINT_FORMAT: a checkpoint of another version is refused with the
 * reason, and the replay goes on from the journal's segments (src/journal/replay.ts).
 */
export const CHECKPOINT_FORMAT = 'stepscope.checkpoint/v2';

const Int = Type.Integer({ minimum: 0 });
const NumOrNull = Nullable(Type.Number());
const ReferenceKind = Names(['baseline', 'history'] as const);

/** A regression that began or ended, as the stream told it. */
const RegressionChangeCheckpoint = Type.Object({
  job: Type.String(),
  run: Type.Integer({ minimum: 1 }),
  at: Type.Number(),
  regressed: Type.Boolean(),
  changePct: NumOrNull,
  text: Type.String(),
  startedAt: Type.Number(),
  endedAt: NumOrNull,
  reference: Nullable(Type.Object({ kind: ReferenceKind, label: Type.String() })),
  thresholdPct: Type.Number(),
});

/** The runs' comparisons (src/engine/runs.ts): the references journaled, each live run's comparison, each ended run's. */
export const RunsCheckpointSchema = Type.Object({
  references: Type.Array(Type.Pick(ReferenceEntrySchema, ['job', 'pinned', 'past'])),
  tracked: Type.Array(
    Type.Tuple([
      Type.String(),
      Type.Object({
        run: Type.Integer({ minimum: 1 }),
        comparedAt: Type.Number(),
        comparison: Nullable(ComparisonSchema),
        reference: Nullable(Type.Object({ kind: ReferenceKind, label: Type.String(), runs: Int, ms_per_sample: NumOrNull })),
        crossedAt: NumOrNull,
        began: Nullable(RegressionChangeCheckpoint),
      }),
    ]),
  ),
  finals: Type.Array(Type.Tuple([Type.String(), Type.Object({ run: Type.Integer({ minimum: 1 }), comparison: Nullable(ComparisonSchema), regression: Nullable(RegressionSchema) })])),
});
export type RunsCheckpoint = Static<typeof RunsCheckpointSchema>;

export const EngineStatsSchema = Type.Object({
  applied: Int,
  skipped: CountsBy('entries that could not be applied, by reason (a session the state no longer has, say)'),
});
export type EngineStats = Static<typeof EngineStatsSchema>;

export const CheckpointSchema = Type.Object({
  format: Type.Literal(CHECKPOINT_FORMAT),
  config: Type.Unsafe<EngineConfig>(ENGINE_CONFIG),
  source: Nullable(Type.Object({ gpu: Type.String({ maxLength: 32 }), reason: Type.String({ maxLength: 4096 }) })),
  hookGpu: Type.Boolean(),
  /** The latest tick's time. */
  at: Type.Number({ minimum: 0 }),
  jobs: JobsCheckpointSchema,
  counters: CountersCheckpointSchema,
  analyses: Type.Array(AnalysisCheckpointSchema),
  stats: EngineStatsSchema,
  /** Per job, its ranks' pids. */
  pids: Type.Array(Type.Tuple([Type.String(), Type.Array(Type.Integer())])),
  /** The node's inventory as journaled; null before it was. */
  node: Nullable(NodeInventorySchema),
  runs: RunsCheckpointSchema,
});
export type Checkpoint = Static<typeof CheckpointSchema>;

/** `value` as a checkpoint of this version, or an InputError saying why it is not one (checked whole, before anything is used). */
export function parseCheckpoint(value: unknown): Checkpoint {
  const format = typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as { format?: unknown }).format : undefined;
  if (format !== CHECKPOINT_FORMAT) {
    const held = typeof format === 'string' ? `a checkpoint of ${format.slice(0, 64)}` : 'not a checkpoint';
    throw new InputError('checkpoint.format', `${held}: this sidecar reads ${CHECKPOINT_FORMAT} only`);
  }
  return parseInput(CheckpointSchema, value, 'checkpoint');
}
