/** What one sidecar accepts from hooks before it refuses more; each refusal closes only the offender. */
export interface IngestLimits {
  maxConnections: number;
  /** Sustained frames per second per connection, with bursts up to `burst`. */
  framesPerSecond: number;
  burst: number;
  maxJobs: number;
  maxRanksPerJob: number;
}

export const DEFAULT_LIMITS: IngestLimits = {
  maxConnections: 1024,
  // A hook sends about 10 frames a second (steps every 100 ms, counters at 1-2 Hz).
  framesPerSecond: 200,
  burst: 400,
  maxJobs: 64,
  maxRanksPerJob: 1024,
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
