/**
 * When a rank's warm-up ends: after N steps, or after a few seconds of steady steps, whichever comes
 * first. The first steps are unrepresentative (compilation, cuDNN autotuning, worker start-up, caches
 * filling); counting steps alone kept a job of 1 s steps warming up for 20 s, a third of a one-minute
 * job (issue 26). Steps that agree with each other for a few seconds are past that. Pure; the rule
 * is in docs/verdicts.md.
 */

export const WARMUP = {
  /** This many steps in all end it, however they vary. */
  steps: 20,
  /** ... or this many seconds of steady steps, ... */
  steadySeconds: 3,
  /** ... at least this many of them, ... */
  steadyMinSteps: 3,
  /** ... steady meaning the slowest within this factor of the fastest (a first step that compiled is not). */
  steadyRatio: 1.5,
} as const;

export interface WarmupState {
  done: boolean;
  /** Why it is over or not, in words. */
  why: string;
}

/**
 * `totalSteps`: the rank's steps in all; `recentMs`: its latest step durations (ms), oldest first
 * (the last WARMUP.steps are enough).
 */
export function warmupState(totalSteps: number, recentMs: readonly number[]): WarmupState {
  if (totalSteps >= WARMUP.steps) return { done: true, why: `${totalSteps} steps seen` };
  // The longest run of the newest steps that agree within steadyRatio.
  let low = Infinity;
  let high = 0;
  let seconds = 0;
  let count = 0;
  for (let i = recentMs.length - 1; i >= 0; i--) {
    const ms = recentMs[i]!;
    const nextLow = Math.min(low, ms);
    const nextHigh = Math.max(high, ms);
    if (!(ms > 0) || nextHigh > WARMUP.steadyRatio * nextLow) break;
    low = nextLow;
    high = nextHigh;
    seconds += ms / 1000;
    count += 1;
  }
  if (count >= WARMUP.steadyMinSteps && seconds >= WARMUP.steadySeconds) {
    return { done: true, why: `${count} steady steps over ${seconds.toFixed(1)} s` };
  }
  return { done: false, why: `${totalSteps} of ${WARMUP.steps} steps seen, ${seconds.toFixed(1)} of ${WARMUP.steadySeconds} s of steady steps` };
}
