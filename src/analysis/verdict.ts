import type { StepWindow } from './window.js';
import type { Env } from '../protocol/messages.js';
import type { ThrottleReasonName } from '../counters/types.js';
import { LIMITER_WORDS } from '../model/costs.js';
import { LIMITER_OF, type Cause, type CommCause, type ComputeCause, type Evidence, type InputCause, type Limiter, type MemoryCause, type ThrottleCause, type Verdict } from '../model/verdict.js';
import { inputFixes, wholeLimiter, type PresentCause } from './fix-estimate.js';
import { listLimiters, MODERATE } from './limiters.js';
import { recommendationsFor } from './recommendations.js';
import { gpuSharedCause, topConsumersText } from './neighbours.js';
import { envGroup, num, recompileCause } from './stack.js';
import { WARMUP, warmupState } from './warmup.js';
import type { FixEstimate, LimiterCost, LostShare, Recommendation, VerdictState } from '../protocol/state.js';

/**
 * The bottleneck rules: one rank's window in, a verdict with its evidence out. Pure. The rules,
 * their thresholds and the reasoning behind them are in docs/verdicts.md; the numbers live here.
 * The verdicts' and causes' names are in src/model/verdict.ts.
 */

/** What the rules decide for a window: the state's verdict without when it began and what waits (the tracker's). */
export type Judgement = Omit<VerdictState, 'since' | 'pending'>;

export const THRESHOLDS = {
  /** Fewer steps than this in all are still warming up (compilation, autotuning, worker start), unless steady for a few seconds (warmup.ts). */
  warmupSteps: WARMUP.steps,
  /** No step ended for this long (or 3 median steps, if longer): idle. */
  idleMs: 10_000,
  /**
   * Input-bound at 20% of step time lost waiting for data (TF profiler's "highly input-bound",
   * TraceML's critical), whatever the step's length: the share must hold at the lower end of its
   * 95% interval over the window's slices (limiters.ts), so jitter is judged by statistics.
   */
  input: 0.2,
  transfer: 0.2,
  /** Higher than input: some loop overhead outside the phases is normal. */
  host: 0.25,
  /** Time lost to low clocks, as a share of step time. */
  throttle: 0.1,
  /** SM clock below this fraction of its maximum counts as held down... */
  clockFrac: 0.85,
  /** ... when a harmful reason is active in at least this share of the window's samples ... */
  reasonShare: 0.5,
  /** ... and the GPU is busy (%); an idle GPU drops its clocks by design. */
  busyUtil: 50,
  /** Busy and below this fraction with no reason given: clocks set low (application or locked clocks). */
  clocksLowFrac: 0.7,
  clocksLowUtil: 80,
  /** The compute phase with the GPU mostly idle: the CPU side of the model is the limit. */
  computeIdleUtil: 40,
  computeIdleShare: 0.5,
  /** A verdict in force keeps its place until its lost share falls below this fraction of its threshold. */
  stickiness: 0.75,
  /**
   * A first verdict waits while a limiter's share is over its bar but its lower bound is not yet and
   * the window has fewer slices than this, where steps share slices (so the next tick adds one): with
   * 2 or 3 slices the bound is too wide to rule the limiter out, and compute-bound said then would hold.
   */
  firstVerdictSlices: 8,
  /** Causes of input-bound. */
  cgroupThrottledShare: 0.25,
  iowaitPct: 10,
  cpuSaturatedPct: 85,
  workerBusyFrac: 0.8,
  /** Host memory PSI "some" at or above this percent: loads stall on reclaim and swap-in. */
  memoryPressurePct: 10,
  /** A saturated host where this job's own processes use less than this share of the busy cores: contention. */
  contentionJobShare: 0.5,
  /**
   * Loader workers starve the step: the training thread waited for a CPU (run queue) at least this
   * share of the time, while its workers used CPU and the host or the container was under pressure...
   */
  starveWait: 0.1,
  /** ... the workers using at least this much CPU (cores), ... */
  starveWorkerCores: 0.05,
  /** ... and tasks waiting for a CPU at least this share of the time (PSI cpu some, %). */
  starvePressurePct: 20,
  /** Communication-bound when the training thread waits in collectives this share of step time (measured by the hook). */
  communication: 0.2,
  /** A peer that waits less than this fraction of this rank's wait is the one the collectives wait for. */
  slowRankWaitFrac: 0.5,
  /** Memory-bound when the allocator retried (flushed its cache and synchronised) at least this often per step... */
  retriesPerStep: 0.05,
  /** ... and at least this many times in the window. */
  retriesMin: 2,
  /** Causes of memory-bound: inactive split blocks over this share of reserved memory... */
  fragmentation: 0.3,
  /** ... or reserved memory over this share of the device's. */
  nearCapacity: 0.95,
  /** What compute-bound is made of (DCGM profiling counters, 0..1): busy (util %) with SMs mostly idle... */
  launchBoundUtil: 80,
  launchBoundSmActive: 0.3,
  /** ... GPU memory busy this share of the time... */
  dramActive: 0.6,
  /** ... or the tensor pipes nearly idle while the SMs work. */
  tensorIdle: 0.05,
  tensorIdleSmActive: 0.5,
} as const;

/** Each limiter's verdict bar: the share of step time (its lower bound) at which it is the verdict, and its level is high. */
export const LIMITER_BARS: Readonly<Record<Limiter, number>> = {
  input: THRESHOLDS.input,
  transfer: THRESHOLDS.transfer,
  host: THRESHOLDS.host,
  communication: THRESHOLDS.communication,
  throttle: THRESHOLDS.throttle,
};

const HARMFUL_REASONS: Record<Exclude<ThrottleCause, 'clocks-low'>, ThrottleReasonName[]> = {
  thermal: ['HwThermalSlowdown', 'SwThermalSlowdown'],
  power: ['SwPowerCap', 'HwPowerBrakeSlowdown'],
  'hw-slowdown': ['HwSlowdown'],
};

export interface RankContext {
  /** Steps of the rank in all, for warming-up. */
  totalSteps: number;
  /** Its latest step durations (ms), oldest first, while it may be warming up (warmup.ts); absent: steps alone decide. */
  recentStepMs?: number[];
  /** ms since the rank's last step ended, null if none yet. */
  sinceLastStepMs: number | null;
  env: Env;
  /** Cores of the host, when known, for judging worker counts. */
  hostCores: number | null;
  /** The verdict in force, for stickiness. */
  current: Verdict | null;
  /** The other ranks of the job in this tick, for telling a slow rank from a slow collective. */
  peers?: Array<{ rank: number; commWaitShare: number | null; stepMsMean: number | null }>;
  /** CPU cores this job's processes on this host use (every rank's training process and its loader workers); null unknown. */
  jobCpuCores?: number | null;
}

const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits;

function loaderWorkers(env: Env): number | null {
  const loader = env.loader as Record<string, unknown> | undefined;
  return typeof loader?.num_workers === 'number' ? loader.num_workers : null;
}

/** Every cause of input-bound whose evidence is present, the more specific first; `unknown` where none is. */
function inputCauses(window: StepWindow, context: RankContext): Array<PresentCause<InputCause>> {
  const { process, host } = window;
  const present: Array<PresentCause<InputCause>> = [];
  const starving = workersStarveStep(window);
  if (starving) present.push({ cause: 'workers-starve-step', why: starving.why, measured: starving.share });
  if (process?.cgroup_throttled_share != null && process.cgroup_throttled_share >= THRESHOLDS.cgroupThrottledShare) {
    present.push({ cause: 'cgroup-throttled', why: `the container was CPU-throttled in ${pct(process.cgroup_throttled_share)} of CFS periods (limit ${process.cgroup_quota_cores ?? '?'} cores)` });
  }
  if (host?.memory_pressure_pct != null && host.memory_pressure_pct >= THRESHOLDS.memoryPressurePct) {
    present.push({ cause: 'memory-pressure', why: `tasks on the host stalled on memory ${host.memory_pressure_pct.toFixed(0)}% of the time (PSI): the loader waits for reclaim and swap-in` });
  }
  if (host?.iowait_pct_mean != null && host.iowait_pct_mean >= THRESHOLDS.iowaitPct) {
    present.push({ cause: 'io-wait', why: `host CPUs spent ${host.iowait_pct_mean.toFixed(0)}% waiting for I/O` });
  }
  if (host?.cpu_pct_mean != null && host.cpu_pct_mean >= THRESHOLDS.cpuSaturatedPct) {
    // Whose CPU: the job's own processes, or something else on the node (where the hooks measure the job's).
    const busy = context.hostCores === null ? null : (host.cpu_pct_mean / 100) * context.hostCores;
    const own = context.jobCpuCores ?? null;
    if (busy !== null && own !== null && own < THRESHOLDS.contentionJobShare * busy) {
      const others = topConsumersText(window);
      present.push({ cause: 'contention', why: `host CPU ${host.cpu_pct_mean.toFixed(0)}% busy, but this job's processes use only ${own.toFixed(1)} of the ${busy.toFixed(1)} busy cores: something else on this node takes the CPU${others ? `; ${others}` : ''}` });
    } else if (!starving) {
      // (Where the workers starve the step, that is this saturation, measured more closely.)
      const whose = own === null || busy === null ? '' : `, ${own.toFixed(1)} of the ${busy.toFixed(1)} busy cores by this job`;
      present.push({ cause: 'cpu-saturated', why: `host CPU ${host.cpu_pct_mean.toFixed(0)}% busy${whose}` });
    }
  }
  const configured = loaderWorkers(context.env);
  const workers = configured ?? process?.workers ?? null;
  if (starving) {
    // The workers already take the CPU the step needs: more of them is not the fix.
  } else if (workers === 0) {
    const why = configured === 0 ? 'the DataLoader loads in the training process (num_workers=0)' : 'no loader worker processes: data is loaded in the training process';
    present.push({ cause: 'few-workers', why });
  } else if (workers !== null && process?.cpu_workers_cores != null && process.cpu_workers_cores >= THRESHOLDS.workerBusyFrac * workers) {
    present.push({ cause: 'few-workers', why: `${workers} loader workers use ${process.cpu_workers_cores.toFixed(1)} cores: each of them is busy` });
  }
  return present.length ? present : [{ cause: 'unknown', why: 'no CPU, quota or I/O limit seen: remote storage latency or a slow collate are likely' }];
}

/**
 * The step time the loader workers take from the training thread without its waiting in next():
 * it waits for a CPU (run queue, schedstat) while its workers run, the host or its container under
 * pressure. Had the training thread the CPU its workers use, its rate would go from r to r + w
 * cores, and a step bound by that thread's CPU would shorten by w / (r + w); it cannot gain more
 * than the time it waited for a CPU. An upper estimate: the freed CPU may go to other tasks too.
 * Null where the evidence is absent or unmeasured.
 */
export function workersStarveStep(window: StepWindow): { share: number; why: string } | null {
  const process = window.process;
  const wait = process?.train_wait_share ?? null;
  const workersCores = process?.cpu_workers_cores ?? null;
  if (wait === null || workersCores === null || !process?.workers || wait < THRESHOLDS.starveWait || workersCores < THRESHOLDS.starveWorkerCores) return null;
  const host = window.host;
  const pressure =
    (host?.cpu_pressure_pct != null && host.cpu_pressure_pct >= THRESHOLDS.starvePressurePct) ||
    (host?.cpu_pct_mean != null && host.cpu_pct_mean >= THRESHOLDS.cpuSaturatedPct) ||
    (process.cgroup_throttled_share != null && process.cgroup_throttled_share >= THRESHOLDS.cgroupThrottledShare);
  if (!pressure) return null;
  const train = process.train_cpu_cores ?? process.cpu_main_cores ?? null;
  if (train === null) return null;
  const share = round(Math.min(wait, workersCores / (train + workersCores)), 4);
  const where = [
    host?.cpu_pressure_pct != null ? `tasks waited for a CPU ${host.cpu_pressure_pct.toFixed(0)}% of the time (PSI)` : null,
    host?.cpu_pct_mean != null ? `host CPU ${host.cpu_pct_mean.toFixed(0)}% busy` : null,
  ].filter(Boolean).join(', ');
  return { share, why: `the training thread waited for a CPU ${pct(wait)} of the time while its ${process.workers} loader workers used ${workersCores.toFixed(2)} cores beside its ${train.toFixed(2)} (${where}): the workers cost the step up to ${pct(share)} without it waiting in next()` };
}

function throttleCause(window: StepWindow): { cause: ThrottleCause; share: number } | null {
  const gpu = window.gpu;
  if (!gpu || gpu.sm_clock_frac_mean === null || gpu.util_mean === null || gpu.util_mean < THRESHOLDS.busyUtil) return null;
  let best: { cause: ThrottleCause; share: number } | null = null;
  for (const [cause, reasons] of Object.entries(HARMFUL_REASONS) as [ThrottleCause, ThrottleReasonName[]][]) {
    const share = Math.max(0, ...reasons.map((reason) => gpu.throttle_share[reason] ?? 0));
    if (share >= THRESHOLDS.reasonShare && (!best || share > best.share)) best = { cause, share };
  }
  if (best && gpu.sm_clock_frac_mean < THRESHOLDS.clockFrac) return best;
  if (!best && gpu.sm_clock_frac_mean < THRESHOLDS.clocksLowFrac && gpu.util_mean >= THRESHOLDS.clocksLowUtil) return { cause: 'clocks-low', share: 0 };
  return null;
}

const pct = (x: number) => `${Math.round(x * 100)}%`;

/**
 * Why a rank with no verdict yet waits for one (null: it need not): a limiter's share is over its
 * bar while its lower bound is not, over too few slices to say which, and the next tick adds one.
 */
function firstVerdictPending(costs: Record<Limiter, LostShare>, window: StepWindow, context: RankContext): string | null {
  if (context.current !== null && context.current !== 'warming-up') return null;
  const slices = window.lost?.slices ?? 0;
  if (slices >= THRESHOLDS.firstVerdictSlices || window.steps <= slices) return null;
  const open = (Object.keys(costs) as Limiter[]).find((limiter) => limiter !== 'throttle' && costs[limiter].share >= LIMITER_BARS[limiter]);
  if (open === undefined) return null;
  const { share, low } = costs[open];
  return `deciding: ${LIMITER_WORDS[open]} ${pct(share)} of step time, at least ${pct(low)} across ${slices} slices of time: too few yet to tell whether it is over ${pct(LIMITER_BARS[open])}`;
}

export function judge(window: StepWindow, context: RankContext): Judgement {
  const figures = evidenceFigures(window, context);
  let limiters: LimiterCost[] = [];
  let lostLow: Evidence['lost_low'] = {};
  const done = (verdict: Verdict, cause: Cause, rule: string, lost: Evidence['lost'] = {}, causes: FixEstimate[] = []): Judgement => ({
    verdict,
    cause,
    evidence: { rule, lost, lost_low: lostLow, figures },
    // The advice of every cause present, the one that buys most first.
    recommendations: dedupe((causes.length ? causes.map((c) => c.cause) : [cause]).flatMap((c) => recommendationsFor(verdict, c, { window, env: context.env, hostCores: context.hostCores }))),
    limiters,
    causes,
  });

  if (context.sinceLastStepMs === null) return done('warming-up', null, 'no step has ended yet');
  const idleAfter = Math.max(THRESHOLDS.idleMs, 3 * (window.step_ms_p50 ?? 0));
  if (context.sinceLastStepMs > idleAfter) return done('idle', null, `no step for ${(context.sinceLastStepMs / 1000).toFixed(1)} s`);
  const warm = warmupState(context.totalSteps, context.recentStepMs ?? []);
  if (!warm.done) return done('warming-up', null, warm.why);
  const shares = window.breakdown;
  if (!shares || window.steps === 0 || !window.lost) return done(context.current ?? 'warming-up', null, 'no step in the window; keeping the verdict');

  // Each limiter's share over the window and the lower bound that holds across it (limiters.ts):
  // the bound decides, the share is what it costs.
  const measured = window.lost;
  // Input starvation that does not show as waiting: the step waits for a CPU its loader workers hold.
  const starving = workersStarveStep(window);
  const input = starving ? { share: Math.min(1, measured.input.share + starving.share), low: Math.min(1, measured.input.low + starving.share) } : measured.input;
  const costs: Record<Limiter, LostShare> = {
    input,
    transfer: measured.transfer,
    host: measured.host,
    communication: measured.communication ?? { share: 0, low: 0 },
    throttle: { share: 0, low: 0 },
  };
  const throttle = throttleCause(window);
  if (throttle && window.gpu?.sm_clock_frac_mean != null) {
    // From the GPU's samples, not the steps: its persistence is the reason's share of the samples.
    const share = round(shares.compute * (1 - window.gpu.sm_clock_frac_mean));
    costs.throttle = { share, low: share };
  }
  const lost = Object.fromEntries(Object.entries(costs).map(([limiter, cost]) => [limiter, round(cost.share)])) as Record<Limiter, number>;
  lostLow = Object.fromEntries(Object.entries(costs).map(([limiter, cost]) => [limiter, round(cost.low)]));
  const threshold = LIMITER_BARS;
  const current = context.current ? LIMITER_OF[context.current] : undefined;
  const over = (limiter: Limiter) => {
    const bar = limiter === current ? threshold[limiter] * THRESHOLDS.stickiness : threshold[limiter];
    if (costs[limiter].low < bar) return false;
    if (limiter === 'throttle' && !throttle) return false;
    return true;
  };
  const candidates = (Object.keys(lost) as Limiter[]).filter(over).sort((a, b) => lost[b] - lost[a]);
  const top = candidates[0];
  limiters = listLimiters(costs, threshold, top !== undefined && top === current ? top : null);
  const undecided = top === undefined ? firstVerdictPending(costs, window, context) : null;
  if (undecided) return done('warming-up', null, undecided, lost);
  // The bar the headline quotes is the one the figure passed: a verdict held in force below its
  // entry threshold says so, so that "18% (≥ 20%)" is never written; a bound below the share is given.
  const bar = (limiter: Limiter) => {
    const { share, low } = costs[limiter];
    const holds = pct(low) !== pct(share) ? `, at least ${pct(low)} across the window` : '';
    return low >= threshold[limiter] ? `≥ ${pct(threshold[limiter])}${holds}` : `held: ≥ ${pct(threshold[limiter] * THRESHOLDS.stickiness)} while in force, ${pct(threshold[limiter])} to enter${holds}`;
  };
  const idle = window.gpu_idle_share;

  if (top === 'input') {
    // A container with a CPU quota whose throttling has no rate yet (one process sample): the first
    // cause to check cannot be ruled out, so no cause is named before the second sample.
    const quota = window.process?.cgroup_quota_cores ?? null;
    if (quota !== null && window.process?.cgroup_throttled_share == null && context.current !== 'input-bound') {
      return done(context.current ?? 'warming-up', null, `input-bound pending: the container's CPU quota (${quota} cores) needs a second process sample to rule out throttling`, lost);
    }
    const present = inputCauses(window, context);
    const causes = inputFixes(present, lost.input, { window, env: context.env, hostCores: context.hostCores, jobCpuCores: context.jobCpuCores ?? null }, round(measured.input.share));
    const why = present.find((p) => p.cause === causes[0]!.cause)!.why;
    const measuredBy = idle === null ? 'waiting for data' : 'with the GPU idle waiting for data';
    const what = starving ? `lost to input (${pct(measured.input.share)} ${measuredBy}, ${pct(starving.share)} waiting for a CPU its loader workers hold)` : measuredBy;
    return done('input-bound', causes[0]!.cause, `${pct(lost.input)} of step time ${what} (${bar('input')}); ${why}`, lost, causes);
  }
  if (top === 'throttle') {
    const gpu = window.gpu!;
    const reasons = Object.entries(gpu.throttle_share).map(([name, share]) => `${name} ${pct(share)}`).join(', ') || 'no reason reported';
    const fix = wholeLimiter('throttle', throttle!.cause, lost.throttle, `the SM clock back at its maximum gives back the compute time the lower clock costs (compute ${pct(shares.compute)} × ${pct(1 - gpu.sm_clock_frac_mean!)})`);
    return done('throttled', throttle!.cause, `SM clock at ${pct(gpu.sm_clock_frac_mean!)} of its maximum while busy (${reasons}); ${pct(lost.throttle)} of step time lost`, lost, [fix]);
  }
  if (top === 'transfer') {
    const fix = wholeLimiter('transfer', null, lost.transfer, 'copies from pinned memory overlapped with compute (non_blocking) leave the step: all of their share at most');
    return done('transfer-bound', null, `${pct(lost.transfer)} of step time in host-to-device copies (${bar('transfer')})`, lost, [fix]);
  }
  // Frequent recompiles: the step waits for the compiler, in whichever phase the hook counted it.
  const recompiling = recompileCause(context.env, window);
  if (top === 'host') {
    const rule = `${pct(lost.host)} of step time outside data, copy and compute (${bar('host')})`;
    const causes = hostFixes(lost.host, window.eval_share, recompiling !== null);
    const first = causes[0]!.cause;
    const why = first === 'recompiles' ? recompiling!.why : first === 'evaluation' ? `evaluation inside the loop took ${pct(window.eval_share!)} of step time` : null;
    return done('host-bound', first, why ? `${rule}; ${why}` : rule, lost, causes);
  }
  if (top === 'communication') {
    const { cause, why } = commCause(window, context);
    const fix = wholeLimiter('communication', cause, lost.communication, 'only the exposed wait counts: collectives that overlap the backward pass cost nothing');
    return done('communication-bound', cause, `${pct(lost.communication)} of step time waiting in collectives (${bar('communication')}); ${why}`, lost, [fix]);
  }
  const memory = memoryCause(window);
  if (memory) return done('memory-bound', memory.cause, memory.why, lost);

  const gpu = window.gpu;
  if (gpu?.util_mean != null && gpu.util_mean < THRESHOLDS.computeIdleUtil && shares.compute >= THRESHOLDS.computeIdleShare) {
    const rule = `compute takes ${pct(shares.compute)} of the step but the GPU is only ${gpu.util_mean.toFixed(0)}% busy`;
    if (recompiling) return done('host-bound', 'recompiles', `${rule}; ${recompiling.why}`, lost);
    return done('host-bound', 'gpu-idle-in-compute', `${rule}: the CPU side of the model is the limit`, lost);
  }
  // Checked before the profiling split: while compiling, those counters describe the compiler, not
  // the model; and with another process on the GPU, they describe both.
  const split = recompiling ?? gpuSharedCause(window) ?? computeSplit(window);
  const rule = `compute ${pct(shares.compute)} of step time; no limiter over its threshold`;
  // Never a silent compute-bound where low clocks could not have been seen.
  const unchecked = gpu === null ? null : gpu.throttle_unchecked;
  return done('compute-bound', split.cause, [rule, split.why, unchecked && `throttling could not be checked: ${unchecked}`].filter(Boolean).join('; '), lost);
}

/**
 * The causes of host-bound time, by what removing each gives back: evaluation inside the loop
 * (its measured share, within the host's) and the rest (logging, synchronisations, checkpoints,
 * Python between steps). Each is named when it is at least MODERATE of step time, or when it is the
 * only one; the larger first. Evaluation is a cause only where the hook measured it.
 */
export function hostFixes(host: number, evalShare: number | null, recompiling: boolean): FixEstimate[] {
  const evaluation = evalShare === null ? 0 : Math.min(evalShare, host);
  const rest = Math.max(0, host - evaluation);
  const restCause = recompiling ? 'recompiles' : 'outside-phases';
  const measured = evalShare !== null;
  const outside = measured ? 'the time outside the phases that is not evaluation' : 'all of the time outside the phases';
  const restFix = wholeLimiter(
    'host',
    restCause,
    rest,
    recompiling
      ? `no recompiles: ${outside} at most`
      : measured
        ? 'the work outside the phases that is not evaluation (logging, synchronisations, checkpoints) done less often, or off the training thread: all of its share at most'
        : 'the work outside the phases done less often, or off the training thread: all of its share at most',
  );
  const evalFix = wholeLimiter('host', 'evaluation', evaluation, 'evaluation done less often, on fewer batches, or in another process: all of its measured share at most');
  const named = [evalFix, restFix].filter((fix) => fix.gain! >= MODERATE);
  const causes = named.length ? named : [evaluation > rest ? evalFix : restFix];
  return causes.sort((a, b) => b.gain! - a.gain!);
}

function dedupe(recommendations: Recommendation[]): Recommendation[] {
  const seen = new Set<string>();
  return recommendations.filter((r) => (seen.has(r.id) ? false : (seen.add(r.id), true)));
}

/** A slow rank when a peer waits far less in the collectives (everyone waits for it); else the collective itself. */
function commCause(window: StepWindow, context: RankContext): { cause: CommCause; why: string } {
  const wait = window.comm?.wait_share ?? 0;
  const waitsLess = (context.peers ?? []).filter((peer) => peer.commWaitShare !== null && peer.commWaitShare < wait * THRESHOLDS.slowRankWaitFrac);
  const slowest = waitsLess.sort((a, b) => a.commWaitShare! - b.commWaitShare!)[0];
  if (slowest) {
    return { cause: 'slow-rank', why: `rank ${slowest.rank} waits only ${pct(slowest.commWaitShare!)} of its steps: the collectives wait for rank ${slowest.rank}` };
  }
  const bw = window.comm?.bytes_per_s;
  const rate = bw == null ? 'bandwidth not measured' : `${(bw / 1e9).toFixed(2)} GB/s while in collectives`;
  return { cause: 'slow-collective', why: `every rank waits alike: the collective itself is slow (${rate})` };
}

/** Memory-bound only when the allocator's retries cost time; the cause says why it has to retry. */
function memoryCause(window: StepWindow): { cause: MemoryCause; why: string } | null {
  const memory = window.memory;
  if (!memory || memory.alloc_retries === null) return null;
  const ooms = memory.ooms ?? 0;
  const enough = memory.alloc_retries >= Math.max(THRESHOLDS.retriesMin, window.steps * THRESHOLDS.retriesPerStep);
  if (!enough && ooms === 0) return null;
  const what = `${memory.alloc_retries} allocation retries${ooms ? ` and ${ooms} out-of-memory errors` : ''} in ${window.steps} steps`;
  if (memory.fragmentation !== null && memory.fragmentation >= THRESHOLDS.fragmentation) {
    return { cause: 'fragmentation', why: `${what}; ${pct(memory.fragmentation)} of reserved memory is in inactive split blocks (≥ ${pct(THRESHOLDS.fragmentation)})` };
  }
  if (memory.reserved_frac !== null && memory.reserved_frac >= THRESHOLDS.nearCapacity) {
    return { cause: 'near-capacity', why: `${what}; reserved memory at ${pct(memory.reserved_frac)} of the GPU's (≥ ${pct(THRESHOLDS.nearCapacity)})` };
  }
  return { cause: 'allocator-thrash', why: `${what}: the allocator flushes its cache and synchronises to satisfy requests` };
}

/** What the GPU's busy time is made of, where DCGM's profiling counters say; null where balanced or unmeasured. */
function computeSplit(window: StepWindow): { cause: ComputeCause | null; why: string | null } {
  const gpu = window.gpu;
  const sm = gpu?.sm_active_mean ?? null;
  const tensor = gpu?.tensor_active_mean ?? null;
  const dram = gpu?.dram_active_mean ?? null;
  // Unmeasured: said in the evidence's figures (compute_split), the rule stays as without the counters.
  if (sm === null) return { cause: null, why: null };
  if (gpu?.util_mean != null && gpu.util_mean >= THRESHOLDS.launchBoundUtil && sm < THRESHOLDS.launchBoundSmActive) {
    return { cause: 'launch-bound', why: `the GPU is ${gpu.util_mean.toFixed(0)}% busy but its SMs only ${pct(sm)} active: many small kernels` };
  }
  if (dram !== null && dram >= THRESHOLDS.dramActive) return { cause: 'memory-bandwidth', why: `GPU memory busy ${pct(dram)} of the time (≥ ${pct(THRESHOLDS.dramActive)})` };
  if (tensor !== null && tensor < THRESHOLDS.tensorIdle && sm >= THRESHOLDS.tensorIdleSmActive) {
    return { cause: 'tensor-cores-idle', why: `SMs ${pct(sm)} active but tensor pipes ${pct(tensor)}: no mixed precision or TF32` };
  }
  return { cause: null, why: `SMs ${pct(sm)} active${tensor === null ? '' : `, tensor pipes ${pct(tensor)}`}${dram === null ? '' : `, memory ${pct(dram)}`}: balanced` };
}

const compileFigure = (env: Env, key: 'recompiles_1m' | 'recompile_s_1m'): number | null => num(envGroup(env, 'compile')[key]);

function evidenceFigures(window: StepWindow, context: RankContext): Record<string, number | string | null> {
  const b = window.breakdown;
  return {
    window_s: window.seconds,
    steps: window.steps,
    step_ms_p50: window.step_ms_p50,
    data_share: b?.data ?? null,
    h2d_share: b?.h2d ?? null,
    compute_share: b?.compute ?? null,
    other_share: b?.other ?? null,
    gpu_idle_share: window.gpu_idle_share,
    gpu_util_mean: window.gpu?.util_mean ?? null,
    sm_clock_frac: window.gpu?.sm_clock_frac_mean ?? null,
    temp_c_max: window.gpu?.temp_c_max ?? null,
    power_frac: window.gpu?.power_frac_mean ?? null,
    host_cpu_pct: window.host?.cpu_pct_mean ?? null,
    host_iowait_pct: window.host?.iowait_pct_mean ?? null,
    cgroup_throttled_share: window.process?.cgroup_throttled_share ?? null,
    loader_workers_cores: window.process?.cpu_workers_cores ?? null,
    num_workers: loaderWorkers(context.env),
    recompiles_1m: compileFigure(context.env, 'recompiles_1m'),
    recompile_s_1m: compileFigure(context.env, 'recompile_s_1m'),
    comm_wait_share: window.comm?.wait_share ?? null,
    comm_bytes_per_s: window.comm?.bytes_per_s ?? null,
    mem_reserved_frac: window.memory?.reserved_frac ?? null,
    mem_alloc_retries: window.memory?.alloc_retries ?? null,
    mem_exhausted_in_s: window.memory?.exhausted_in_s ?? null,
    sm_active: window.gpu?.sm_active_mean ?? null,
    tensor_active: window.gpu?.tensor_active_mean ?? null,
    throttle_check: window.gpu === null ? 'no GPU counters matched to this rank' : (window.gpu.throttle_unchecked ?? 'checked'),
    throttle_filled: window.gpu?.throttle_filled ?? null,
    compute_split: window.gpu?.sm_active_mean == null ? 'not measured: no DCGM profiling counters (SM_ACTIVE, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE)' : 'measured',
  };
}
