import type { MemoryAt, ProcessAt } from '../store/job-records.js';
import { memoryWindow } from './memory-window.js';
import { percentile, sortedAscending } from '../store/ring.js';
import { commStepsNs, type StepSums } from '../store/step-buckets.js';
import { windowLost } from './limiters.js';
import { breakdownOf, roundBreakdown } from '../store/job-snapshot.js';
import { throttleReasonNames, ThrottleReason, type GpuSample, type ThrottleReasonName } from '../counters/types.js';
import type { HostSample } from '../counters/host.js';
import { largestFirst, type ComputeApp } from '../counters/compute-apps.js';
import { appsOn, gpuKey, type HeldGpuSample } from '../counters/counter-store.js';
import { filledText, signalsOf, throttleUnchecked } from '../counters/coverage.js';
import type { MatchedBy } from './gpu-match.js';
import { round } from '../model/round.js';
import type { CommWindow, GpuWindow, HostWindow, ProcessWindow, RankWindow } from '../protocol/state.js';

/**
 * One rank's steps lined up with its GPU's, the host's and its own process's counters over the
 * same stretch of sidecar time. Pure: everything it needs is passed in.
 */

export type { ProcessAt };

export interface WindowInput {
  from: number;
  to: number;
  steps: StepSums;
  /** The same steps' sums in each slice of time that has some, oldest first (for the limiters' bounds); none: no bounds. */
  slices?: StepSums[];
  /** Durations (ms) of the rank's recent steps that ended in the window. */
  stepMs: number[];
  /** Samples as the store holds them: with the throttle signals a second source filled in, marked. */
  gpu: { samples: HeldGpuSample[]; matchedBy: MatchedBy } | null;
  /** The GPUs' compute processes at the window's end (nvidia-smi), null where none were read. */
  apps?: ComputeApp[] | null;
  /** The pids of the job's ranks, to tell its processes from the others'. */
  jobPids?: ReadonlySet<number>;
  host: HostSample[];
  /** Process samples oldest first; the last two at or before `to` give the rates. */
  process: ProcessAt[];
  /** Allocator samples oldest first (the last 10 minutes give the trend). */
  memory: MemoryAt[];
}

/**
 * A rank's window as the core holds it: the state's RankWindow with its times in ms since the epoch
 * (times stay numbers in the core; outputs/state.ts writes them as ISO times).
 */
export type StepWindow = Omit<RankWindow, 'from' | 'to' | 'gpu'> & { from: number; to: number; gpu: StepGpuWindow | null };
/** The GPU's part of it: the state's GpuWindow with its latest sample's time in ms. */
export type StepGpuWindow = Omit<GpuWindow, 'latest'> & { latest: Omit<GpuWindow['latest'], 'at'> & { at: number } };

/** Compute processes on the rank's GPU that are not the job's: the state's own type (GpuWindow.other_processes). */
export type OtherProcesses = NonNullable<GpuWindow['other_processes']>;

/** The busiest processes outside the job's: the state's own type (HostWindow.top_consumers). */
export type TopConsumers = NonNullable<HostWindow['top_consumers']>;

/** Enough to name the culprits; the rest is in `top`. */
export const TOP_CONSUMERS_KEPT = 5;

type Num = number | null;

const present = (values: Num[]) => values.filter((v): v is number => v !== null && Number.isFinite(v));
const mean = (values: Num[]): Num => {
  const xs = present(values);
  return xs.length ? round(xs.reduce((a, b) => a + b, 0) / xs.length, 4) : null;
};
const min = (values: Num[]): Num => {
  const xs = present(values);
  return xs.length ? Math.min(...xs) : null;
};
const max = (values: Num[]): Num => {
  const xs = present(values);
  return xs.length ? Math.max(...xs) : null;
};
const ratio = (a: Num, b: Num): Num => (a !== null && b !== null && b > 0 ? round(a / b, 4) : null);
const lastOf = <T>(values: T[], pick: (v: T) => Num): Num => {
  for (let i = values.length - 1; i >= 0; i--) {
    const value = pick(values[i]!);
    if (value !== null) return value;
  }
  return null;
};

export function rankWindow(input: WindowInput): StepWindow {
  const { steps } = input;
  const seconds = (input.to - input.from) / 1000;
  const phaseTotal = steps.dataNs + steps.h2dNs + steps.computeNs + steps.otherNs;
  const sorted = sortedAscending(input.stepMs);
  return {
    from: input.from,
    to: input.to,
    seconds,
    steps: steps.steps,
    step_ms_mean: steps.steps ? round(steps.durNs / steps.steps / 1e6, 3) : null,
    step_ms_p50: sorted.length ? percentile(sorted, 50) : null,
    step_ms_p90: sorted.length ? percentile(sorted, 90) : null,
    samples_per_s: steps.samplesSteps && seconds > 0 ? round(steps.samples / seconds, 1) : null,
    breakdown: phaseTotal ? roundBreakdown(breakdownOf(steps)) : null,
    gpu_idle_share: steps.gpuIdleSteps ? round(steps.gpuIdleNs / steps.durNs, 4) : null,
    eval_share: steps.evalSteps ? round(steps.evalNs / steps.durNs, 4) : null,
    gpu: input.gpu && input.gpu.samples.length ? gpuWindow(input.gpu.samples, input.gpu.matchedBy, otherProcesses(input.apps ?? null, input.gpu.samples.at(-1)!, input.jobPids ?? new Set())) : null,
    host: input.host.length ? hostWindow(input.host, input.jobPids ?? new Set()) : null,
    process: processWindow(input.process, input.from, input.to),
    comm: commWindow(steps),
    memory: memoryWindow(input.memory, input.from, input.to),
    lost: windowLost(steps, input.slices ?? []),
  };
}

function commWindow(steps: StepSums): CommWindow | null {
  if (steps.commSteps === 0 || steps.durNs === 0) return null;
  // Only the steps that measured collectives: a job that turned it on mid-window is not diluted.
  const durNs = commStepsNs(steps);
  return {
    steps: steps.commSteps,
    share: round(steps.commNs / durNs, 4),
    wait_share: round(steps.commWaitNs / durNs, 4),
    bytes_per_s: steps.commNs > 0 && steps.commBytes > 0 ? Math.round(steps.commBytes / (steps.commNs / 1e9)) : null,
  };
}

/** The processes on this GPU (or its physical GPU) that are not the job's own pids. */
export function otherProcesses(apps: readonly ComputeApp[] | null, gpu: Pick<GpuSample, 'uuid' | 'parentUuid'>, jobPids: ReadonlySet<number>): OtherProcesses | null {
  const known = { uuid: gpu.uuid, parentUuid: gpu.parentUuid ?? null };
  const here = appsOn(apps, known);
  if (here === null) return null;
  const others = here
    .filter((app) => !jobPids.has(app.pid))
    .map((app) => ({ pid: app.pid, name: app.name, used_mib: app.usedMiB }))
    .sort(largestFirst((p) => p.used_mib));
  const sizes = present(others.map((p) => p.used_mib));
  return {
    scope: known.parentUuid !== null ? 'physical-gpu' : 'gpu',
    job_pid_seen: here.some((app) => jobPids.has(app.pid)),
    processes: others,
    used_mib: sizes.length ? sizes.reduce((a, b) => a + b, 0) : null,
  };
}

function gpuWindow(samples: HeldGpuSample[], matchedBy: MatchedBy, others: OtherProcesses | null): StepGpuWindow {
  const latest = samples.at(-1)!;
  const clockMax = lastOf(samples, (s) => s.smClockMaxMHz);
  const clockFrac = samples.map((s) => ratio(s.smClockMHz, s.smClockMaxMHz ?? clockMax));
  const powerLimit = lastOf(samples, (s) => s.powerLimitW);
  const memTotal = lastOf(samples, (s) => s.memTotalMiB);
  const memMax = max(samples.map((s) => s.memUsedMiB));
  const withReasons = samples.filter((s) => s.throttleReasons !== null);
  const throttleShare: Partial<Record<ThrottleReasonName, number>> = {};
  for (const name of Object.keys(ThrottleReason) as ThrottleReasonName[]) {
    const active = withReasons.filter((s) => (s.throttleReasons! & ThrottleReason[name]) !== 0).length;
    if (active) throttleShare[name] = round(active / withReasons.length, 4);
  }
  return {
    index: latest.index,
    uuid: latest.uuid,
    key: gpuKey(latest),
    name: latest.name,
    matched_by: matchedBy,
    samples: samples.length,
    util_mean: mean(samples.map((s) => s.utilGpu)),
    util_min: min(samples.map((s) => s.utilGpu)),
    sm_clock_mhz_mean: mean(samples.map((s) => s.smClockMHz)),
    sm_clock_max_mhz: clockMax,
    sm_clock_frac_mean: mean(clockFrac),
    sm_clock_frac_min: min(clockFrac),
    throttle_share: throttleShare,
    throttle_unchecked: throttleUnchecked(signalsOf(samples)),
    throttle_filled: filledText(samples.flatMap((s) => s.filled ?? [])),
    power_w_mean: mean(samples.map((s) => s.powerW)),
    power_limit_w: powerLimit,
    power_frac_mean: mean(samples.map((s) => ratio(s.powerW, s.powerLimitW ?? powerLimit))),
    temp_c_max: max(samples.map((s) => s.tempC)),
    mem_used_mib_max: memMax,
    mem_total_mib: memTotal,
    mem_used_frac: ratio(memMax, memTotal),
    sm_active_mean: mean(samples.map((s) => s.smActive)),
    sm_occupancy_mean: mean(samples.map((s) => s.smOccupancy)),
    tensor_active_mean: mean(samples.map((s) => s.tensorActive)),
    dram_active_mean: mean(samples.map((s) => s.dramActive)),
    profiling_filled: samples.some((s) => s.profilingFrom === 'hook') ? "SM, tensor-pipe and memory activity from the hooks' NVML GPM readings" : null,
    latest: {
      at: latest.at,
      util: latest.utilGpu,
      sm_clock_mhz: latest.smClockMHz,
      temp_c: latest.tempC,
      throttle_reasons: throttleReasonNames(latest.throttleReasons),
    },
    other_processes: others,
  };
}

/**
 * The busiest processes that are not the job's: neither one of its ranks' pids nor below one (its
 * DataLoader workers, compilers, anything it started).
 */
export function topConsumers(samples: readonly HostSample[], jobPids: ReadonlySet<number>): TopConsumers | null {
  const latest = samples.findLast((s) => s.processes !== undefined && s.processes !== null)?.processes;
  if (!latest) return null;
  const mine = (p: { pid: number; ancestors: number[] }) => jobPids.has(p.pid) || p.ancestors.some((a) => jobPids.has(a));
  return {
    visible: latest.visible,
    truncated: latest.truncated,
    job_seen: latest.top.some(mine),
    processes: latest.top
      .filter((p) => !mine(p))
      .slice(0, TOP_CONSUMERS_KEPT)
      .map((p) => ({ pid: p.pid, name: p.name, cores: p.cores })),
  };
}

function hostWindow(samples: HostSample[], jobPids: ReadonlySet<number>): HostWindow {
  const latest = samples.at(-1)!;
  return {
    samples: samples.length,
    cpu_pct_mean: mean(samples.map((s) => s.cpuPct)),
    iowait_pct_mean: mean(samples.map((s) => s.iowaitPct)),
    steal_pct_mean: mean(samples.map((s) => s.stealPct)),
    load1: latest.load1,
    mem_used_frac: ratio(latest.memUsedBytes, latest.memTotalBytes),
    cpu_pressure_pct: mean(samples.map((s) => s.cpuPressure?.somePct ?? s.cpuPressure?.someAvg10 ?? null)),
    memory_pressure_pct: mean(samples.map((s) => s.memoryPressure?.somePct ?? s.memoryPressure?.someAvg10 ?? null)),
    top_consumers: topConsumers(samples, jobPids),
  };
}

function processWindow(samples: ProcessAt[], from: number, to: number): ProcessWindow | null {
  const upTo = samples.filter((s) => s.at <= to);
  const last = upTo.at(-1);
  const previous = upTo.at(-2);
  if (!last) return null;
  const seconds = previous ? (last.at - previous.at) / 1000 : 0;
  const rate = (pick: (s: ProcessAt) => Num, scale = 1): Num => {
    if (!previous || seconds <= 0) return null;
    const a = pick(previous);
    const b = pick(last);
    return a !== null && b !== null && b >= a ? round((b - a) / scale / seconds, 3) : null;
  };
  // The training thread over the whole window (its samples come once a second): steadier than the last second.
  const first = upTo.find((s) => s.at >= from - 1_000 && s.train_wait_s != null && s !== last);
  const span = first ? (last.at - first.at) / 1000 : 0;
  const spanRate = (pick: (s: ProcessAt) => Num): Num => {
    const a = first ? (pick(first) ?? null) : null;
    const b = pick(last) ?? null;
    return a !== null && b !== null && b >= a && span > 0 ? round((b - a) / span, 4) : null;
  };
  const periods = rate((s) => s.cgroup_nr_periods);
  const throttled = rate((s) => s.cgroup_nr_throttled);
  return {
    seconds: round(seconds, 3),
    cpu_main_cores: rate((s) => s.cpu_main_s),
    cpu_workers_cores: rate((s) => s.cpu_workers_s),
    workers: last.workers,
    rss_bytes: last.rss_bytes,
    cgroup_quota_cores: last.cgroup_quota_cores,
    cgroup_usage_cores: rate((s) => s.cgroup_usage_usec, 1e6),
    cgroup_throttled_share: periods !== null && throttled !== null && periods > 0 ? round(throttled / periods, 4) : periods === 0 ? 0 : null,
    cgroup_throttled_s_per_s: rate((s) => s.cgroup_throttled_usec, 1e6),
    train_cpu_cores: spanRate((s) => s.train_cpu_s),
    train_wait_share: ((wait) => (wait === null ? null : Math.min(1, wait)))(spanRate((s) => s.train_wait_s)),
  };
}
