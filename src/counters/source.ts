// performance is the global one (Node 16+), which a test's fake timers can drive.
import type { Logger } from '../log/log.js';
import { HealthTracker } from './health.js';
import type { CollectorHealth } from './types.js';
import { sidecarNow } from '../model/clock.js';

/**
 * A source of readings the node_exporter way: the source only reads, once, when asked; timing,
 * backoff, the watchdog, health and the rate-limited log are Supervised's, the same for every source.
 */
export interface Source<T> {
  readonly name: string;
  /**
   * One reading; rejects with why there is none (then nothing is delivered: not measured, never empty).
   * `signal` aborts when the supervisor gives up on the read (its watchdog, or stop); `warn` says a
   * problem with a part of it that the reading goes on despite.
   */
  read(signal: AbortSignal, warn: Warn): Promise<T>;
}

/** The supervisor's rate-limited log: each distinct `problem` once per quiet period. */
export type Warn = (problem: string, message: string, fields?: Record<string, unknown>) => void;

/**
 * A source whose readings, after the first, come as a stream: a long-lived child printing them
 * (nvidia-smi -lms). `read` gives the first, as any source's; then `run` streams until it ends, and
 * the supervisor runs it again (with backoff) until stopped. A run counts as a restart of the child.
 */
export interface StreamSource<T> extends Source<T> {
  /**
   * One run of the stream: each reading to `out` as it comes; settles when the stream ends, rejecting
   * with why (a ReadError's problem and fields go into the log). `signal` ends it, its reason 'stop'
   * (end gently) or 'stalled' (the watchdog: at once); the run must then end its child and settle.
   */
  run(out: StreamOutput<T>, signal: AbortSignal): Promise<void>;
}

export interface StreamOutput<T> {
  /** A reading, with the sidecar's own time spent producing it (its share of the self-timing). */
  emit(reading: T, costMs: number): void;
  /** A problem with a part of the output; readings go on. */
  warn: Warn;
}

/** Why a read or a stream failed, with what the log should say of it: `problem` is what counts as the same problem again. */
export class ReadError extends Error {
  constructor(
    message: string,
    readonly problem: string = message,
    readonly fields: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** A source as it runs: what the registry starts and stops and the outputs ask how it fares. */
export interface Collector<T> {
  readonly name: string;
  /** Whether it restarts a child process of its own (then its health counts the restarts); a polled source has none. */
  readonly restartsChild: boolean;
  /** Resolves once the first reading has settled; with `required`, rejects (and stops) if it failed. */
  start(sink: (reading: T) => void, options?: { required?: boolean }): Promise<void>;
  stop(): Promise<void>;
  /** The sidecar's state changed (a job went live, or the last one ended): a paced wait, or a stream's settings, are looked at now. */
  repace(): void;
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

/** How a stream is watched: a run without live readings for `stallMs` is ended and run again. */
export interface StreamOptions<T> {
  stallMs: number;
  /** A run that delivered and lasted this long earns the first backoff again. */
  resetAfterMs: number;
  /** Whether a reading is live (has figures): only those keep the watchdog quiet and make the health ok. Default: all. */
  live?: (reading: T) => boolean;
  /**
   * Whether the running stream's settings are out of date (its pace: nvidia-smi's interval while a
   * job is live or not). Asked when told the sidecar's state changed (`repace`); then the run is ended
   * gently and run again at once, which is neither a failure nor a restart.
   */
  retune?: () => boolean;
}

export interface SupervisedOptions<T> {
  /** A read every this often, timed from the previous start; null: one read only (the inventory, a stream's first). */
  intervalMs: number | null;
  /**
   * The interval now, where it follows the sidecar's state (slower while no job is live); it takes
   * the place of `intervalMs` between reads. A wait under way is looked at again when told the state
   * changed (`repace`), so a pace that quickens takes effect at once rather than at the end of the
   * slow wait, with no wake to look in between.
   */
  pace?: () => number;
  log: Logger;
  /** A read not settled by then is a failure (it is aborted, and still awaited before the next: never two at once). Default 15 s. */
  timeoutMs?: number;
  /** After failures in a row the wait doubles each time, from this (default twice the interval) up to `maxBackoffMs` (default 60 s). */
  firstBackoffMs?: number;
  maxBackoffMs?: number;
  now?: () => number;
  /** Samples a reading holds, for its health (a GPU source's reading is one sample per GPU); default 1. */
  count?: (reading: T) => number;
}

const WARNING_QUIET_MS = 5 * 60_000;
/** The longest a stream's watchdog waits between its looks for a stall (a shorter stallMs is looked at as often). */
const WATCHDOG_MAX_MS = 5_000;

/**
 * Runs one source: a read every interval (timed from the previous start), backoff after failures;
 * a StreamSource's stream after its first read, with a watchdog, run again with backoff when it ends.
 */
export class Supervised<T> implements Collector<T> {
  readonly name: string;
  readonly restartsChild: boolean;
  private readonly stream: { source: StreamSource<T>; options: StreamOptions<T> } | null;
  private readonly status: HealthTracker;
  private readonly warnings: RateLimitedWarnings;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly stopping = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  /** What repace does now: look at the paced wait under way, or at the running stream's settings; null when neither. */
  private repaceNow: (() => void) | null = null;
  /** No read is scheduled any more: stopped, or a required first read failed. */
  private ended = false;
  private running: Promise<boolean> | null = null;
  private streaming: Promise<void> | null = null;
  private failures = 0;
  private readonly timings: SourceTiming = { reads: 0, lastMs: null, totalMs: 0 };

  constructor(source: StreamSource<T>, options: SupervisedOptions<T> & { stream: StreamOptions<T> });
  constructor(source: Source<T>, options: SupervisedOptions<T>);
  constructor(
    private readonly source: Source<T> | StreamSource<T>,
    private readonly options: SupervisedOptions<T> & { stream?: StreamOptions<T> },
  ) {
    this.name = source.name;
    this.stream = 'run' in source && options.stream ? { source, options: options.stream } : null;
    this.restartsChild = this.stream !== null;
    this.log = options.log.child({ source: source.name });
    this.status = new HealthTracker(source.name);
    this.warnings = new RateLimitedWarnings(this.log, WARNING_QUIET_MS);
    this.now = options.now ?? sidecarNow;
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
    this.stopping.abort('stop');
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
    await this.streaming;
  }

  private readonly warn: Warn = (problem, message, fields = {}) => this.warnings.warn(problem, message, fields);

  health(): CollectorHealth {
    return this.status.snapshot();
  }

  timing(): SourceTiming {
    return { ...this.timings };
  }

  private timed(ms: number): void {
    this.timings.reads += 1;
    this.timings.lastMs = ms;
    this.timings.totalMs += ms;
  }

  /** The wait after `failures` failures in a row: doubling from the first backoff up to the most. */
  private backoffMs(): number {
    const first = this.options.firstBackoffMs ?? 2 * (this.options.intervalMs ?? 1_000);
    return Math.min(first * 2 ** (this.failures - 1), this.options.maxBackoffMs ?? 60_000);
  }

  private schedule(delayMs: number, sink: (reading: T) => void): void {
    if (this.ended) return;
    this.timer = setTimeout(() => (this.running = this.tick(sink, false)), delayMs);
    this.timer.unref();
  }

  /** The next read at `startedAt` (the last read's start) plus the pace, which is looked at again when told it may have changed (repace). */
  private schedulePaced(startedAt: number, pace: () => number, sink: (reading: T) => void): void {
    const leftMs = () => startedAt + pace() - performance.now();
    const wait = () => {
      const timer = setTimeout(check, Math.max(0, leftMs()));
      timer.unref();
      this.timer = timer;
      this.repaceNow = () => (clearTimeout(timer), check());
    };
    const check = () => {
      this.repaceNow = null;
      if (this.ended) return;
      if (leftMs() <= 0) return void (this.running = this.tick(sink, false));
      wait();
    };
    if (!this.ended) wait();
  }

  repace(): void {
    this.repaceNow?.();
  }

  /** A reading, to the health and the sink; `costMs` is what producing it took, the sink's time is added. */
  private deliver(reading: T, sink: (reading: T) => void, costMs: number, live: boolean): void {
    const started = performance.now();
    this.status.delivered(this.options.count?.(reading) ?? 1, this.now(), live);
    try {
      sink(reading);
    } catch (error) {
      this.warnings.warn('sink threw', `the ${this.name} consumer threw`, { err: (error as Error).message });
    } finally {
      this.timed(costMs + (performance.now() - started));
    }
  }

  /** A failure, in the health and (each distinct problem once per quiet period: a repeated one is not news) the log. */
  private failed(error: unknown, message: string, fields: Record<string, unknown>): void {
    const why = (error as Error).message;
    const problem = error instanceof ReadError ? error.problem : why;
    this.status.failing(why);
    this.warnings.warn(`read failed: ${problem}`, message, { ...(error instanceof ReadError ? error.fields : {}), err: why, failures: this.failures, ...fields });
  }

  /**
   * The signal of one read: aborted by stop, or once `timeoutMs` has passed, until the read settles.
   * A timer cleared when it settles, not AbortSignal.timeout and .any: those fire 15 s later whether or
   * not the read is long done, making an exception each time, which was a tenth of an idle sidecar's CPU.
   */
  private deadline(timeoutMs: number): { signal: AbortSignal; settled: () => void } {
    const controller = new AbortController();
    const stopping = this.stopping.signal;
    const onStop = () => controller.abort(stopping.reason);
    const timer = setTimeout(() => controller.abort(new Error(`no reading in ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
    if (stopping.aborted) onStop();
    else stopping.addEventListener('abort', onStop, { once: true });
    return {
      signal: controller.signal,
      settled: () => {
        clearTimeout(timer);
        stopping.removeEventListener('abort', onStop);
      },
    };
  }

  /** One read, delivered or failed; true when delivered. */
  private async tick(sink: (reading: T) => void, quiet: boolean): Promise<boolean> {
    const started = performance.now();
    const timeoutMs = this.options.timeoutMs ?? 15_000;
    const { signal, settled } = this.deadline(timeoutMs);
    const read = this.source.read(signal, this.warn);
    void read.then(settled, settled);
    const givenUp = new Promise<never>((_, reject) => {
      // Stopped, or the deadline's own reason: "no reading in … ms".
      const onAbort = () => reject(this.ended ? new Error('stopped') : signal.reason);
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
      delivered = true;
      this.deliver(reading, sink, performance.now() - started, this.stream?.options.live?.(reading) ?? true);
    } catch (error) {
      // Never two at once: a read past the watchdog is still waited for.
      await read.catch(() => undefined);
      if (this.ended) return false;
      this.timed(performance.now() - started);
      this.failures += 1;
      // A required first read's failure is said by whoever required it.
      if (quiet) this.status.failing((error as Error).message);
      else this.failed(error, `${this.name}: no reading`, {});
    }
    if (this.stream && delivered) {
      this.streaming = this.runStream(this.stream.source, this.stream.options, sink);
      return true;
    }
    const interval = this.options.intervalMs;
    if (interval === null && !this.stream) return delivered;
    const pace = this.options.pace;
    if (this.failures === 0 && pace) this.schedulePaced(started, pace, sink);
    else this.schedule(this.failures === 0 ? Math.max(0, interval! - (performance.now() - started)) : this.backoffMs(), sink);
    return delivered;
  }

  /** The stream, run again after each end (with backoff), until stopped; a run without live readings for stallMs is ended. */
  private async runStream(source: StreamSource<T>, options: StreamOptions<T>, sink: (reading: T) => void): Promise<void> {
    let retuned = false;
    for (let runs = 0; !this.ended; runs++) {
      if (runs > 0 && !retuned) this.status.restarted();
      const ending = new AbortController();
      const startedAt = performance.now();
      let lastLiveAt = startedAt;
      let delivered = false;
      this.repaceNow = () => {
        if (!ending.signal.aborted && options.retune?.()) ending.abort('retune');
      };
      const watchdog = setInterval(
        () => {
          if (ending.signal.aborted) return;
          const quietMs = performance.now() - lastLiveAt;
          if (quietMs < options.stallMs) return;
          this.warnings.warn('stalled', `${this.name} has delivered no live reading for ${Math.round(quietMs)} ms; ending it to run again`, { quiet_ms: Math.round(quietMs) });
          ending.abort('stalled');
        },
        Math.min(options.stallMs, WATCHDOG_MAX_MS),
      );
      watchdog.unref();
      const out: StreamOutput<T> = {
        emit: (reading, costMs) => {
          // A reading the stopped or stalled run still printed is not delivered.
          if (this.ended || ending.signal.aborted) return;
          const live = options.live?.(reading) ?? true;
          if (live) lastLiveAt = performance.now();
          if (!delivered && this.failures > 0) this.log.info({ after: this.failures }, `${this.name}: reading again`);
          delivered = true;
          this.deliver(reading, sink, costMs, live);
        },
        warn: this.warn,
      };
      let why: unknown = new ReadError('the stream ended');
      try {
        await source.run(out, AbortSignal.any([this.stopping.signal, ending.signal]));
      } catch (error) {
        why = error;
      } finally {
        clearInterval(watchdog);
        this.repaceNow = null;
      }
      if (this.ended) return;
      retuned = ending.signal.reason === 'retune';
      if (retuned) continue;
      const livedMs = performance.now() - startedAt;
      if (delivered && livedMs >= options.resetAfterMs) this.failures = 0;
      this.failures += 1;
      const delayMs = this.backoffMs();
      const problem = why instanceof ReadError ? why.problem : (why as Error).message;
      this.failed(why, `${this.name}: ${problem}; running it again in ${delayMs} ms`, { lived_ms: Math.round(livedMs), restart_in_ms: delayMs });
      await sleep(delayMs, this.stopping.signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Logs each distinct problem once, then at most once per quiet period, saying how often it recurred. */
class RateLimitedWarnings {
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
