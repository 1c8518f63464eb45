/**
 * How far from the sidecar's clock a rank's record may end, mapped through the rank's latest hello.
 * Ahead: transit and the drift of the hook's monotonic clock against the sidecar's wall clock
 * between hellos stay far below 10 minutes. Behind: the hook buffers records while disconnected
 * (100,000 of them), which at one step a second is about a day; a week is room for that.
 */
export const CLOCK_SANITY = { aheadMs: 10 * 60_000, behindMs: 7 * 86_400_000 } as const;

/** Whether a time a hook gave, on the sidecar's clock, could be real when received at `at`. */
export function plausibleAt(sidecarAt: number, at: number): boolean {
  return Number.isFinite(sidecarAt) && sidecarAt <= at + CLOCK_SANITY.aheadMs && sidecarAt >= at - CLOCK_SANITY.behindMs;
}

/**
 * A clock in ms since the epoch that never steps: the wall clock read once, then carried on by the
 * monotonic clock. Both are slewed alike by NTP, so the two part only by the steps (an NTP step, a
 * person setting the date, a VM restored) since it was made.
 */
export function steadyClock(wall: () => number = Date.now, monotonic: () => number = () => performance.now()): () => number {
  const origin = wall() - monotonic();
  return () => Math.floor(origin + monotonic());
}

/**
 * The sidecar's clock: every time it keeps (a tick, an entry, a reading, a hello's pairing of a hook's
 * clock with its own, a connection's silence, the frame-rate limiter) comes from this one. On the
 * wall clock, a step back stalled the ticks until the lost time came again, put every hook's later
 * steps that far ahead of the sidecar (refused past 10 minutes) and emptied the frame-rate limiters;
 * a step forward closed every connection as silent.
 */
export const sidecarNow: () => number = steadyClock();

/**
 * How far the host's wall clock has stepped since the sidecar's clock was read from it, ms (the
 * host's less the sidecar's): 0 under a second, which is drift and rounding rather than a step. What
 * is meant as the host's time (a Prometheus timestamp) adds it; a restart takes the host's clock again.
 */
export function hostClockStepMs(wall: () => number = Date.now, now: () => number = sidecarNow): number {
  const step = wall() - now();
  return Math.abs(step) < 1000 ? 0 : step;
}
