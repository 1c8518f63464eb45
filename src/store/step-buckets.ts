import type { StepRecord } from '../protocol/messages.js';

/** Sums of the steps that ended in one slice of time. */
export interface StepSums {
  steps: number;
  durNs: number;
  dataNs: number;
  h2dNs: number;
  computeNs: number;
  otherNs: number;
  samples: number;
  samplesSteps: number;
  gpuIdleNs: number;
  gpuIdleSteps: number;
  gpuTimedSteps: number;
  gpuH2dNs: number;
  gpuComputeNs: number;
  /** Steps that measured their collectives, and their sums. */
  commSteps: number;
  commNs: number;
  commWaitNs: number;
  commBytes: number;
  /** Steps that measured their evaluation, and its time. */
  evalSteps: number;
  evalNs: number;
}

export const emptySums = (): StepSums => ({
  steps: 0,
  durNs: 0,
  dataNs: 0,
  h2dNs: 0,
  computeNs: 0,
  otherNs: 0,
  samples: 0,
  samplesSteps: 0,
  gpuIdleNs: 0,
  gpuIdleSteps: 0,
  gpuTimedSteps: 0,
  gpuH2dNs: 0,
  gpuComputeNs: 0,
  commSteps: 0,
  commNs: 0,
  commWaitNs: 0,
  commBytes: 0,
  evalSteps: 0,
  evalNs: 0,
});

/** The sums' fields in the order a checkpoint's bucket rows hold them (src/store/jobs-checkpoint.ts). */
export const STEP_SUM_FIELDS = [
  'steps', 'durNs', 'dataNs', 'h2dNs', 'computeNs', 'otherNs', 'samples', 'samplesSteps', 'gpuIdleNs', 'gpuIdleSteps',
  'gpuTimedSteps', 'gpuH2dNs', 'gpuComputeNs', 'commSteps', 'commNs', 'commWaitNs', 'commBytes', 'evalSteps', 'evalNs',
] as const satisfies ReadonlyArray<keyof StepSums>;
const SUM_KEYS = STEP_SUM_FIELDS;

export function otherNs(record: StepRecord): number {
  return Math.max(0, record.durNs - record.dataNs - record.h2dNs - record.computeNs);
}

export function addStep(sums: StepSums, record: StepRecord): void {
  sums.steps += 1;
  sums.durNs += record.durNs;
  sums.dataNs += record.dataNs;
  sums.h2dNs += record.h2dNs;
  sums.computeNs += record.computeNs;
  sums.otherNs += otherNs(record);
  if (record.samples !== null) {
    sums.samples += record.samples;
    sums.samplesSteps += 1;
  }
  if (record.gpuIdleNs !== null) {
    sums.gpuIdleNs += record.gpuIdleNs;
    sums.gpuIdleSteps += 1;
  }
  if (record.gpuH2dNs !== null || record.gpuComputeNs !== null) {
    sums.gpuTimedSteps += 1;
    sums.gpuH2dNs += record.gpuH2dNs ?? 0;
    sums.gpuComputeNs += record.gpuComputeNs ?? 0;
  }
  if (record.commNs !== null || record.commWaitNs !== null) {
    sums.commSteps += 1;
    sums.commNs += record.commNs ?? 0;
    sums.commWaitNs += record.commWaitNs ?? 0;
    sums.commBytes += record.commBytes ?? 0;
  }
  if (record.evalNs !== null) {
    sums.evalSteps += 1;
    sums.evalNs += record.evalNs;
  }
}

/** The step time of the steps that measured their collectives (all of it when every step did). */
export function commStepsNs(s: StepSums): number {
  if (s.commSteps === 0 || s.steps === 0) return 0;
  return s.steps === s.commSteps ? s.durNs : (s.durNs / s.steps) * s.commSteps;
}

/** Adds `from` into `into`, field by field: a loop over the names cost an array and a lookup by name for each, and the windows merge every slice at every tick. */
export function mergeSums(into: StepSums, from: StepSums): void {
  into.steps += from.steps;
  into.durNs += from.durNs;
  into.dataNs += from.dataNs;
  into.h2dNs += from.h2dNs;
  into.computeNs += from.computeNs;
  into.otherNs += from.otherNs;
  into.samples += from.samples;
  into.samplesSteps += from.samplesSteps;
  into.gpuIdleNs += from.gpuIdleNs;
  into.gpuIdleSteps += from.gpuIdleSteps;
  into.gpuTimedSteps += from.gpuTimedSteps;
  into.gpuH2dNs += from.gpuH2dNs;
  into.gpuComputeNs += from.gpuComputeNs;
  into.commSteps += from.commSteps;
  into.commNs += from.commNs;
  into.commWaitNs += from.commWaitNs;
  into.commBytes += from.commBytes;
  into.evalSteps += from.evalSteps;
  into.evalNs += from.evalNs;
}

/**
 * Step sums in fixed slices of sidecar time (default 250 ms), for the last `slices` of them:
 * windows of any length up to that span cost the same whatever the step rate.
 */
export class StepBuckets {
  private readonly index: number[];
  private readonly sums: StepSums[];

  constructor(
    readonly sliceMs = 250,
    readonly slices = 2400,
  ) {
    this.index = new Array<number>(slices).fill(-1);
    this.sums = Array.from({ length: slices }, emptySums);
  }

  add(record: StepRecord, endAt: number): void {
    const slice = Math.floor(endAt / this.sliceMs);
    const at = slice % this.slices;
    if (this.index[at] !== slice) {
      if (this.index[at]! > slice) return; // older than anything kept
      this.index[at] = slice;
      this.sums[at] = emptySums();
    }
    addStep(this.sums[at]!, record);
  }

  /** The slices held, each as [slice, ...its sums in SUM_KEYS order], for a compact checkpoint. */
  dump(): number[][] {
    const held: number[][] = [];
    this.index.forEach((slice, at) => slice >= 0 && held.push([slice, ...SUM_KEYS.map((key) => this.sums[at]![key])]));
    return held.sort((a, b) => a[0]! - b[0]!);
  }

  /** Buckets holding what `dump` gave (its rows checked by the checkpoint's schema: a slice, then every sum). */
  static load(held: ReadonlyArray<readonly number[]>): StepBuckets {
    const buckets = new StepBuckets();
    for (const [slice, ...values] of held) {
      const at = slice! % buckets.slices;
      if (buckets.index[at]! > slice!) continue;
      const sums = emptySums();
      SUM_KEYS.forEach((key, i) => (sums[key] = values[i]!));
      buckets.index[at] = slice!;
      buckets.sums[at] = sums;
    }
    return buckets;
  }

  /** Sums of the steps that ended in [from, to). */
  between(from: number, to: number): StepSums {
    const total = emptySums();
    for (const sums of this.slicesBetween(from, to)) mergeSums(total, sums);
    return total;
  }

  /** The sums of each slice in which steps ended in [from, to), oldest first: the window's samples for the limiters' bounds. */
  slicesBetween(from: number, to: number): StepSums[] {
    const held: StepSums[] = [];
    const first = Math.floor(from / this.sliceMs);
    const last = Math.ceil(to / this.sliceMs) - 1;
    for (let slice = Math.max(first, last - this.slices + 1); slice <= last; slice++) {
      const at = slice % this.slices;
      if (this.index[at] === slice && this.sums[at]!.steps > 0) held.push(this.sums[at]!);
    }
    return held;
  }

  /**
   * Mean step time (ms) per slice of `sliceMs` from `from` to `to`, oldest first (null where no step
   * ended): the sparkline of every rank at every tick, so it reads the slices directly.
   */
  meanStepMs(from: number, to: number, sliceMs: number): Array<number | null> {
    const out: Array<number | null> = [];
    for (let start = from; start < to; start += sliceMs) {
      let steps = 0;
      let durNs = 0;
      const first = Math.floor(start / this.sliceMs);
      const last = Math.ceil(Math.min(start + sliceMs, to) / this.sliceMs) - 1;
      for (let slice = first; slice <= last; slice++) {
        const at = slice % this.slices;
        if (this.index[at] !== slice) continue;
        steps += this.sums[at]!.steps;
        durNs += this.sums[at]!.durNs;
      }
      out.push(steps ? Math.round(durNs / steps / 1e3) / 1e3 : null);
    }
    return out;
  }

}
