/** 1 ms to 60 s in 1-2-5 steps: from tiny models' steps to large models' with gradient accumulation. */
export const STEP_BUCKETS_S = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60];

/**
 * Step durations counted in Prometheus's histogram buckets (non-cumulative; the last slot is +Inf):
 * kept in the state, so that /metrics reads them from a snapshot and a replay restores them.
 */
export interface DurationCounts {
  buckets: number[];
  sumS: number;
  count: number;
}

export const emptyDurations = (): DurationCounts => ({ buckets: new Array<number>(STEP_BUCKETS_S.length + 1).fill(0), sumS: 0, count: 0 });

export function addDuration(counts: DurationCounts, seconds: number): void {
  let i = 0;
  while (i < STEP_BUCKETS_S.length && seconds > STEP_BUCKETS_S[i]!) i++;
  counts.buckets[i]! += 1;
  counts.sumS += seconds;
  counts.count += 1;
}
