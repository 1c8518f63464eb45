import { Type, type Static } from '@sinclair/typebox';
import { THROTTLE_REASON_NAMES } from '../model/gpu.js';
import { EnvSchema } from './hook-schema.js';
import { RunRecordSchema } from './runs.js';
import { CaptureRecordSchema } from './profile.js';
import { SummaryStopSchema } from './stall-state.js';
import { Bool, Count, Keys, Nullable, Num, NumOrNull, OptionalKeys, Str, StrOrNull, Time } from './schema.js';
import { NodeSummarySchema, BreakdownSchema, CauseSchema, ComparisonSchema, EvidenceSchema, FoldedFixSchema, LimiterCostSchema, MfuSchema, PHASES, RecommendationSchema, StragglerSchema, TimelineSegmentSchema, VerdictSchema, WasteSchema } from './state.js';

/**
 * summary.json: what the sidecar writes at a run's end and reads back (`stepscope report`, `compare`,
 * `gate`, `--baseline`, the run history). One schema, checked whole on read, whose `Static` is the
 * Summary type the analysis builds: the schema is the type. Fields added after the first version are
 * optional, so that older summaries still read.
 */

export const SUMMARY_SCHEMA = 'stepscope.summary/v1';

export const StepMsSchema = Type.Object({ mean: NumOrNull('mean, ms'), p50: NumOrNull('median, ms'), p90: NumOrNull('90th percentile, ms'), p99: NumOrNull('99th percentile, ms') });
const Values = (description: string) => Type.Array(Nullable(Type.Number()), { description: `${description}; null where nothing was measured` });

export const SummarySeriesSchema = Type.Object(
  {
    from: Time('start of the first slice'),
    slice_s: Num('length of a slice, s'),
    steps: Type.Array(Type.Integer({ minimum: 0 }), { description: 'steps that ended in each slice' }),
    step_ms: Values('mean step time, ms'),
    phase_ms: Keys(PHASES, Values('mean ms a step')),
    samples_per_s: Values('samples a second, all ranks'),
    ranks: Type.Array(Type.Object({ rank: Count('the rank'), step_ms: Values('its mean step time, ms') })),
    ranks_total: Count('ranks in the run (the series may show fewer)'),
    gpus: Type.Array(
      Type.Object({
        index: Num('GPU index'),
        uuid: StrOrNull('GPU UUID'),
        name: StrOrNull('product name'),
        util_pct: Values('mean utilization, percent'),
        sm_clock_pct: Values('mean SM clock, percent of its maximum'),
        power_w: Values('mean power draw, W'),
        temp_c_max: Values('highest temperature, °C'),
        mem_used_mib_max: Values('most memory used, MiB'),
        throttled: Values('share of samples with a thermal, power or hardware slowdown reason'),
      }),
    ),
  },
  { description: 'the run over time, in at most 360 slices' },
);

export const RegressionSchema = Type.Object({
  change_pct: Num('per-sample time against the reference, percent'),
  threshold_pct: Num('the threshold it passed'),
  against: Str('the reference, in words'),
  since_s: NumOrNull("when the live comparison passed the threshold and held, s from the run's start"),
  text: Str("the comparison's first line"),
});

export const RankSummarySchema = Type.Object({
  rank: Count('rank'),
  local_rank: Count('local rank'),
  host: Str('host'),
  steps: Count('steps'),
  breakdown: BreakdownSchema,
  step_ms: StepMsSchema,
  verdict: VerdictSchema,
  cause: CauseSchema,
  straggler: Bool('the job\'s straggler'),
});

export const SummaryGpuSchema = Type.Object({
  index: Num('GPU index'),
  uuid: StrOrNull('GPU UUID'),
  name: StrOrNull('product name'),
  ranks: Type.Array(Type.Number()),
  samples: Count('samples'),
  util_mean: NumOrNull('mean utilization, percent'),
  sm_clock_frac_mean: NumOrNull('mean SM clock, share of max'),
  sm_clock_max_mhz: NumOrNull('max SM clock, MHz'),
  throttle_share: OptionalKeys(THROTTLE_REASON_NAMES, Type.Number()),
  temp_c_max: NumOrNull('highest temperature, °C'),
  power_frac_mean: NumOrNull('mean power, share of the limit'),
  power_limit_w: NumOrNull('power limit, W'),
  mem_peak_mib: NumOrNull('most memory used, MiB'),
  mem_total_mib: NumOrNull('memory, MiB'),
  other_processes: Type.Optional(
    Type.Array(
      Type.Object({ pid: Count('process id (the sidecar nvidia-smi\'s pid namespace)'), name: Str('process name'), used_mib_max: NumOrNull('most GPU memory it held, MiB') }),
      { description: "compute processes that shared the GPU (a MIG instance: its physical GPU) and are not the job's ranks; absent: not measured" },
    ),
  ),
});

export const JobWideSchema = Type.Object(
  {
    from: Type.Union([Type.Literal('summaries'), Type.Literal('prometheus')], { description: 'summaries: stepscope merge; prometheus: report --prometheus' }),
    pods: Type.Array(Type.Object({ pod: Str('its folder, or its sidecar\'s instance'), ranks: Type.Array(Count('a rank')) })),
    missing_ranks: Type.Array(Count('a rank'), { description: 'ranks below the world size no pod reported' }),
    missing_pods: Type.Array(Type.Object({ pod: Str('the pod'), why: Str('why it gave nothing') })),
  },
  { description: "a job's summary across its pods, and what it could not see" },
);

export const SummaryMfuSchema = Type.Object(
  {
    mfu: NumOrNull("the ranks' mean MFU (0..1); null: not measured"),
    text: Str('"31% MFU (bf16 peak 989 TFLOP/s, H100 SXM)", or why it was not measured'),
    ranks: Type.Array(Type.Composite([MfuSchema, Type.Object({ rank: Count('the rank') })])),
  },
  { description: "model FLOPs utilization over each rank's median step, where a hook gave the FLOPs of a step; absent where none did" },
);

export const SummarySchema = Type.Object({
  schema: Type.Literal(SUMMARY_SCHEMA),
  job: Str('the job'),
  started_at: Time('first step'),
  ended_at: Time('last step'),
  end_reason: StrOrNull('why it ended'),
  headline: Str('the verdict in one sentence'),
  verdict: VerdictSchema,
  cause: CauseSchema,
  verdict_share: NumOrNull('share of the active time the verdict held'),
  steps: Count('steps'),
  lost: Count('records the hooks dropped'),
  duplicates: Count('records received twice'),
  duration_s: Num('seconds'),
  world_size: Type.Integer({ minimum: 1 }),
  breakdown: BreakdownSchema,
  gpu_breakdown: Nullable(Type.Object({ h2d: Type.Number(), compute: Type.Number(), idle: Type.Number() })),
  step_ms: StepMsSchema,
  samples_per_s: NumOrNull('samples a second'),
  ranks: Type.Array(RankSummarySchema),
  straggler: Nullable(Type.Composite([StragglerSchema, Type.Object({ seconds: Num('seconds it was the straggler') })])),
  timeline: Type.Array(TimelineSegmentSchema),
  gpus: Type.Array(SummaryGpuSchema),
  env: EnvSchema,
  recommendations: Type.Array(RecommendationSchema),
  evidence: Nullable(EvidenceSchema),
  baseline: Type.Optional(ComparisonSchema),
  samples_per_step: Type.Optional(NumOrNull('samples a step')),
  series: Type.Optional(SummarySeriesSchema),
  regression: Type.Optional(RegressionSchema),
  history: Type.Optional(Type.Array(RunRecordSchema)),
  waste: Type.Optional(WasteSchema),
  node: Type.Optional(NodeSummarySchema),
  stops: Type.Optional(Type.Array(SummaryStopSchema, { description: 'where the run stopped stepping (it hung, a rank stalled or went), oldest first' })),
  limiters: Type.Optional(Type.Array(LimiterCostSchema, { description: "every limiter that cost the job at least 5% of its time, most costly first (its bound: the time-weighted mean of the windows' bounds)" })),
  causes: Type.Optional(Type.Array(FoldedFixSchema, { description: "each cause of the run's verdicts with what fixing it would buy, folded over the time its verdict held: the summary's verdict's causes first, then the other verdicts' by how long each held; within a verdict, most first" })),
  mfu: Type.Optional(SummaryMfuSchema),
  captures: Type.Optional(Type.Array(CaptureRecordSchema, { description: 'deep captures (torch.profiler windows) asked for while the run stepped; absent where none was' })),
  job_wide: Type.Optional(JobWideSchema),
});

export type Summary = Static<typeof SummarySchema>;
export type StepMs = Static<typeof StepMsSchema>;
export type RankSummary = Static<typeof RankSummarySchema>;
/** A GPU the run used, over the run (not the state's latest reading of a GPU: GpuReading). */
export type SummaryGpu = Static<typeof SummaryGpuSchema>;
export type SummarySeries = Static<typeof SummarySeriesSchema>;
export type Regression = Static<typeof RegressionSchema>;
export type JobWide = Static<typeof JobWideSchema>;
export type SummaryMfu = Static<typeof SummaryMfuSchema>;
