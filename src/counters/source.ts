import { performance } from 'node:perf_hooks';
import type { Logger } from '../log/log.js';
import { HealthTracker } from './health.js';
import type { CollectorHealth } from './types.js';

/**
 * A source of readings the node_exporter way: the source only reads, once, when asked; timing,
 * backoff, the watchdog, health and the rate-limited log are Supervised's, the same for every source.
 */
export interface Source<T> {
  readonly name: string;
  /**
   * One reading; rejects with why there is none (then nothing is delivered: not measured, never empty).
   * `signal` aborts when the supervisor gives up on the read (its watchdog, or stop).
   */
  read(signal: AbortSignal): Promise<T>;
}

/** A source as it runs: what the registry starts and stops and the outputs ask how it fares. */
export interface Collector<T> {
  readonly name: string;
  /** Whether it restarts a child process of its own (then its health counts the restarts); a polled source has none. */
  readonly restartsChild: boolean;
  /** Resolves once the first reading has settled; with `required`, rejects (and stops) if it failed. */
  start(sink: (reading: T) => void, options?: { required?: boolean }): Promise<void>;
  stop(): Promise<void>;
  health(): CollectorHealth;
  /** What its readings cost: its self-timing. */
  timing(): SourceTiming;
}

/** What a source's reads have cost, as node_exporter times each collector's scrape. */
export interface SourceTiming {
  reads: number;
  /** The last read's wall time, settled or given up on; null before the first. */
  lastMs: number | null;
  totalMs: number;
}

export interface SupervisedOptions<T> {
  /** A read every this often, timed from the previous start; null: one read only (the inventory). */
  intervalMs: number | null;
  log: Logger;
  /** A read not settled by then is a failure (it is aborted, and still awaited before the next: never two at once). Default 15 s. */
  timeoutMs?: number;
  /** After failures in a row the wait doubles each time, from the interval up to this. Default 60 s. */
  maxBackoffMs?: number;
  now?: () => number;
  /** Samples a reading holds, for its health (a GPU source's reading is one sample per GPU); default 1. */
  count?: (reading: T) => number;
}

const WARNING_QUIET_MS = 5 * 60_000;

/** Runs one Source: a read every interval (timed from the previous start), backoff after failures. */
export class Supervised<T> implements Collector<T> {
  readonly name: string;
  readonly restartsChild = false;
  private readonly status: HealthTracker;
  private readonly warnings: RateLimitedWarnings;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly stopping = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  /** No read is scheduled any more: stopped, or a required first read failed. */
  private ended = false;
  private running: Promise<boolean> | null = null;
  private failures = 0;
  private readonly timings: SourceTiming = { reads: 0, lastMs: null, totalMs: 0 };

  constructor(
    private readonly source: Source<T>,
    private readonly options: SupervisedOptions<T>,
  ) {
    this.name = source.name;
    this.log = options.log.child({ source: source.name });
    this.status = new HealthTracker(source.name);
    this.warnings = new RateLimitedWarnings(this.log, WARNING_QUIET_MS);
    this.now = options.now ?? Date.now;
  }

  async start(sink: (reading: T) => void, options: { required?: boolean } = {}): Promise<void> {
    this.running = this.tick(sink, options.required === true);
    if (await this.running) return;
    if (!options.required) return;
    await this.end();
    // Said by whoever required it (the registry falls back and says why), not as a retry.
    throw new Error(this.status.snapshot().lastError ?? 'no reading');
  }

  async stop(): Promise<void> {
    this.status.stop();
    await this.end();
  }

  private async end(): Promise<void> {
    this.ended = true;
    this.stopping.abort();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  health(): CollectorHealth {
    return this.status.snapshot();
  }

  timing(): SourceTiming {
    return { ...this.timings };
  }

  private schedule(delayMs: number, sink: (reading: T) => void): void {
    if (this.ended) return;
    this.timer = setTimeout(() => (this.running = this.tick(sink, false)), delayMs);
    this.timer.unref();
  }

  /** One read, delivered or failed; true when delivered. */
  private async tick(sink: (reading: T) => void, quiet: boolean): Promise<boolean> {
    const started = performance.now();
    const timeoutMs = this.options.timeoutMs ?? 15_000;
    const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(timeoutMs)]);
    const read = this.source.read(signal);
    const givenUp = new Promise<never>((_, reject) => {
      const onAbort = () => reject(new Error(this.ended ? 'stopped' : `no reading in ${timeoutMs} ms`));
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    givenUp.catch(() => undefined);
    let delivered = false;
    try {
      const reading = await Promise.race([read, givenUp]);
      if (this.ended) return false;
      if (this.failures > 0) this.log.info({ after: this.failures }, `${this.name}: reading again`);
      this.failures = 0;
      this.status.delivered(this.options.count?.(reading) ?? 1, this.now());
      delivered = true;
      try {
        sink(reading);
      } catch (error) {
        this.warnings.warn('sink threw', `the ${this.name} consumer threw`, { err: (error as Error).message });
      }
    } catch (error) {
      // Never two at once: a read past the watchdog is still waited for.
      await read.catch(() => undefined);
      if (this.ended) return false;
      const message = (error as Error).message;
      this.failures += 1;
      this.status.failing(message);
      // Each distinct problem once (then once per quiet period): a changed error is news, a repeated one is not.
      if (!quiet) this.warnings.warn(`read failed: ${message}`, `${this.name}: no reading`, { err: message, failures: this.failures });
    } finally {
      const ms = performance.now() - started;
      this.timings.reads += 1;
      this.timings.lastMs = ms;
      this.timings.totalMs += ms;
    }
    const interval = this.options.intervalMs;
    if (interval === null) return delivered;
    const delay = this.failures === 0 ? Math.max(0, interval - (performance.now() - started)) : Math.min(interval * 2 ** this.failures, this.options.maxBackoffMs ?? 60_000);
    this.schedule(delay, sink);
    return delivered;
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
