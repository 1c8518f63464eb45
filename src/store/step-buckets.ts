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
});

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
}

export function mergeSums(into: StepSums, from: StepSums): void {
  for (const key of Object.keys(into) as (keyof StepSums)[]) into[key] += from[key];
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

  /** Sums of the steps that ended in [from, to). */
  between(from: number, to: number): StepSums {
    const total = emptySums();
    const first = Math.floor(from / this.sliceMs);
    const last = Math.ceil(to / this.sliceMs) - 1;
    for (let slice = Math.max(first, last - this.slices + 1); slice <= last; slice++) {
      const at = slice % this.slices;
      if (this.index[at] === slice) mergeSums(total, this.sums[at]!);
    }
    return total;
  }

  /** Per-slice sums from `from` to `to`, oldest first, for sparklines and timelines. */
  series(from: number, to: number, sliceMs: number): StepSums[] {
    const out: StepSums[] = [];
    for (let start = from; start < to; start += sliceMs) out.push(this.between(start, Math.min(start + sliceMs, to)));
    return out;
  }
}
