import { Histogram } from 'prom-client';
import type { Hello, StepRecord } from '../protocol/messages.js';
import { JobStore, type HelloResult, type StepsResult, type StoreOptions } from '../store/job-store.js';

/** 1 ms to 60 s in 1-2-5 steps: from tiny models' steps to large models' with gradient accumulation. */
export const STEP_BUCKETS_S = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60];

type StepLabel = 'training_job' | 'rank';
export type StepDurationHistogram = Histogram<StepLabel>;

/** Registered by the /metrics route in the sidecar's own registry, not in prom-client's global one. */
export function stepDurationHistogram(): StepDurationHistogram {
  return new Histogram({
    name: 'stepscope_step_duration_seconds',
    help: 'Wall-clock duration of training steps, per job and rank.',
    labelNames: ['training_job', 'rank'],
    buckets: STEP_BUCKETS_S,
    registers: [],
  });
}

/**
 * A job store that also observes every accepted step in the step-duration histogram. A histogram
 * cannot be rebuilt from totals at scrape time, so it is fed here, where both live ingest and a
 * journal replay pass: after a restart on the same --out it carries on from the replayed steps,
 * like the phase counters read from the store.
 */
export class StepTimedJobStore extends JobStore {
  private readonly bySession = new Map<string, Histogram.Internal<StepLabel>>();

  constructor(
    private readonly durations: StepDurationHistogram,
    options?: StoreOptions,
  ) {
    super(options);
  }

  override hello(hello: Hello, at: number): HelloResult {
    const result = super.hello(hello, at);
    if (!this.bySession.has(hello.session)) {
      this.bySession.set(hello.session, this.durations.labels({ training_job: hello.job, rank: String(hello.rank) }));
    }
    return result;
  }

  override steps(sessionId: string, records: readonly StepRecord[], dropped: number, at: number): StepsResult {
    const result = super.steps(sessionId, records, dropped, at);
    const histogram = this.bySession.get(sessionId);
    if (histogram) for (const record of result.accepted) histogram.observe(record.durNs / 1e9);
    return result;
  }
}
