import type { StepWindow } from './window.js';
import type { Cause, InputCause, Limiter } from '../model/verdict.js';
import { round } from '../model/round.js';
import type { Env } from '../protocol/messages.js';
import type { FixEstimate } from '../protocol/state.js';
import { envGroup, num } from './stack.js';
import { freeCores, workerRoom } from './recommendations.js';

/**
 * What fixing each cause would buy: the share of step time it would give back, with the facts the
 * estimate rests on, or "unknown" and why where it depends on something not measured. Causes are
 * ranked by it. Pure. The models and how they can be wrong are in docs/verdicts.md.
 */

export interface FixContext {
  window: StepWindow;
  env: Env;
  hostCores: number | null;
  /** CPU cores the job's processes on this host use (every rank and its workers); null unknown. */
  jobCpuCores: number | null;
}

/** A cause whose evidence is present, with its evidence in words (the rules' text). */
export interface PresentCause<C extends Cause = Cause> {
  cause: C;
  why: string;
  /** The share of step time the rule itself measured it to cost, where it did. */
  measured?: number;
}

const pctText = (x: number) => `${Math.round(x * 100)}%`;
const cores = (x: number) => `${x.toFixed(x > 0 && x < 0.95 ? 2 : 1)} cores`;
const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

/** The loader's figures the input estimates are made of, each null where not measured. */
interface LoaderFacts {
  /** Mean step time and the input wait in it, ms. */
  stepMs: number | null;
  waitMs: number | null;
  input: number;
  /** Cores idle on the host, and those within the container's quota where it has one. */
  free: number | null;
  workers: number | null;
  /** CPU of the training process and of its loader workers, cores. */
  main: number | null;
  workersCores: number | null;
  /** Workers the rank's cores allow beside the training process, and which cores bound them. */
  room: number | null;
  roomWhy: string | null;
  cpuPressure: number | null;
}

function loaderFacts(input: number, { window, env, hostCores }: FixContext): LoaderFacts {
  const stepMs = window.step_ms_mean;
  const process = window.process;
  // Under a CPU quota, only the quota's unused cores are free to this job.
  const { free } = freeCores(window, hostCores);
  const configured = num(envGroup(env, 'loader').num_workers);
  const room = workerRoom({ env, window, hostCores });
  return {
    stepMs,
    waitMs: stepMs === null ? null : stepMs * input,
    input,
    free,
    workers: configured ?? process?.workers ?? null,
    main: process?.cpu_main_cores ?? null,
    workersCores: process?.cpu_workers_cores ?? null,
    room: room.workerRoom,
    roomWhy: room.coresWhy,
    cpuPressure: window.host?.cpu_pressure_pct ?? null,
  };
}

type Estimate = Pick<FixEstimate, 'gain' | 'basis' | 'unknown'>;
const unknown = (basis: string, what: string): Estimate => ({ gain: null, basis, unknown: what });
const known = (gain: number, input: number, basis: string): Estimate => ({ gain: round(Math.min(input, Math.max(0, gain)), 3), basis, unknown: null });

/**
 * More loader workers on the cores that are free. A batch costs the loader `cpu` ms of CPU and
 * `off` ms off the CPU (I/O, sleeping, waiting for a core); `w` workers on `c` cores deliver one
 * every max(cpu / c, (cpu + off) / w) ms, and the step still takes its compute.
 */
function moreWorkers(f: LoaderFacts): Estimate {
  const { stepMs: t, waitMs: d, workers, room } = f;
  if (t === null || d === null) return unknown('', 'the step time (no steps in the window)');
  if (workers === null) return unknown('', 'how many loader workers there are');
  if (f.free === null) return unknown('', "the cores free for workers (the host's cores or its load not measured)");
  if (room === null) return unknown('', 'how many workers the cores allow');
  const compute = t - d;
  let cpu: number;
  let off: number;
  if (workers === 0) {
    if (f.main === null) return unknown('the data is loaded in the training process', "how much of the loading is CPU work (the training process's CPU not measured)");
    // The training thread's CPU rate over the step stands for its rate while loading.
    cpu = d * Math.min(1, f.main);
    off = d - cpu;
  } else {
    if (f.workersCores === null) return unknown(`${workers} workers`, "the workers' CPU (not measured)");
    // One batch a step: the workers spend this much CPU on each, and each of them takes `workers` steps per batch.
    cpu = f.workersCores * t;
    off = Math.max(0, workers * t - cpu);
  }
  const after = Math.max(workers, room);
  const where = `${f.roomWhy ?? 'the cores'} allow ${plural(room, 'worker')} beside the training process`;
  if (after <= workers) return known(0, f.input, `num_workers=${workers} already: ${where}`);
  const coresFor = Math.min(after, (workers === 0 ? 0 : f.workersCores!) + f.free);
  const perBatch = Math.max(coresFor > 0 ? cpu / coresFor : cpu > 0 ? Number.POSITIVE_INFINITY : 0, (cpu + off) / after);
  const wait = Math.max(0, perBatch - compute);
  const loading = workers === 0 ? `loading takes ${cpu.toFixed(1)} ms of CPU a batch in the training process` : `${workers} workers spend ${cpu.toFixed(1)} ms of CPU a batch`;
  const left = wait >= d ? `would not shorten the ${d.toFixed(1)} ms wait` : `would leave ${wait.toFixed(1)} ms of the ${d.toFixed(1)} ms wait`;
  return known((d - Math.min(d, wait)) / t, f.input, `${loading}; ${plural(after, 'worker')} on ${cores(coresFor)} (${cores(f.free)} free; ${where}) ${left}`);
}

/**
 * The neighbours gone: the loader's time off the CPU shrinks by at most the share of time tasks on
 * the host waited for a CPU (PSI) — time off the CPU may be I/O or sleep, which no neighbour causes.
 */
function withoutNeighbours(f: LoaderFacts, others: string): Estimate {
  if (f.cpuPressure === null) return unknown(others, 'whether the loader waits for a CPU or for something else (no CPU pressure figures: /proc/pressure/cpu)');
  const onCpu = f.workers === 0 || f.workers === null ? f.main : f.workersCores === null ? null : f.workersCores / f.workers;
  if (onCpu === null) return unknown(others, "the loader's CPU (not measured)");
  const waiting = Math.min(f.cpuPressure / 100, Math.max(0, 1 - Math.min(1, onCpu)));
  return known(f.input * waiting, f.input, `${others}; tasks waited for a CPU ${f.cpuPressure.toFixed(0)}% of the time (PSI) and the loader ran on a CPU ${pctText(Math.min(1, onCpu))} of its time: the wait shrinks by up to ${pctText(waiting)}`);
}

/** What removing one input-bound cause would give back. */
function inputEstimate(cause: InputCause, f: LoaderFacts, window: StepWindow, why: string, measured?: number): Estimate {
  const process = window.process;
  switch (cause) {
    case 'few-workers':
      return moreWorkers(f);
    case 'contention':
      return withoutNeighbours(f, why);
    case 'cgroup-throttled': {
      const stalled = process?.cgroup_throttled_s_per_s ?? null;
      if (stalled === null) return unknown(why, 'how long the throttling stalls the job (no throttled time measured)');
      return known(Math.min(f.input, stalled), f.input, `the container was held ${stalled.toFixed(2)} s of every second (limit ${process?.cgroup_quota_cores ?? '?'} cores): a limit it never reaches gives that back, at most the data wait`);
    }
    case 'memory-pressure': {
      const stalls = window.host?.memory_pressure_pct ?? null;
      return stalls === null ? unknown(why, 'how long the loader stalls on memory') : known(f.input * Math.min(1, stalls / 100), f.input, `tasks stalled on memory ${stalls.toFixed(0)}% of the time (PSI): the loader's wait shrinks by at most that share`);
    }
    case 'io-wait':
      return unknown(why, 'how much faster the storage could serve the loader: iowait shows CPUs idle while I/O is pending, not how long the loader waits on it');
    case 'workers-starve-step':
      // The run-queue wait the workers cause, as the rule measured it (verdict.ts workersStarveStep).
      return measured === undefined ? unknown(why, 'the wait the workers cause') : known(measured, measured, `${why}; workers off the training thread's cores (fewer, niced, or the samples made offline) give that back`);
    case 'cpu-saturated':
      return unknown(why, 'how much more CPU the job would get (a larger instance) or how much cheaper its samples could be made');
    default:
      return unknown(why, 'what the loader waits for: no CPU, quota, memory or I/O limit was seen');
  }
}

/**
 * The input-bound causes present, each with its estimate, ranked by what fixing it buys: the
 * estimate where known, else at most the whole data wait (an unmeasured fix is not pushed down for
 * being unmeasured); ties keep the order they came in (the more specific evidence first).
 */
export function inputFixes(present: ReadonlyArray<PresentCause<InputCause>>, input: number, context: FixContext, waiting = input): FixEstimate[] {
  // The loader's estimates are of the time waited in next(); the input limiter may hold more (workers that starve the step).
  const facts = loaderFacts(waiting, context);
  const upto = round(input, 3);
  const estimates = present.map(({ cause, why, measured }, order) => {
    const estimate = inputEstimate(cause, facts, context.window, why, measured);
    return { order, fix: { cause, limiter: 'input' as const, gain: estimate.gain, upto, basis: estimate.basis || why, unknown: estimate.unknown } };
  });
  return estimates.sort((a, b) => (b.fix.gain ?? b.fix.upto) - (a.fix.gain ?? a.fix.upto) || a.order - b.order).map((e) => e.fix);
}

/** What removing a limiter entirely would give back: its whole lost share (Amdahl), on the grounds given. */
export function wholeLimiter(limiter: Limiter, cause: Cause, share: number, basis: string): FixEstimate {
  const gain = round(share, 3);
  return { cause, limiter, gain, upto: gain, basis, unknown: null };
}
