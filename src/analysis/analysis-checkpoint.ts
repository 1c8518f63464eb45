import { Type, type Static } from '@sinclair/typebox';
import { LIMITERS, STOP_VERDICTS } from '../model/verdict.js';
import { CodeFrameSchema } from '../protocol/capture.js';
import { Names, Nullable } from '../protocol/schema.js';
import { CauseSchema, EvidenceSchema, FixEstimateSchema, LimiterCostSchema, RecommendationSchema, StragglerSchema, VerdictSchema } from '../protocol/state.js';
import { SeriesDumpSchema } from './summary-series.js';

/**
 * A job's analysis as a checkpoint holds it (src/engine/checkpoint.ts): its verdict trackers and
 * timelines, the straggler, the waste ledger, the series, the stops and the fix fold. The schema is
 * the type: `JobAnalysis.dump` and the parts' own `dump`s write it; their `load`s read it once the
 * whole checkpoint is checked.
 */

const Int = Type.Integer({ minimum: 0 });
const Seconds = Type.Number();
const ByLimiter = Type.Array(Type.Tuple([Names(LIMITERS), Seconds]));

const JudgementCheckpoint = Type.Object({
  verdict: VerdictSchema,
  cause: CauseSchema,
  evidence: EvidenceSchema,
  recommendations: Type.Array(RecommendationSchema),
  limiters: Type.Array(LimiterCostSchema),
  causes: Type.Array(FixEstimateSchema),
});
const Held = Nullable(Type.Object({ judgement: JudgementCheckpoint, since: Type.Number() }));

export const TrackerCheckpointSchema = Type.Object({ holdMs: Type.Number({ minimum: 0 }), held: Held, pending: Held });
export type TrackerCheckpoint = Static<typeof TrackerCheckpointSchema>;

const VerdictChangeCheckpoint = Type.Object({
  since: Type.Number(),
  at: Type.Number(),
  from: Nullable(VerdictSchema),
  fromCause: CauseSchema,
  to: VerdictSchema,
  cause: CauseSchema,
  judgement: JudgementCheckpoint,
});

export const WasteCheckpointSchema = Type.Object({ gpuSeconds: Seconds, lost: ByLimiter, energy: ByLimiter, steady: ByLimiter });
export type WasteCheckpoint = Static<typeof WasteCheckpointSchema>;

export const FixFoldCheckpointSchema = Type.Object({
  /** Seconds each verdict held. */
  verdicts: Type.Array(Type.Tuple([VerdictSchema, Seconds])),
  causes: Type.Array(
    Type.Object({
      verdict: VerdictSchema,
      cause: CauseSchema,
      limiter: Names(LIMITERS),
      present: Seconds,
      known: Seconds,
      gain: Type.Number(),
      upto: Type.Number(),
      basis: Type.String(),
      unknown: Nullable(Type.String()),
    }),
  ),
});
export type FixFoldCheckpoint = Static<typeof FixFoldCheckpointSchema>;

const StopEpisodeCheckpoint = Type.Object({
  verdict: Names(STOP_VERDICTS),
  cause: CauseSchema,
  since: Type.Number(),
  until: Type.Number(),
  step: Type.Integer(),
  culprits: Type.Array(Int),
  waiting: Type.Array(Int),
  waits_in: Nullable(Type.String()),
  text: Type.String(),
  detail: Type.String(),
  idle_ranks: Int,
  /** Only with --stack-dumps. */
  dumps: Type.Optional(Type.Array(Type.String())),
  where: Type.Array(CodeFrameSchema),
  recommendations: Type.Array(RecommendationSchema),
});

export const AnalysisCheckpointSchema = Type.Object({
  jobId: Type.String({ minLength: 1 }),
  run: Type.Integer({ minimum: 1 }),
  startedAt: Type.Number(),
  holdMs: Type.Number({ minimum: 0 }),
  ranks: Type.Array(Type.Tuple([Int, TrackerCheckpointSchema])),
  job: TrackerCheckpointSchema,
  changes: Type.Array(VerdictChangeCheckpoint),
  rankChanges: Type.Array(Type.Tuple([Int, Type.Array(VerdictChangeCheckpoint)])),
  lastOf: Type.Array(Type.Tuple([VerdictSchema, JudgementCheckpoint])),
  stragglerNow: Nullable(StragglerSchema),
  stragglerSeconds: Type.Array(Type.Tuple([Int, Type.Object({ seconds: Seconds, latest: StragglerSchema })])),
  lastAt: Nullable(Type.Number()),
  waste: WasteCheckpointSchema,
  /** Null before the run's first tick. */
  series: Nullable(SeriesDumpSchema),
  stops: Type.Array(StopEpisodeCheckpoint),
  fixes: FixFoldCheckpointSchema,
});
export type AnalysisCheckpoint = Static<typeof AnalysisCheckpointSchema>;
