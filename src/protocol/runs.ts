import { Type, type Static } from '@sinclair/typebox';
import { Bool, Count, Names, Nullable, Num, NumOrNull, Str, StrOrNull, Time } from './schema.js';
import { CauseSchema, VerdictSchema } from './state.js';

/**
 * A job's run history as the sidecar serves it (`GET /v1/runs?job=NAME`) and keeps it on disk
 * (src/outputs/past-runs.ts), and as the viewer reads it: the runs of a job that ended, newest first,
 * each in a line of figures. One schema, the validator and (through `Static`) the type.
 */

export const RUNS_SCHEMA = 'stepscope.runs/v1' as const;

export const RunRecordSchema = Type.Object(
  {
    job: Str('the job name'),
    run: Type.Integer({ minimum: 1, description: 'its run number on the sidecar that saw it (1, 2, …)' }),
    started_at: Time("the run's first step"),
    ended_at: Time("the run's last step"),
    fingerprint: Str('what makes runs comparable: a hash of the GPU model and the number of ranks'),
    gpu_name: StrOrNull('the GPU model; null where no GPU was matched or named'),
    world_size: Type.Integer({ minimum: 1, description: 'ranks in the job' }),
    steps: Count('steps of all ranks'),
    duration_s: Num('seconds from the first step to the last'),
    samples_per_s: NumOrNull('samples a second, all ranks; null where the loop does not count samples'),
    ms_per_sample: NumOrNull("a rank's mean step time divided by its samples a step, ms; null without samples"),
    step_ms_mean: NumOrNull('mean step time, ms'),
    verdict: VerdictSchema,
    cause: CauseSchema,
    change_pct: NumOrNull('per-sample time against the run\'s reference (its baseline, or the median of the runs before it), percent; null without one'),
    regression: Bool('slower than its reference by the threshold or more'),
  },
  { description: 'one run of a job that ended' },
);

export const RunsReferenceSchema = Type.Object(
  {
    kind: Names(['baseline', 'history'] as const, { description: 'a pinned --baseline, or the median of recent comparable runs' }),
    label: Str('what it is, in words: "baseline (run of 2026-11-30)", "median of the last 5 runs"'),
    runs: Count('runs it is made of'),
    ms_per_sample: NumOrNull('its time per sample, ms'),
  },
  { description: 'what a new run of the job is compared with' },
);

export const RunsResponseSchema = Type.Object(
  {
    schema: Type.Literal(RUNS_SCHEMA, { description: 'this schema and its version' }),
    job: Str('the job asked for'),
    threshold_pct: Num('a run this much slower per sample than its reference is a regression (--regression-threshold)'),
    runs: Type.Array(RunRecordSchema, { description: 'its runs that ended, newest first (at most --history-keep)' }),
    reference: Nullable(RunsReferenceSchema, { description: 'what its next or current run is compared with; null without a baseline or comparable runs' }),
    skipped: Count('history files that could not be read or did not validate (the sidecar logs why)'),
  },
  { description: 'the body of GET /v1/runs' },
);

export type RunRecord = Static<typeof RunRecordSchema>;
export type RunsReference = Static<typeof RunsReferenceSchema>;
export type RunsResponse = Static<typeof RunsResponseSchema>;
