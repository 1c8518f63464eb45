import { parseDcgmSeries, selectedSamples, type DcgmSelector } from '../../src/counters/dcgm-parse.js';
import type { HostSample } from '../../src/counters/host.js';
import type { GpuSample } from '../../src/counters/types.js';

/** Helpers for tests that read counters from captured text; the sidecar's collectors do the same in steps of their own. */

/** A captured dcgm-exporter page as the DCGM source turns it into samples: its one path, from text. */
export function parseDcgmMetrics(text: string, select: DcgmSelector, at: number): GpuSample[] {
  return selectedSamples(parseDcgmSeries(text), select, at);
}

/**
 * Field names from a captured `--format=csv` header ("power.draw [W]" → "power.draw"). The collector
 * asks with `noheader` and knows its fields; only captures carry a header.
 */
export function fieldsFromHeader(header: string): string[] {
  return header.split(',').map((column) => column.trim().replace(/\s*\[[^\]]*\]$/, ''));
}

/** The names a captured `--query-compute-apps` header prints for the fields asked ("used_gpu_memory [MiB]" for used_memory). */
const ALIASES: Readonly<Record<string, string>> = { used_gpu_memory: 'used_memory', uuid: 'gpu_uuid', name: 'process_name' };

export function computeAppFields(header: string): string[] {
  return fieldsFromHeader(header).map((field) => ALIASES[field] ?? field);
}

/** A reading with nothing in it, for a test to fill. */
export function emptyHostSample(at: number): HostSample {
  return {
    at,
    cpuPct: null,
    cpuPerCorePct: [],
    iowaitPct: null,
    stealPct: null,
    load1: null,
    load5: null,
    load15: null,
    memUsedBytes: null,
    memTotalBytes: null,
    memAvailableBytes: null,
    diskReadBps: null,
    diskWriteBps: null,
    netRxBps: null,
    netTxBps: null,
    netInterfaces: [],
    netLeftOut: [],
    cpuPressure: null,
    memoryPressure: null,
    ioPressure: null,
  };
}
