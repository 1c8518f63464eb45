/** What one sidecar accepts from hooks before it refuses more; each refusal closes only the offender. */
export interface IngestLimits {
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
};


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
