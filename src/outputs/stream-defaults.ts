/**
 * At most a frame per 50 ms, the engine's tick while a viewer watches (src/engine/tick-schedule.ts).
 * A file of its own so that the CLI's start does not load the stream to print its help.
 */
export const DEFAULT_STREAM_RATE_HZ = 20;

/** The least time between two state frames to a viewer at `rateHz` (absent: the default rate), ms. */
export function streamPeriodMs(rateHz: number | undefined): number {
  return 1000 / (rateHz ?? DEFAULT_STREAM_RATE_HZ);
}
