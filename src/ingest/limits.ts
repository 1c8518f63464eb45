import type { FlowLimits } from './flow.js';

/** What one sidecar accepts from hooks before it refuses more (each refusal closes only the offender), and how much it holds unsettled. */
export interface IngestLimits extends FlowLimits {
  maxConnections: number;
  /** Sustained frames per second per connection, with bursts up to `burst`. */
  framesPerSecond: number;
  burst: number;
  maxJobs: number;
  maxRanksPerJob: number;
  /** Connections that have not said hello yet; past it the oldest is closed to make room. */
  maxPending: number;
  /** A connection that has not said hello by then is closed. */
  helloTimeoutMs: number;
  /** A connection from which nothing came (no frame, no answer to a ping) for this long is closed. */
  idleTimeoutMs: number;
}

/** What a sidecar takes when not told; its jobs and ranks are lowered where its memory is smaller (memory-budget.ts). */
export const DEFAULT_LIMITS: IngestLimits = {
  maxConnections: 1024,
  // A hook sends about 10 frames a second (steps every 100 ms, counters at 1-2 Hz).
  framesPerSecond: 200,
  burst: 400,
  // A pod's sidecar sees one job of up to a node's ranks (64 with MIG slices); a few ended runs stay beside it.
  maxJobs: 4,
  maxRanksPerJob: 64,
  // A hook says hello within milliseconds of connecting; 64 is room for every rank of a node at once.
  maxPending: 64,
  helloTimeoutMs: 5_000,
  // Pinged every third of it: a hook's I/O thread answers even while training is busy or paused.
  idleTimeoutMs: 60_000,
  // A frame of 4,096 rows is about 300 KiB: one such frame (and a bit) per connection, a few across all.
  // Without them 8 hooks sending as fast as they can grew the sidecar to 1 GiB in 20 s (BENCHMARKS.md).
  heldBytesPerConnection: 512 * 1024,
  heldBytes: 2 * 1024 * 1024,
};

/**
 * The most a journal checkpoint can hold under the limits: each rank's part (262 KiB measured at
 * its fullest by `node --expose-gc scripts/bench-journal.mjs rank-memory`, bounded at twice that) and each GPU's counters (540 KiB for a day
 * of 500 ms samples, bounded at 1 MiB) for up to 64 devices (8 GPUs of 7 MIG instances, and room).
 * A larger checkpoint was not written by this sidecar: it is refused before a byte of it is read.
 */
export const RANK_CHECKPOINT_BYTES = 512 * 1024;
export const CHECKPOINT_GPUS_BYTES = 64 * 1024 * 1024;
export function checkpointBytesFor(limits: Partial<IngestLimits> = {}): number {
  const { maxJobs, maxRanksPerJob } = { ...DEFAULT_LIMITS, ...limits };
  return maxJobs * maxRanksPerJob * RANK_CHECKPOINT_BYTES + CHECKPOINT_GPUS_BYTES;
}

/** Token bucket; `now` in ms is passed in so it is tested without a clock. */
export class RateLimiter {
  private tokens: number;
  private last: number;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  take(now: number): boolean {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
