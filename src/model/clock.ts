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
