/**
 * Host counters (CPU, load, memory, disk and network throughput) read from procfs once a second.
 * All of them come from /proc directly: systeminformation spawns shells for the CPU, disk and
 * network figures, at 15 to 40 times the CPU cost, and reads this same /proc/meminfo for memory
 * (scripts/bench-host.mjs measures both ways).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Poller } from './poller.js';
import type { Logger } from '../log/log.js';
import {
  cpuPercentages,
  diskRates,
  memoryFigures,
  netRates,
  parseDiskstats,
  parseLoadavg,
  parseMeminfo,
  parseNetDev,
  parseProcStat,
  parseUptime,
  type DiskCounters,
  type LoadAvg,
  type MemoryFigures,
  type NetCounters,
  type ProcStat,
} from './host-parse.js';
import { HealthTracker } from './health.js';
import type { CollectorHealth } from './types.js';

/** One reading of the host. Rates cover the time since the previous sample, so the first has none. */
export interface HostSample {
  /** Sidecar clock, ms since the epoch. */
  at: number;
  /** Percent of all CPUs' time not idle (iowait counts as idle), 0..100. */
  cpuPct: number | null;
  /** The same per online CPU, in CPU-number order; empty when there is no rate yet. */
  cpuPerCorePct: number[];
  iowaitPct: number | null;
  stealPct: number | null;
  load1: number | null;
  load5: number | null;
  load15: number | null;
  memUsedBytes: number | null;
  memTotalBytes: number | null;
  memAvailableBytes: number | null;
  /** Whole disks only: no partitions, loop, RAM or device-mapper devices. */
  diskReadBps: number | null;
  diskWriteBps: number | null;
  /** Every interface but `lo`. */
  netRxBps: number | null;
  netTxBps: number | null;
}

export type HostSink = (sample: HostSample) => void;

export interface HostCollectorOptions {
  log: Logger;
  intervalMs?: number;
  /** Where procfs is mounted; tests point it at fixture files. */
  procRoot?: string;
  now?: () => number;
}

const PROC_FILES = ['stat', 'loadavg', 'meminfo', 'diskstats', 'net/dev', 'uptime'] as const;
type ProcFile = (typeof PROC_FILES)[number];

interface Reading {
  at: number;
  /** Seconds since boot by the kernel's clock, read with the counters; null where /proc/uptime is not readable. */
  uptimeS: number | null;
  /** This process's monotonic clock, the fallback for rates. */
  monotonicS: number;
  stat: ProcStat | null;
  load: LoadAvg | null;
  memory: MemoryFigures | null;
  disks: DiskCounters[] | null;
  nets: NetCounters[] | null;
  unreadable: ProcFile[];
}

export class HostCollector {
  readonly name = 'host';
  private readonly procRoot: string;
  private readonly now: () => number;
  private readonly log: Logger;
  private readonly status = new HealthTracker('host');
  private reportedUnreadable = '';
  private previous: Reading | null = null;
  private sink: HostSink | null = null;
  private readonly poller: Poller;

  constructor(options: HostCollectorOptions) {
    this.poller = new Poller(options.intervalMs ?? 1000, () => this.tick());
    this.procRoot = options.procRoot ?? '/proc';
    this.now = options.now ?? Date.now;
    this.log = options.log.child({ collector: this.name });
  }

  /**
   * Takes the first reading and resolves. Without procfs (not Linux, or a sandbox hiding it) there
   * are no host figures, which is no reason to stop the sidecar: health says so and reading goes on.
   */
  async start(sink: HostSink): Promise<void> {
    if (this.sink) throw new Error('host collector already started');
    this.sink = sink;
    this.take(await this.read());
    this.poller.start();
  }

  async stop(): Promise<void> {
    this.status.stop();
    await this.poller.stop();
  }

  health(): CollectorHealth {
    return this.status.snapshot();
  }

  private async tick(): Promise<void> {
    const reading = await this.read();
    if (!this.status.stopped) this.take(reading);
  }

  private async read(): Promise<Reading> {
    const texts = await Promise.all(PROC_FILES.map((file) => readFile(path.join(this.procRoot, file), 'utf8').catch(() => null)));
    const text = (file: ProcFile) => texts[PROC_FILES.indexOf(file)] ?? null;
    const parsed = <T>(file: ProcFile, parse: (text: string) => T): T | null => {
      const content = text(file);
      return content === null ? null : parse(content);
    };
    return {
      at: this.now(),
      uptimeS: parsed('uptime', parseUptime),
      monotonicS: performance.now() / 1000,
      stat: parsed('stat', parseProcStat),
      load: parsed('loadavg', parseLoadavg),
      memory: parsed('meminfo', (content) => memoryFigures(parseMeminfo(content))),
      disks: parsed('diskstats', parseDiskstats),
      nets: parsed('net/dev', parseNetDev),
      unreadable: PROC_FILES.filter((file) => text(file) === null),
    };
  }

  private take(reading: Reading): void {
    if (reading.unreadable.length === PROC_FILES.length) this.fail(reading);
    else this.emit(reading);
  }

  private emit(reading: Reading): void {
    this.reportUnreadable(reading.unreadable);
    const sample = toHostSample(this.previous, reading);
    this.previous = reading;
    this.status.delivered(1, sample.at);
    try {
      this.sink!(sample);
    } catch (error) {
      this.log.error({ err: (error as Error).message }, 'host sample sink failed');
    }
  }

  private fail(reading: Reading): void {
    this.status.failing(`cannot read ${reading.unreadable.map((file) => path.join(this.procRoot, file)).join(', ')}`);
    this.reportUnreadable(reading.unreadable);
  }

  /** Once per change: a sandbox may hide some of /proc for good. */
  private reportUnreadable(unreadable: ProcFile[]): void {
    const key = unreadable.join(',');
    if (key === this.reportedUnreadable) return;
    this.reportedUnreadable = key;
    if (unreadable.length > 0) this.log.warn({ proc_root: this.procRoot, unreadable }, 'some host counters are not available');
    else this.log.info({ proc_root: this.procRoot }, 'all host counters available again');
  }
}

function toHostSample(previous: Reading | null, current: Reading): HostSample {
  const seconds = previous ? elapsedSeconds(previous, current) : 0;
  const cpu = previous?.stat && current.stat ? cpuPercentages(previous.stat, current.stat) : null;
  const disk = previous?.disks && current.disks ? diskRates(previous.disks, current.disks, seconds) : null;
  const net = previous?.nets && current.nets ? netRates(previous.nets, current.nets, seconds) : null;
  return {
    at: current.at,
    cpuPct: cpu?.cpuPct ?? null,
    cpuPerCorePct: cpu?.cpuPerCorePct ?? [],
    iowaitPct: cpu?.iowaitPct ?? null,
    stealPct: cpu?.stealPct ?? null,
    load1: current.load?.load1 ?? null,
    load5: current.load?.load5 ?? null,
    load15: current.load?.load15 ?? null,
    memUsedBytes: current.memory?.usedBytes ?? null,
    memTotalBytes: current.memory?.totalBytes ?? null,
    memAvailableBytes: current.memory?.availableBytes ?? null,
    diskReadBps: disk?.diskReadBps ?? null,
    diskWriteBps: disk?.diskWriteBps ?? null,
    netRxBps: net?.netRxBps ?? null,
    netTxBps: net?.netTxBps ?? null,
  };
}

/** The kernel's clock, read alongside the counters, as sysstat does; our own where it is missing. */
function elapsedSeconds(previous: Reading, current: Reading): number {
  if (previous.uptimeS !== null && current.uptimeS !== null) return current.uptimeS - previous.uptimeS;
  return current.monotonicS - previous.monotonicS;
}
