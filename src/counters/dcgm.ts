/**
 * GPU counters scraped from the node's dcgm-exporter, for pods that cannot see the GPUs themselves.
 * One scrape at a time on a fixed interval; a failing exporter is retried for as long as we run.
 */
import { performance } from 'node:perf_hooks';
import { Poller } from './poller.js';
import type { Logger } from '../log/log.js';
import { describeNoMatch, describeSelector, describeUnreadable, hasReadableSeries, matchesSelector, normaliseSelector, parseDcgmSeries, toGpuSamples, type DcgmSelector } from './dcgm-parse.js';
import { HealthTracker } from './health.js';
import type { CollectorHealth, GpuCollector, GpuSample, GpuSink } from './types.js';

export interface DcgmCollectorOptions {
  /** The exporter's metrics endpoint, e.g. http://node:9400/metrics. */
  url: string;
  select: DcgmSelector;
  log: Logger;
  intervalMs?: number;
  /** Longest wait for one scrape. A slow exporter only stretches the interval, since scrapes never overlap. */
  timeoutMs?: number;
  now?: () => number;
}

const DEFAULT_INTERVAL_MS = 1000;
/** A busy node's exporter can take seconds to render; this only has to catch a connection that hangs. */
const DEFAULT_TIMEOUT_MS = 5_000;
/** An unchanged error is logged again after this long, so a long outage is not silent. */
const REPEAT_ERROR_LOG_MS = 60_000;

export class DcgmCollector implements GpuCollector {
  readonly name = 'dcgm';
  private readonly intervalMs: number;
  private readonly timeoutMs: number;
  private readonly now: () => number;
  private readonly log: Logger;
  private readonly status = new HealthTracker('dcgm');
  private loggedError: { message: string; at: number } | null = null;
  private sink: GpuSink | null = null;
  private readonly poller: Poller;
  private readonly stopping = new AbortController();
  private readonly options: DcgmCollectorOptions;

  constructor(options: DcgmCollectorOptions) {
    this.options = { ...options, select: normaliseSelector(options.select) };
    this.intervalMs = options.intervalMs ?? DEFAULT_INTERVAL_MS;
    this.timeoutMs = options.timeoutMs ?? Math.max(DEFAULT_TIMEOUT_MS, this.intervalMs);
    this.poller = new Poller(this.intervalMs, () => this.tick());
    this.now = options.now ?? Date.now;
    this.log = options.log.child({ collector: this.name });
  }

  async start(sink: GpuSink): Promise<void> {
    if (this.sink) throw new Error('dcgm collector already started');
    this.sink = sink;
    let samples: GpuSample[];
    try {
      samples = await this.scrape();
    } catch (error) {
      // No retry and no warning here: the registry falls back to another source and says why.
      const message = describeError(error, this.timeoutMs);
      if (!this.status.stopped) this.status.failing(message);
      throw new Error(`dcgm-exporter at ${this.options.url}: ${message}`);
    }
    this.deliver(samples);
    this.log.info({ url: this.options.url, select: describeSelector(this.options.select), gpus: samples.length }, 'scraping dcgm-exporter');
    this.poller.start();
  }

  async stop(): Promise<void> {
    this.status.stop();
    this.stopping.abort();
    await this.poller.stop();
  }

  health(): CollectorHealth {
    return this.status.snapshot();
  }

  private async tick(): Promise<void> {
    try {
      this.deliver(await this.scrape());
    } catch (error) {
      if (!this.status.stopped) this.warnOfFailure(describeError(error, this.timeoutMs), error instanceof UnreadableError);
    }
  }

  private async scrape(): Promise<GpuSample[]> {
    const text = await this.fetchMetrics();
    const at = this.now();
    let series: ReturnType<typeof parseDcgmSeries> = [];
    try {
      series = parseDcgmSeries(text);
    } catch {
      // below: said as what the page is instead
    }
    if (!hasReadableSeries(series)) throw new UnreadableError(`serves nothing stepscope can read as GPU counters: ${describeUnreadable(text)}`);
    const samples = toGpuSamples(
      series.filter((one) => matchesSelector(one.labels, this.options.select)),
      at,
    );
    if (samples.length === 0) throw new Error(describeNoMatch(series, this.options.select));
    return samples;
  }

  private async fetchMetrics(): Promise<string> {
    const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(this.timeoutMs)]);
    const response = await fetch(this.options.url, { signal, headers: { accept: 'text/plain' } });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`HTTP ${response.status} ${response.statusText}`.trim());
    }
    return response.text();
  }

  private deliver(samples: GpuSample[]): void {
    if (this.status.stopped) return;
    if (this.status.state === 'failing') this.log.info({ url: this.options.url, gpus: samples.length }, 'dcgm-exporter scrapes work again');
    this.loggedError = null;
    this.status.delivered(samples.length, samples[0]!.at);
    try {
      this.sink!(samples);
    } catch (error) {
      this.log.error({ err: (error as Error).message }, 'GPU sample sink failed');
    }
  }

  private warnOfFailure(message: string, unreadable: boolean): void {
    this.status.failing(message);
    const at = performance.now();
    // A page that cannot be read does not change by waiting: said once; an outage again every minute.
    if (this.loggedError?.message === message && (unreadable || at - this.loggedError.at < REPEAT_ERROR_LOG_MS)) return;
    this.loggedError = { message, at };
    this.log.warn({ url: this.options.url, err: message }, 'dcgm-exporter scrape failed; retrying');
  }
}

/** The exporter answered, but with nothing that can be read as GPU counters. */
class UnreadableError extends Error {}

/** fetch() hides the reason (refused, unknown host) in `cause`, and a timeout in a DOMException. */
function describeError(error: unknown, timeoutMs: number): string {
  if (!(error instanceof Error)) return String(error);
  if (error.name === 'TimeoutError') return `no answer within ${timeoutMs} ms`;
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message}: ${cause.message}` : error.message;
}
