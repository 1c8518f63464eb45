import { Type, type Static } from '@sinclair/typebox';
import { THROTTLE_REASON_NAMES } from '../model/gpu.js';
import { PEAK_DTYPES } from '../model/gpu-peaks.js';
import { CaptureRecordSchema } from './profile.js';
import { StragglerSchema, type Straggler } from '../model/straggler.js';
import { CAUSES, EvidenceSchema, LEVELS, LIMITERS, VERDICTS, type Evidence } from '../model/verdict.js';
import { Bool, Count, CountsBy, Keys, Names, Nullable, Num, NumOrNull, OptionalKeys, Str, StrOrNull, Time } from './schema.js';
import { JobStopStateSchema, RankStallStateSchema } from './stall-state.js';

/**
 * The body of `GET /v1/state`, which every `snapshot` and `update` frame of `ws /v1/stream` carries
 * whole (src/protocol/stream.ts): one schema that is both the validator (see parse.ts) and, through
 * `Static`, the type the sidecar must produce and the viewer reads. Described field by field, with
 * units, in docs/protocol.md ("State"), which is generated from the descriptions here.
 *
 * Numbers that can be `null` are `null` when they were not measured: the source does not report
 * them, or there is nothing yet to compute them from. Never a made-up zero.
 *
 * Objects may gain fields within a version: readers ignore the fields they do not know. A change that
 * removes, renames or retypes a field is a new version (STATE_VERSION, and the stream's STREAM_VERSION).
 */

/** The model's shapes that the state carries, written once there as schemas. */
export { EvidenceSchema, StragglerSchema, type Evidence, type Straggler };

export const STATE_VERSION = 1;
export const STATE_SCHEMA = `stepscope.state/v${STATE_VERSION}` as const;

export const PHASES = ['data', 'h2d', 'compute', 'other'] as const;

// ---------------------------------------------------------------------------------------------------
// Names

export const VerdictSchema = Names(VERDICTS, { description: 'a verdict (see docs/verdicts.md)' });
export const CauseSchema = Type.Union([...CAUSES.map((cause: (typeof CAUSES)[number]) => Type.Literal(cause)), Type.Null()], {
  description: 'what lies behind the verdict, null where the verdict has no cause (see docs/verdicts.md)',
});
export const ThrottleReasonNameSchema = Names(THROTTLE_REASON_NAMES, { description: 'an NVML clock-event (throttle) reason' });

// ---------------------------------------------------------------------------------------------------
// Sidecar health

export const CollectorHealthSchema = Type.Object(
  {
    name: Str('the collector: nvidia-smi, dcgm, sim, host'),
    state: Names(['starting', 'ok', 'failing', 'stopped'] as const, { description: 'starting until its first sample; failing while it errs (and restarts)' }),
    samples: Count('samples delivered since it started'),
    lastSampleAt: NumOrNull('ms since the epoch (sidecar clock) of its last sample; null before the first'),
    lastError: StrOrNull('its last error, null while it works'),
    restarts: Count('times its child process was restarted (0 for the polling collectors)'),
  },
  { description: 'how a counter collector fares' },
);

export const IngestStatsSchema = Type.Object(
  {
    connections: Count('hook connections open now'),
    connectionsTotal: Count('hook connections accepted since the sidecar started'),
    frames: Count('frames received from hooks'),
    records: Count('step records received'),
    duplicates: Count('step records received again (resent after a reconnect) and not counted twice'),
    rejected: CountsBy('connections closed for a bad frame or a limit, by websocket close code'),
    limited: CountsBy('connections closed for a limit, by limit'),
    implausible: CountsBy('step records (steps) and counter samples (counters) left out and acknowledged because they lie where the rank\'s clock could not put them'),
  },
  { description: 'what the hooks sent since the sidecar started' },
);

export const JournalHealthSchema = Type.Object(
  {
    ok: Bool('false while journal writes fail or the journal is full'),
    reason: StrOrNull('why it is not ok, null when it is'),
    writeErrors: Count('writes that failed since the sidecar started'),
    lastError: StrOrNull('the last write error, null if none'),
    bytes: Num('bytes on disk'),
    maxBytes: Num('the most bytes it may hold (--journal-max-bytes)'),
    segments: Count('segment files on disk'),
    checkpoints: Count('checkpoints written since the sidecar started'),
    lastCheckpointAt: NumOrNull('ms since the epoch of the last checkpoint; null before the first'),
    lastCheckpointMs: NumOrNull('ms the last checkpoint took to write; null before the first'),
    lastCheckpointBytes: NumOrNull('bytes of the last checkpoint; null before the first'),
    givenUp: CountsBy('entries not journaled to stay under the cap, by kind (counter samples first; never steps)'),
    replay: Nullable(
      Type.Object({
        entries: Count('entries replayed'),
        skipped: Count('entries skipped'),
        problems: Count('damaged or unreadable stretches met'),
        ms: Num('ms the replay took'),
      }),
      { description: 'what the replay at start-up read; null if there was none' },
    ),
  },
  { description: 'the journal (--out) and how it fares' },
);

export const GpuReadingSchema = Type.Object(
  {
    index: Num('the GPU index as its source numbers it'),
    uuid: StrOrNull('GPU (or MIG instance) UUID'),
    name: StrOrNull('product name'),
    at: Time('when this reading was taken'),
    util_gpu: NumOrNull('utilization, percent 0..100 (none on a MIG instance)'),
    util_mem: NumOrNull('memory-controller utilization, percent 0..100'),
    sm_clock_mhz: NumOrNull('SM clock, MHz'),
    sm_clock_max_mhz: NumOrNull('maximum SM clock, MHz'),
    mem_clock_mhz: NumOrNull('memory clock, MHz'),
    temp_c: NumOrNull('temperature, °C'),
    power_w: NumOrNull('power draw, W'),
    power_limit_w: NumOrNull('power limit, W'),
    mem_used_mib: NumOrNull('memory used, MiB'),
    mem_total_mib: NumOrNull('memory in all, MiB'),
    pstate: StrOrNull('performance state, P0..P15'),
    throttle_reasons: Type.Array(ThrottleReasonNameSchema, { description: 'clock-event (throttle) reasons active now; empty when none or not reported' }),
    sm_active: NumOrNull("share of time SMs were active, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    tensor_active: NumOrNull("share of time tensor cores were active, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    key: Str('what tells this device from the others: its UUID, else (a MIG instance DCGM names by its physical GPU) parent UUID and instance ids, else its index'),
    parent_uuid: StrOrNull("a MIG instance's physical GPU UUID; null for a whole GPU"),
    gpu_instance_id: NumOrNull("a MIG instance's GPU instance id; null for a whole GPU"),
    compute_instance_id: NumOrNull("a MIG instance's compute instance id; null for a whole GPU or where the source does not say"),
    mig_profile: StrOrNull("a MIG instance's profile, such as 3g.40gb; null for a whole GPU or where the source does not say"),
    processes: Nullable(Type.Array(GpuProcessSchema()), {
      description: "compute processes on the GPU at the latest nvidia-smi reading (a MIG instance: on its physical GPU), the largest first; null where not measured (DCGM and the hook's NVML list none)",
    }),
  },
  { description: "a GPU's latest reading" },
);

function GpuProcessSchema() {
  return Type.Object({
    pid: Count('process id, in the pid namespace of the sidecar\'s nvidia-smi'),
    name: Str('process name as the driver gives it'),
    used_mib: NumOrNull('GPU memory it holds, MiB; null where the driver does not say'),
  });
}

export const HostReadingSchema = Type.Object(
  {
    at: Time('when this reading was taken'),
    cpu_pct: NumOrNull('CPU busy, percent 0..100 of all CPUs (iowait counts as idle)'),
    cpu_per_core_pct: Type.Array(Type.Number(), { description: 'CPU busy per online CPU, percent, in CPU-number order; empty before there is a rate' }),
    iowait_pct: NumOrNull('CPU time waiting for I/O, percent'),
    steal_pct: NumOrNull('CPU time stolen by the hypervisor, percent'),
    load1: NumOrNull('load average over 1 minute'),
    load5: NumOrNull('load average over 5 minutes'),
    load15: NumOrNull('load average over 15 minutes'),
    mem_used_bytes: NumOrNull('memory used, bytes'),
    mem_total_bytes: NumOrNull('memory in all, bytes'),
    mem_available_bytes: NumOrNull('memory available, bytes'),
    disk_read_bps: NumOrNull('whole disks read, bytes/s'),
    disk_write_bps: NumOrNull('whole disks written, bytes/s'),
    net_rx_bps: NumOrNull('received on every interface but lo, bytes/s'),
    net_tx_bps: NumOrNull('sent on every interface but lo, bytes/s'),
  },
  { description: "the host's latest reading" },
);

export const CountersStateSchema = Type.Object(
  {
    gpu_source: Str('where GPU counters come from: dcgm, nvidia-smi, hook (NVML in the hook), sim, none'),
    gpu_source_reason: Str('why that source, in words'),
    gpu_health: Nullable(CollectorHealthSchema, {
      description:
        "the GPU collector's health; where the hooks' readings were taken because the DCGM exporter given by --dcgm-url gave nothing readable, that exporter's (failing, with what it serves instead); null when no collector runs in the sidecar",
    }),
    host_health: Nullable(CollectorHealthSchema, { description: "the host collector's health; null when none runs" }),
    gpus: Type.Array(GpuReadingSchema, { description: 'every GPU seen, with its latest reading' }),
    host: Nullable(HostReadingSchema, { description: "the host's latest reading; null before the first" }),
  },
  { description: 'GPU and host counters' },
);

// ---------------------------------------------------------------------------------------------------
// A rank's window

export const BreakdownSchema = Keys(PHASES, Type.Number(), {
  description: 'shares of step time (0..1, summing to 1) in data wait, host-to-device copies, compute, and everything else',
});

export const GpuWindowSchema = Type.Object(
  {
    index: Num('the GPU index'),
    uuid: StrOrNull('GPU UUID'),
    key: Type.Optional(Str("the matched device's key, as counters.gpus[].key (tells MIG slices apart where DCGM gives them no UUID); absent from older sidecars")),
    name: StrOrNull('product name'),
    matched_by: Names(['uuid', 'cuda-visible-devices', 'local-rank'] as const, { description: "how the rank's GPU was found" }),
    samples: Count('GPU samples in the window'),
    util_mean: NumOrNull('mean utilization, percent'),
    util_min: NumOrNull('lowest utilization, percent'),
    sm_clock_mhz_mean: NumOrNull('mean SM clock, MHz'),
    sm_clock_max_mhz: NumOrNull('maximum SM clock, MHz'),
    sm_clock_frac_mean: NumOrNull('mean SM clock as a share of its maximum, 0..1'),
    sm_clock_frac_min: NumOrNull('lowest SM clock as a share of its maximum, 0..1'),
    throttle_share: OptionalKeys(THROTTLE_REASON_NAMES, Type.Number(), {
      description: "share of the window's samples (0..1) in which each reason was active; reasons never active are left out",
    }),
    throttle_unchecked: StrOrNull('why throttling cannot be judged from these samples (no clock-event reasons, no maximum clock); null when it can'),
    throttle_filled: StrOrNull(
      "the throttle signals the GPU source lacked (the default DCGM exporter has no clock-event reasons, maximum SM clock or power limit) and where they were taken from instead: the sidecar's nvidia-smi or the hooks' NVML readings, matched by GPU UUID; null where none was",
    ),
    power_w_mean: NumOrNull('mean power draw, W'),
    power_limit_w: NumOrNull('power limit, W'),
    power_frac_mean: NumOrNull('mean power draw as a share of the limit, 0..1'),
    temp_c_max: NumOrNull('highest temperature, °C'),
    mem_used_mib_max: NumOrNull('most memory used, MiB'),
    mem_total_mib: NumOrNull('memory in all, MiB'),
    mem_used_frac: NumOrNull('most memory used as a share of all, 0..1'),
    sm_active_mean: NumOrNull("mean share of time SMs were active, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    sm_occupancy_mean: NumOrNull("mean share of warp slots occupied, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    tensor_active_mean: NumOrNull("mean share of time tensor cores were active, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    dram_active_mean: NumOrNull("mean share of time the memory interface was busy, 0..1 (DCGM's profiling fields, or NVML GPM through the hook)"),
    profiling_filled: Type.Optional(
      StrOrNull(
        "the profiling activities the GPU source lacked (nvidia-smi and the default DCGM exporter have none) and where they were taken from instead: the hooks' NVML GPM readings (Hopper and newer), matched by GPU UUID; null where none was; absent from older sidecars",
      ),
    ),
    latest: Type.Object(
      {
        at: Time('when it was taken'),
        util: NumOrNull('utilization, percent'),
        sm_clock_mhz: NumOrNull('SM clock, MHz'),
        temp_c: NumOrNull('temperature, °C'),
        throttle_reasons: Type.Array(ThrottleReasonNameSchema, { description: 'reasons active' }),
      },
      { description: 'the latest sample in the window' },
    ),
    other_processes: Nullable(
      Type.Object({
        scope: Names(['gpu', 'physical-gpu'] as const, { description: 'gpu: listed on this GPU; physical-gpu: on the physical GPU of this MIG instance (nvidia-smi does not say which slice)' }),
        job_pid_seen: Bool("whether a rank's pid was among the GPU's processes; false: the ranks' pids are in another pid namespace than nvidia-smi's, so the job's own process may be among those listed"),
        processes: Type.Array(GpuProcessSchema(), { description: 'the largest first' }),
        used_mib: NumOrNull('what they hold together, MiB; null where the driver does not say'),
      }),
      { description: "compute processes on this GPU that are not the job's ranks (nvidia-smi only); null where not measured (DCGM, the hook)" },
    ),
  },
  { description: "the rank's GPU over the window" },
);

export const HostWindowSchema = Type.Object(
  {
    samples: Count('host samples in the window'),
    cpu_pct_mean: NumOrNull('mean CPU busy, percent'),
    iowait_pct_mean: NumOrNull('mean iowait, percent'),
    steal_pct_mean: NumOrNull('mean steal, percent'),
    load1: NumOrNull('latest 1-minute load average'),
    mem_used_frac: NumOrNull('latest memory used as a share of all, 0..1'),
    cpu_pressure_pct: NumOrNull('PSI: percent of the time some task waited for CPU; null without PSI'),
    memory_pressure_pct: NumOrNull('PSI: percent of the time some task stalled on memory (reclaim, swap-in); null without PSI'),
    top_consumers: Nullable(
      Type.Object({
        visible: Names(['node', 'pod'] as const, {
          description: "node: the sidecar sees every process on the node; pod: only its own pid namespace's (a pod without hostPID), so others on the node are not seen",
        }),
        truncated: Bool('procfs held more processes than were read (at most 2048 a sample, in at most 150 ms): a busy one may be missing'),
        job_seen: Bool("the job's own processes were among the busiest read; false for a busy job: its pids are in another pid namespace than the sidecar's, and those listed may include its own"),
        processes: Type.Array(
          Type.Object({ pid: Count("process id, in the sidecar's pid namespace"), name: Str('its comm (15 characters at most)'), cores: Num('CPU it used since the previous sample, cores') }),
          { description: 'the busiest first, at most 5' },
        ),
      }),
      { description: "the busiest processes outside the job's process trees (its ranks' pids and everything below them); null where the sidecar cannot read /proc/<pid>" },
    ),
  },
  { description: 'the host over the window' },
);

export const ProcessWindowSchema = Type.Object(
  {
    seconds: Num('seconds between the two process samples the rates come from; 0 with one sample'),
    cpu_main_cores: NumOrNull('CPU used by the training process, cores'),
    cpu_workers_cores: NumOrNull('CPU used by its DataLoader workers, cores'),
    workers: NumOrNull('DataLoader worker processes'),
    rss_bytes: NumOrNull('resident memory of the process and its workers, bytes'),
    cgroup_quota_cores: NumOrNull("the container's CPU quota, cores; null without a quota"),
    cgroup_usage_cores: NumOrNull('CPU used by the whole container, cores'),
    cgroup_throttled_share: NumOrNull('share of CFS periods (0..1) in which the container was throttled'),
    cgroup_throttled_s_per_s: NumOrNull('seconds throttled per second'),
    train_cpu_cores: Type.Optional(NumOrNull("the training thread's CPU, cores, over the window's process samples")),
    train_wait_share: Type.Optional(NumOrNull('share of the time the training thread waited for a CPU (run queue), 0..1, over the window; null unmeasured')),
  },
  { description: "the rank's process as its hook samples it; rates need two samples" },
);

export const CommWindowSchema = Type.Object(
  {
    steps: Count('steps in the window that measured their collectives'),
    share: Num('time inside collectives as a share of those steps, 0..1 (overlaps compute)'),
    wait_share: Num('time the training thread waited in collectives as a share of step time, 0..1: what communication costs'),
    bytes_per_s: NumOrNull('bytes moved per second spent in collectives: their effective bandwidth'),
  },
  { description: "the rank's collectives (torch.distributed), as its hook measures them" },
);

export const MemoryWindowSchema = Type.Object(
  {
    device: NumOrNull('CUDA device index'),
    allocated_bytes: NumOrNull('memory held by tensors, bytes (latest)'),
    reserved_bytes: NumOrNull('memory the caching allocator holds, bytes (latest)'),
    peak_allocated_bytes: NumOrNull('highest allocated since the process started, bytes'),
    total_bytes: NumOrNull("the device's memory, bytes"),
    reserved_frac: NumOrNull("reserved as a share of the device's memory, 0..1"),
    fragmentation: NumOrNull('inactive split blocks as a share of reserved, 0..1'),
    alloc_retries: NumOrNull('allocation retries (cache flushed and synchronised) in the window'),
    ooms: NumOrNull('out-of-memory errors in the window'),
    growth_bytes_per_s: NumOrNull('growth of allocated memory over the last 10 minutes, bytes a second; null with under 2 minutes of samples'),
    exhausted_in_s: NumOrNull("at that rate, seconds until the peak reaches the device's memory; null when not growing"),
  },
  { description: "the framework's allocator on the rank's device, as its hook reads it" },
);

export const LostShareSchema = Type.Object(
  {
    share: Num('share of step time lost to it over the window, 0..1'),
    low: Num("the lower end of its one-sided 95% confidence interval over the window's slices of time, 0..1: what the rules weigh (docs/verdicts.md)"),
  },
  { description: 'what a limiter cost over the window' },
);

export const WindowLostSchema = Type.Object(
  {
    slices: Count("slices of time (250 ms) with steps in the window: the bound's sample; with fewer than 2 the bound is the share"),
    input: LostShareSchema,
    transfer: LostShareSchema,
    host: LostShareSchema,
    communication: Nullable(LostShareSchema, { description: 'null where the hook does not measure collectives' }),
  },
  { description: 'the share of step time each limiter measured from the steps cost over the window, with its lower bound' },
);

export const RankWindowSchema = Type.Object(
  {
    from: Time('start of the window'),
    to: Time('end of the window (now)'),
    seconds: Num('length of the window, s: --window, longer (up to 60 s) for slow steps'),
    steps: Count('steps that ended in the window'),
    step_ms_mean: NumOrNull('mean step time, ms; null without steps'),
    step_ms_p50: NumOrNull('median step time, ms'),
    step_ms_p90: NumOrNull('90th percentile step time, ms'),
    samples_per_s: NumOrNull('samples a second; null when the hook does not count samples'),
    breakdown: Nullable(BreakdownSchema, { description: "the window's steps' phase shares (0..1); null without steps" }),
    gpu_idle_share: NumOrNull('GPU idle between steps as a share of step time, 0..1 (CUDA timing only)'),
    eval_share: NumOrNull('evaluation inside the loop as a share of step time, 0..1 (a part of "other"); null where the hook does not measure it'),
    gpu: Nullable(GpuWindowSchema, { description: "the rank's GPU over the window; null when no GPU could be matched or no sample came" }),
    host: Nullable(HostWindowSchema, { description: 'the host over the window; null without host samples' }),
    process: Nullable(ProcessWindowSchema, { description: "the rank's process; null without process samples" }),
    comm: Nullable(CommWindowSchema, { description: "the rank's collectives; null when its hook does not measure them" }),
    memory: Nullable(MemoryWindowSchema, { description: "the rank's allocator; null without memory samples (no CUDA)" }),
    lost: Nullable(WindowLostSchema, { description: 'what each limiter cost over the window; null without steps' }),
  },
  { description: "the rank's recent steps lined up with its GPU's, the host's and its process's counters" },
);

// ---------------------------------------------------------------------------------------------------
// Verdicts

export const RecommendationSchema = Type.Object(
  {
    id: Str('a stable name for the advice'),
    text: Str('what to do, in words'),
    because: Type.Optional(Str('the fact about this job and machine the advice was conditioned on ("2.1 cores idle: the host 47% busy of 4"); absent in summaries before it')),
  },
  { description: 'what to do about a verdict' },
);

export const LimiterCostSchema = Type.Object(
  {
    limiter: Names(LIMITERS, { description: 'input (starvation), transfer (copies), host (outside the phases), communication (waiting in collectives), throttle (low clocks)' }),
    share: Num('share of step time it cost, 0..1'),
    low: Num('the lower bound of that share the level is judged by (over the window\'s slices; over the job, the time-weighted mean of the windows\' bounds), 0..1'),
    level: Names(LEVELS, { description: "moderate: from 5% of step time; high: at its verdict's bar (20%; host 25%, throttle 10%)" }),
  },
  { description: 'a limiter that costs at least 5% of step time' },
);

export const MfuSchema = Type.Object(
  {
    mfu: NumOrNull("model FLOPs utilization: the step's FLOPs over its time, as a share of the GPU's dense peak for its dtype; null: not measured (see text)"),
    flops_per_step: Num('FLOPs of one training step, from the hook (`model.flops_per_step`)'),
    flops_from: StrOrNull('"flop_counter" (torch.utils.flop_counter on one step) or "user" (scope.set_flops_per_step)'),
    step_ms: NumOrNull('the step time it is over, ms (live: the window mean; summary: the median step)'),
    gpu: StrOrNull("the GPU model whose peak is used (the peak table's name), or the rank's GPU name where the table has none"),
    dtype: Nullable(Type.Union(PEAK_DTYPES.map((d) => Type.Literal(d))), { description: "the dtype the step's math runs in, from the stack fingerprint (autocast's, else TF32 or FP32 by the matmul precision)" }),
    peak_tflops: NumOrNull("the GPU's dense peak for that dtype, TFLOP/s (datasheet; src/model/gpu-peaks.ts)"),
    text: Str('"31% MFU (bf16 peak 989 TFLOP/s, H100 SXM)", or "MFU not measured: <why>"'),
  },
  { description: "a rank's MFU, where its hook gave the FLOPs of a step" },
);
export type Mfu = Static<typeof MfuSchema>;

export const FixEstimateSchema = Type.Object(
  {
    cause: CauseSchema,
    limiter: Names(LIMITERS, { description: "the limiter whose lost time it explains" }),
    gain: NumOrNull('share of step time that removing it would give back, 0..1; null where that depends on something not measured (see unknown)'),
    upto: Num("the most removing it could give back: all of its limiter's lost share (Amdahl), 0..1"),
    basis: Str('the facts the estimate rests on, in words'),
    unknown: StrOrNull('what the estimate depends on that was not measured; null where it was'),
  },
  { description: 'a cause with what fixing it would buy' },
);

export const FoldedFixSchema = Type.Composite(
  [
    FixEstimateSchema,
    Type.Object({
      verdict: Type.Optional(VerdictSchema),
      seconds: Type.Optional(Num('how long its verdict held over the run, s: the time its estimate is folded over')),
    }),
  ],
  {
    description:
      "a cause with what fixing it would buy, folded over the whole time its verdict held: gain and upto are time-weighted means over that time (0 while the cause was not present), gain null where it was unknown for half the cause's time or more; basis and unknown as last judged. verdict and seconds are absent in summaries written before the fold",
  },
);

export const VerdictStateSchema = Type.Object(
  {
    verdict: VerdictSchema,
    cause: CauseSchema,
    since: Time('when this verdict began'),
    evidence: EvidenceSchema,
    recommendations: Type.Array(RecommendationSchema, { description: 'what to do, most useful first' }),
    limiters: Type.Array(LimiterCostSchema, { description: 'every limiter costing at least 5% of step time, most costly first, the verdict\'s own among them' }),
    causes: Type.Array(FixEstimateSchema, { description: 'the causes whose evidence is present, by what fixing each would buy, most first (the verdict\'s cause is the first); empty where the verdict has none' }),
    pending: Nullable(
      Type.Object({
        verdict: VerdictSchema,
        cause: CauseSchema,
        since: Time('since when it holds'),
      }),
      { description: 'a different verdict waiting out its hold time; null if none' },
    ),
  },
  { description: 'a verdict in force' },
);

export const TimelineSegmentSchema = Type.Object(
  {
    start_s: Num("seconds from the job's start"),
    end_s: Num("seconds from the job's start; the last segment ends now"),
    verdict: VerdictSchema,
    cause: CauseSchema,
  },
  { description: 'a stretch of time one verdict held' },
);

const BaselineAndCurrent = (description: string) =>
  Type.Object({ baseline: NumOrNull('the baseline run\'s'), current: NumOrNull("this run's") }, { description });

export const ComparisonSchema = Type.Object(
  {
    step_ms: BaselineAndCurrent('mean step time, ms'),
    change_pct: NumOrNull("change of the mean step time, percent of the baseline's"),
    delta_ms: Keys(PHASES, Nullable(Type.Number()), { description: 'ms per step of each phase, this run minus the baseline' }),
    phase_ms: Type.Object(
      {
        baseline: Keys(PHASES, Nullable(Type.Number()), { description: "the baseline's ms per step of each phase" }),
        current: Keys(PHASES, Nullable(Type.Number()), { description: "this run's ms per step of each phase" }),
      },
      { description: 'ms per step of each phase' },
    ),
    grew_most: Nullable(Names(PHASES), { description: 'the phase that grew most; null if none grew' }),
    gpu: Type.Object(
      {
        util_mean: BaselineAndCurrent('mean GPU utilization, percent'),
        sm_clock_frac_mean: BaselineAndCurrent('mean SM clock as a share of its maximum, 0..1'),
      },
      { description: "the GPUs' figures" },
    ),
    verdict: Type.Object(
      {
        baseline: Str("the baseline's verdict"),
        current: Str("this run's verdict"),
        baseline_cause: StrOrNull("the baseline's cause"),
        current_cause: StrOrNull("this run's cause"),
      },
      { description: 'the verdicts' },
    ),
    env_changes: Type.Array(
      Type.Object({
        key: Str('an env key, one level deep (loader.num_workers, stack.amp), or node.<field> of the node inventory'),
        baseline: Type.Unknown({ description: "the baseline's value, null if unset" }),
        current: Type.Unknown({ description: "this run's value, null if unset" }),
        effect: Type.Optional(Type.Union([Type.Literal('large'), Type.Literal('medium'), Type.Literal('small'), Type.Literal('unknown')], { description: 'the usual effect of such a change on speed (docs/stack.md); absent in comparisons written before it' })),
        direction: Type.Optional(Type.Union([Type.Literal('slower'), Type.Literal('faster'), Type.Literal('either')], { description: 'which way such a change usually moves speed' })),
        reason: Type.Optional(Str('why it matters, in words')),
      }),
      { description: 'what differs in the environment and on the node, the likeliest to explain the difference first' },
    ),
    text: Str('the comparison, in words'),
  },
  { description: 'this run against the --baseline summary' },
);

// ---------------------------------------------------------------------------------------------------
// Jobs and ranks

export const RankStateSchema = Type.Object(
  {
    rank: Count('the rank (RANK)'),
    local_rank: Count('its rank on its node (LOCAL_RANK)'),
    host: Str('its host name'),
    pid: Count('its process id'),
    sessions: Count('hook sessions (process starts) seen for it'),
    connected: Bool('its hook is connected now'),
    ended: Bool('its hook said `end`'),
    steps: Count('steps received in all'),
    last_step: Type.Integer({ description: "the last step's number; -1 before the first" }),
    last_step_at: Nullable(Type.String({ format: 'date-time' }), { description: 'when its last step ended; null before the first' }),
    dropped: Count('step records the hook dropped (its queue was full)'),
    duplicates: Count('step records received twice'),
    samples: Count('samples in all, where the hook counts them'),
    clock_offset_ms: Num("its clock's offset from the sidecar's, ms"),
    phase_s: Keys(PHASES, Type.Number(), { description: 'seconds spent in each phase, in all' }),
    breakdown: Keys(PHASES, Type.Number(), { description: 'share of all its step time (0..1) in each phase; all 0 before the first step' }),
    gpu_phase_s: Type.Object(
      {
        timed_steps: Count('steps timed on the GPU (CUDA timing)'),
        h2d: Num('GPU time in host-to-device copies, s'),
        compute: Num('GPU time in compute, s'),
        idle_steps: Count('steps with a measured GPU idle gap'),
        idle: Num('GPU idle between steps, s'),
      },
      { description: 'what CUDA timing measured on the GPU, in all' },
    ),
    step_ms: Type.Object(
      {
        last: NumOrNull("the last step's time, ms"),
        mean: NumOrNull('mean over the recent steps, ms'),
        p50: NumOrNull('median of the recent steps, ms'),
        p90: NumOrNull('90th percentile of the recent steps, ms'),
      },
      { description: 'step times of its recent steps (each null before the first step)' },
    ),
    recent_step_ms: Type.Array(Type.Number(), { description: 'its last (up to 64) step times, ms, oldest first' }),
    env: Type.Record(Type.String(), Type.Unknown(), { description: 'what its hook reported of the environment (framework, loader settings, devices)' }),
    window: RankWindowSchema,
    verdict: Nullable(VerdictStateSchema, { description: "the rank's verdict; null before the first or once ended" }),
    straggler: Bool("it is the job's straggler"),
    stall: Type.Optional(Nullable(RankStallStateSchema, { description: 'whether it steps, and where it is if it stopped; null where it was not judged (an ended run); absent from older sidecars' })),
    mfu: Type.Optional(Nullable(MfuSchema, { description: "its MFU over the window; null where its hook gave no FLOP count (scope.set_flops_per_step, scope.count_flops); absent from older sidecars" })),
  },
  { description: 'one rank of a job' },
);

export const WasteEntrySchema = Type.Object({
  cause: Names(LIMITERS, { description: 'what the time was lost to: input (starvation), transfer (copies), host (outside the phases), communication (waiting in collectives), throttle (low clocks)' }),
  gpu_seconds: Num('GPU-seconds lost to it'),
  share: Num("as a share of the job's GPU time, 0..1"),
  energy_j: NumOrNull("joules the GPUs drew during that time; null where power is not measured"),
});

export const WasteSchema = Type.Object(
  {
    gpu_seconds: Num("GPU-seconds the job's ranks spent stepping (one GPU per rank)"),
    lost_gpu_seconds: Num('GPU-seconds lost to the causes below'),
    lost_share: NumOrNull('lost as a share of the GPU time, 0..1; null before any'),
    by_cause: Type.Array(WasteEntrySchema, { description: 'most costly first' }),
    price_per_gpu_hour: NumOrNull('--gpu-hour-price; null when not given'),
    lost_cost: NumOrNull('what the lost time cost at that price; null without a price'),
  },
  { description: 'GPU time lost so far, from the lost shares the verdict rules compute every tick' },
);

export const JobStateSchema = Type.Object(
  {
    job: Str('the job name (STEPSCOPE_JOB)'),
    run: Type.Integer({ minimum: 1, description: '1 for the first run of this job name, one more for each run after one had ended' }),
    world_size: Type.Integer({ minimum: 1, description: 'ranks in the job (WORLD_SIZE)' }),
    started_at: Time("the job's start: its first step's, else its first hello"),
    duration_s: Num('seconds from its start to now, or to its last step once ended'),
    connected: Bool('some rank is connected'),
    ended: Bool('the job ended'),
    end_reason: Nullable(Names(['all-ranks-ended', 'disconnected', 'shutdown'] as const), { description: 'why it ended; null while it runs' }),
    steps: Count('steps of all its ranks'),
    dropped: Count('records its hooks dropped'),
    duplicates: Count('records received twice'),
    ranks: Type.Array(RankStateSchema, { description: 'its ranks that report to this sidecar, by rank' }),
    verdict: Nullable(VerdictStateSchema, { description: "the job's verdict; null before the first or once ended" }),
    straggler: Nullable(StragglerSchema, { description: 'the rank holding the others back; null if none does' }),
    timeline: Type.Array(TimelineSegmentSchema, { description: "the job's verdicts over time, oldest first" }),
    baseline: Nullable(ComparisonSchema, { description: 'this run against the --baseline summary; null without --baseline' }),
    waste: Nullable(WasteSchema, { description: 'GPU time lost so far, by cause; null before the first verdict' }),
    captures: Type.Optional(Type.Array(CaptureRecordSchema, { description: 'its deep captures (torch.profiler windows), oldest first; absent where none was asked for' })),
    stop: Type.Optional(Nullable(JobStopStateSchema, { description: 'while the job does not step (it hung, a rank stalled or went): on whom it waits; an ended run keeps the stop it ended in; null while it steps; absent from older sidecars' })),
  },
  { description: 'a training job' },
);

// ---------------------------------------------------------------------------------------------------
// The node

/** The node's static inventory, read once at start; the `node` journal entry and the checkpoint hold it by this schema. */
export const NodeInventorySchema = Type.Object(
  {
    cpu_model: Nullable(Type.String({ maxLength: 256 }), { description: 'CPU model, as the kernel names it; null where unknown' }),
    cores_logical: Nullable(Type.Integer({ minimum: 1 }), { description: 'logical CPUs (hardware threads) of the node' }),
    cores_physical: Nullable(Type.Integer({ minimum: 1 }), { description: 'physical cores of the node' }),
    memory_bytes: Nullable(Type.Number({ minimum: 0 }), { description: 'memory of the node, bytes' }),
    gpu_models: Nullable(
      Type.Array(Type.Object({ name: Type.String({ maxLength: 256, description: 'GPU model' }), count: Type.Integer({ minimum: 1, description: 'how many the node has' }) }), { maxItems: 64 }),
      { description: 'GPU models and how many of each (nvidia-smi -L); null without nvidia-smi on the node' },
    ),
    gpu_count: Nullable(Type.Integer({ minimum: 0 }), { description: 'physical GPUs of the node; null without nvidia-smi' }),
    driver_version: Nullable(Type.String({ maxLength: 64 }), { description: 'NVIDIA driver version; null without nvidia-smi' }),
    cuda_version: Nullable(Type.String({ maxLength: 64 }), { description: 'the highest CUDA version the driver supports (nvidia-smi); null without it' }),
  },
  { description: 'the node the sidecar runs on, read once at its start (systeminformation, nvidia-smi)' },
);

export const NodeSummarySchema = Type.Composite(
  [
    NodeInventorySchema,
    Type.Object({
      cores_per_gpu: NumOrNull(
        "logical cores per GPU: in the state, over the node's GPUs; in a summary, over the GPUs the job's ranks ran on; null where either is unknown",
      ),
    }),
  ],
  { description: 'the node the sidecar runs on, read once at its start (systeminformation, nvidia-smi), with its cores per GPU' },
);

// ---------------------------------------------------------------------------------------------------
// The state

export const SidecarStateSchema = Type.Object(
  {
    schema: Type.Literal(STATE_SCHEMA, { description: 'this schema and its version' }),
    version: Str("the sidecar's version"),
    now: Time('when the state was read'),
    uptime_s: Num('seconds since the sidecar started'),
    window_s: Num('the --window, s'),
    ingest: IngestStatsSchema,
    journal: Nullable(JournalHealthSchema, { description: 'the journal; null without --out' }),
    counters: CountersStateSchema,
    node: Nullable(NodeSummarySchema, { description: 'the node, read once at start; null before it is read' }),
    jobs: Type.Array(JobStateSchema, { description: 'jobs seen, live and ended' }),
  },
  { description: 'the body of GET /v1/state' },
);

export type Breakdown = Static<typeof BreakdownSchema>;
export type CollectorHealth = Static<typeof CollectorHealthSchema>;
export type IngestStats = Static<typeof IngestStatsSchema>;
export type JournalHealth = Static<typeof JournalHealthSchema>;
/** A GPU as last read, in the state (a GPU over a whole run is the summary's SummaryGpu). */
export type GpuReading = Static<typeof GpuReadingSchema>;
export type HostReading = Static<typeof HostReadingSchema>;
export type CountersState = Static<typeof CountersStateSchema>;
export type GpuWindow = Static<typeof GpuWindowSchema>;
export type HostWindow = Static<typeof HostWindowSchema>;
export type ProcessWindow = Static<typeof ProcessWindowSchema>;
export type RankWindow = Static<typeof RankWindowSchema>;
export type Recommendation = Static<typeof RecommendationSchema>;
export type VerdictState = Static<typeof VerdictStateSchema>;
export type LimiterCost = Static<typeof LimiterCostSchema>;
export type FixEstimate = Static<typeof FixEstimateSchema>;
export type FoldedFix = Static<typeof FoldedFixSchema>;
export type WindowLost = Static<typeof WindowLostSchema>;
export type LostShare = Static<typeof LostShareSchema>;
export type CommWindow = Static<typeof CommWindowSchema>;
export type MemoryWindow = Static<typeof MemoryWindowSchema>;
/** The node's inventory, as read. */
export type NodeInventory = Static<typeof NodeInventorySchema>;
/** The node as the state and a summary report it: its inventory with the cores per GPU. */
export type NodeSummary = Static<typeof NodeSummarySchema>;
export type TimelineSegment = Static<typeof TimelineSegmentSchema>;
export type Comparison = Static<typeof ComparisonSchema>;
export type RankState = Static<typeof RankStateSchema>;
export type JobState = Static<typeof JobStateSchema>;
export type SidecarState = Static<typeof SidecarStateSchema>;
export type Waste = Static<typeof WasteSchema>;
export type WasteEntry = Static<typeof WasteEntrySchema>;
