import { performance } from 'node:perf_hooks';
import type { Logger } from '../log/log.js';
import { HealthTracker } from './health.js';
import type { CollectorHealth } from './types.js';

/**
 * A source of readings the node_exporter way: the source only reads, once, when asked; timing,
 * backoff, the watchdog, health and the rate-limited log are Supervised's, the same for every source.
 */
export interface PolledSource<T> {
  readonly name: string;
  /** One reading; rejects with why there is none (then nothing is delivered: not measured, never empty). */
  read(): Promise<T>;
}

export interface SupervisedOptions {
  intervalMs: number;
  log: Logger;
  /** A read not settled by then is a failure (it is still awaited before the next, never two at once). Default 15 s. */
  timeoutMs?: number;
  /** After failures in a row the wait doubles each time, up to this. Default 60 s. */
  maxBackoffMs?: number;
  now?: () => number;
}

/** What the source's reads cost: its self-timing. */
export interface SourceTiming {
  reads: number;
  lastMs: number | null;
  totalMs: number;
}

const WARNING_QUIET_MS = 5 * 60_000;

/** Runs one PolledSource: a read every interval (timed from the previous start), backoff after failures. */
export class Supervised<T> {
  private readonly status: HealthTracker;
  private readonly warnings: RateLimitedWarnings;
  private readonly log: Logger;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private failures = 0;
  private readonly timings: SourceTiming = { reads: 0, lastMs: null, totalMs: 0 };

  constructor(
    private readonly source: PolledSource<T>,
    private readonly options: SupervisedOptions,
  ) {
    this.log = options.log.child({ source: source.name });
    this.status = new HealthTracker(source.name);
    this.warnings = new RateLimitedWarnings(this.log, WARNING_QUIET_MS);
    this.now = options.now ?? Date.now;
  }

  /** The first read at once (resolved once it has settled, delivered or failed), then one an interval. */
  async start(sink: (reading: T) => void): Promise<void> {
    this.running = this.tick(sink);
    await this.running;
  }

  async stop(): Promise<void> {
    this.status.stop();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  health(): CollectorHealth {
    return this.status.snapshot();
  }

  /** What its reads have cost so far. */
  timing(): SourceTiming {
    return { ...this.timings };
  }

  private schedule(delayMs: number, sink: (reading: T) => void): void {
    if (this.status.stopped) return;
    this.timer = setTimeout(() => (this.running = this.tick(sink)), delayMs);
    this.timer.unref();
  }

  private async tick(sink: (reading: T) => void): Promise<void> {
    const started = performance.now();
    const read = this.source.read();
    let watchdog: NodeJS.Timeout | null = null;
    const timeoutMs = this.options.timeoutMs ?? 15_000;
    const timedOut = new Promise<never>((_, reject) => {
      watchdog = setTimeout(() => reject(new Error(`no reading in ${timeoutMs} ms`)), timeoutMs);
      watchdog.unref();
    });
    try {
      const reading = await Promise.race([read, timedOut]);
      this.failures = 0;
      if (this.status.stopped) return;
      this.status.delivered(1, this.now());
      try {
        sink(reading);
      } catch (error) {
        this.warnings.warn('sink threw', `the ${this.source.name} consumer threw`, { err: (error as Error).message });
      }
    } catch (error) {
      this.failures += 1;
      this.status.failing((error as Error).message);
      this.warnings.warn('read failed', `${this.source.name}: no reading`, { reason: (error as Error).message, failures: this.failures });
      // Never two at once: a read past the watchdog is still waited for.
      await read.catch(() => undefined);
    } finally {
      if (watchdog) clearTimeout(watchdog);
      const ms = performance.now() - started;
      this.timings.reads += 1;
      this.timings.lastMs = ms;
      this.timings.totalMs += ms;
    }
    const interval = this.options.intervalMs;
    const delay = this.failures === 0 ? Math.max(0, interval - (performance.now() - started)) : Math.min(interval * 2 ** this.failures, this.options.maxBackoffMs ?? 60_000);
    this.schedule(delay, sink);
  }
}

/** Logs each distinct problem once, then at most once per quiet period, saying how often it recurred. */
export class RateLimitedWarnings {
  private static readonly MAX_KINDS = 200;
  private readonly seen = new Map<string, { loggedAt: number; suppressed: number }>();

  constructor(
    private readonly log: Logger,
    private readonly quietMs: number,
  ) {}

  warn(problem: string, message: string, fields: Record<string, unknown> = {}): void {
    const now = performance.now();
    const previous = this.seen.get(problem);
    if (previous && now - previous.loggedAt < this.quietMs) {
      previous.suppressed++;
      return;
    }
    if (!previous && this.seen.size >= RateLimitedWarnings.MAX_KINDS) this.seen.clear();
    this.log.warn({ ...fields, problem, ...(previous ? { repeated: previous.suppressed } : {}) }, message);
    this.seen.set(problem, { loggedAt: now, suppressed: 0 });
  }
}
