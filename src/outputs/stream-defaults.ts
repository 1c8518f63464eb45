/**
 * At most a frame per 50 ms, the engine's tick while a viewer watches (src/engine/tick-schedule.ts).
 * A file of its own so that the CLI's start does not load the stream to print its help.
 */
export const DEFAULT_STREAM_RATE_HZ = 20;
