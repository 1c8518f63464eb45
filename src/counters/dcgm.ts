/**
 * GPU counters scraped from the node's dcgm-exporter, for pods that cannot see the GPUs themselves:
 * one scrape a reading, run by the one supervisor like every source.
 */
import { describeNoMatch, describeUnreadable, hasReadableSeries, normaliseSelector, parseDcgmSeries, selectedSamples, type DcgmSelector } from './dcgm-parse.js';
import type { Source } from './source.js';
import type { GpuSample } from './types.js';
import { sidecarNow } from '../model/clock.js';

export interface DcgmSourceOptions {
  /** The exporter's metrics endpoint, e.g. http://node:9400/metrics. */
  url: string;
  select: DcgmSelector;
  now?: () => number;
}

export class DcgmSource implements Source<GpuSample[]> {
  readonly name = 'dcgm';
  private readonly select: DcgmSelector;
  private readonly now: () => number;

  constructor(private readonly options: DcgmSourceOptions) {
    this.select = normaliseSelector(options.select);
    this.now = options.now ?? sidecarNow;
  }

  async read(signal: AbortSignal): Promise<GpuSample[]> {
    const text = await this.fetchMetrics(signal);
    const at = this.now();
    let series: ReturnType<typeof parseDcgmSeries> = [];
    try {
      series = parseDcgmSeries(text);
    } catch {
      // below: said as what the page is instead
    }
    if (!hasReadableSeries(series)) throw new Error(`serves nothing stepscope can read as GPU counters: ${describeUnreadable(text)}`);
    const samples = selectedSamples(series, this.select, at);
    if (samples.length === 0) throw new Error(describeNoMatch(series, this.select));
    return samples;
  }

  private async fetchMetrics(signal: AbortSignal): Promise<string> {
    try {
      const response = await fetch(this.options.url, { signal, headers: { accept: 'text/plain' } });
      if (!response.ok) {
        await response.body?.cancel();
        throw new Error(`HTTP ${response.status} ${response.statusText}`.trim());
      }
      return await response.text();
    } catch (error) {
      throw new Error(describeError(error));
    }
  }
}

/** fetch() hides the reason (refused, unknown host) in `cause`. */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message}: ${cause.message}` : error.message;
}
