/**
 * Host counters (CPU, load, memory, disk and network throughput, pressure stalls) read from procfs
 * once a second.
 * All of them come from /proc directly: systeminformation spawns shells for the CPU, disk and
 * network figures, at 15 to 40 times the CPU cost, and reads this same /proc/meminfo for memory
 * (scripts/bench-host.mjs measures both ways).
 */
import { readFileSync } from 'node:fs';
import { access, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Source } from './source.js';
import type { Logger } from '../log/log.js';
import {
  chooseInterfaces,
  cpuPercentages,
  diskRates,
  memoryFigures,
  netRates,
  parseDiskstats,
  parseLoadavg,
  parseMeminfo,
  parseNetDev,
  parsePressure,
  parseProcStat,
  parseUptime,
  stallPercent,
  type DiskCounters,
  type LoadAvg,
  type MemoryFigures,
  type NetCounters,
  type PressureFile,
  type ProcStat,
} from './host-parse.js';
import { identity, parsePidStat, topProcesses, visibilityOf, type PidStat, type ProcessVisibility, type TopProcess } from './proc-pid.js';
import { sidecarNow } from '../model/clock.js';

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
  /** Over the interfaces in netInterfaces: physical ones, not loopback, bridges, veths, overlays or tunnels. */
  netRxBps: number | null;
  netTxBps: number | null;
  netInterfaces: string[];
  /** Interfaces left out of the network figures, since their bytes also cross a counted one. */
  netLeftOut: string[];
  /** Pressure stall information (PSI) where the kernel has it (4.20 on, not booted with psi=0). */
  cpuPressure: HostPressure | null;
  memoryPressure: HostPressure | null;
  ioPressure: HostPressure | null;
  /** The busiest processes the sidecar can see; absent where not read (no job live, or a recording before it), null where /proc/<pid> is not readable. */
  processes?: HostProcesses | null;
}

export interface HostProcesses {
  /** `node`: the sidecar sees the node's processes; `pod`: only those of its own pid namespace. */
  visible: ProcessVisibility;
  /** Processes read this time, and whether there were more than the bound (`MAX_PIDS`) or the time box allowed. */
  read: number;
  truncated: boolean;
  /** The busiest since the previous sample, with their ancestors (to leave out a job's process trees). */
  top: TopProcess[];
}

/** At most this many /proc/<pid>/stat a sample, in at most this long: a node with 50,000 processes costs what 2,048 do. */
export const MAX_PIDS = 2048;
const PIDS_TIME_BOX_MS = 150;
/** Pids read between two turns of the event loop: well under a millisecond of blocking. */
const PIDS_PER_SLICE = 64;

/** A procfs file's text, null where it is absent or unreadable. */
function readText(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** One /proc/<pid>/stat, null where the process is gone or the file unreadable. */
function readPidStat(file: string): PidStat | null {
  try {
    return parsePidStat(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

/**
 * Of the elapsed time, the share in which some task (`some`), or every non-idle task (`full`),
 * waited for the resource: the kernel's 10 s average, and the percent over the last sample period
 * from its totals (µs since boot). CPU `full` is undefined system-wide (psi.rst), so null.
 */
export interface HostPressure {
  someAvg10: number | null;
  somePct: number | null;
  someTotalUs: number | null;
  fullAvg10: number | null;
  fullPct: number | null;
  fullTotalUs: number | null;
}


export interface HostSourceOptions {
  log: Logger;
  /** Where procfs is mounted; tests point it at fixture files. */
  procRoot?: string;
  /**
   * Where sysfs is, to tell physical interfaces from virtual ones: beside procfs (/sys for /proc,
   * /host/sys for /host/proc) when procfs is mounted under a directory named `proc`; null for none.
   */
  sysRoot?: string | null;
  now?: () => number;
  /**
   * Whether anything needs the node's processes now (a job is live): the scan of up to MAX_PIDS
   * /proc/<pid>/stat files is most of an idle sidecar's CPU (issue 24, target 8). Always, if not given.
   */
  processesWanted?: () => boolean;
}

const PROC_FILES = ['stat', 'loadavg', 'meminfo', 'diskstats', 'net/dev', 'uptime'] as const;
type ProcFile = (typeof PROC_FILES)[number];
/** Absent on kernels without PSI, which is no reason to warn. */
const PRESSURE_FILES = { cpu: 'pressure/cpu', memory: 'pressure/memory', io: 'pressure/io' } as const;
type Resource = keyof typeof PRESSURE_FILES;

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
  /** Per interface, whether sysfs shows it on a device; null without sysfs. */
  devices: Map<string, boolean> | null;
  pressure: Record<Resource, PressureFile | null>;
  unreadable: ProcFile[];
  /** Undefined where not read: nothing wanted the processes. */
  pids: { stats: Map<string, PidStat>; visible: ProcessVisibility; truncated: boolean } | null | undefined;
}

/** The host's counters, one reading a call; the rates are over the time since the previous reading. */
export class HostSource implements Source<HostSample> {
  readonly name = 'host';
  private readonly procRoot: string;
  /** Whether every process of the node is visible, read once (see readPids). */
  private visible: ProcessVisibility | undefined;
  private readonly sysRoot: string | null;
  /** Whether an interface sits on a device does not change while it exists. */
  private readonly deviceCache = new Map<string, boolean>();
  private readonly now: () => number;
  private readonly log: Logger;
  private reportedUnreadable = '';
  private previous: Reading | null = null;
  private readonly processesWanted: () => boolean;

  constructor(options: HostSourceOptions) {
    this.processesWanted = options.processesWanted ?? (() => true);
    this.procRoot = options.procRoot ?? '/proc';
    this.sysRoot = options.sysRoot !== undefined ? options.sysRoot : path.basename(this.procRoot) === 'proc' ? path.join(path.dirname(this.procRoot), 'sys') : null;
    this.now = options.now ?? sidecarNow;
    this.log = options.log.child({ source: this.name });
  }

  /**
   * Without procfs (not Linux, or a sandbox hiding it) there are no host figures, which is no reason
   * to stop the sidecar: the read fails, its supervisor says so in its health and reads on.
   */
  read(): Promise<HostSample> {
    return this.sample();
  }

  /** One sample: its rates over the time since the previous reading; throws where no host file can be read. */
  private async sample(): Promise<HostSample> {
    const reading = await this.readProc();
    this.reportUnreadable(reading.unreadable);
    if (reading.unreadable.length === PROC_FILES.length) {
      throw new Error(`cannot read ${reading.unreadable.map((file) => path.join(this.procRoot, file)).join(', ')}`);
    }
    const sample = toHostSample(this.previous, reading);
    this.previous = reading;
    return sample;
  }

  private async readProc(): Promise<Reading> {
    // Read synchronously: nine small procfs files a second, whose promise-based reads (open, fstat,
    // read, close, each a promise) cost the idle sidecar more than the reads (issue 24, target 8).
    const texts = PROC_FILES.map((file) => readText(path.join(this.procRoot, file)));
    const text = (file: ProcFile) => texts[PROC_FILES.indexOf(file)] ?? null;
    const parsed = <T>(file: ProcFile, parse: (text: string) => T): T | null => {
      const content = text(file);
      return content === null ? null : parse(content);
    };
    const [cpu, memory, io] = Object.values(PRESSURE_FILES).map((file) => {
      const content = readText(path.join(this.procRoot, file));
      return content === null ? null : parsePressure(content);
    });
    const nets = parsed('net/dev', parseNetDev);
    return {
      at: this.now(),
      uptimeS: parsed('uptime', parseUptime),
      monotonicS: performance.now() / 1000,
      stat: parsed('stat', parseProcStat),
      load: parsed('loadavg', parseLoadavg),
      memory: parsed('meminfo', (content) => memoryFigures(parseMeminfo(content))),
      disks: parsed('diskstats', parseDiskstats),
      nets,
      devices: nets ? await this.devicesOf(nets.map((net) => net.iface)) : null,
      pressure: { cpu: cpu ?? null, memory: memory ?? null, io: io ?? null },
      unreadable: PROC_FILES.filter((file) => text(file) === null),
      pids: this.processesWanted() ? await this.readPids() : undefined,
    };
  }

  /**
   * Every /proc/<pid>/stat up to the bound, newest pids first: where the bound or the time box cuts,
   * it cuts long-lived daemons rather than the training job and its loader workers, which started
   * last. Null where procfs lists none.
   */
  private async readPids(): Promise<Reading['pids']> {
    const names = await readdir(this.procRoot).catch(() => [] as string[]);
    const pids = names.filter((name) => /^\d+$/.test(name)).map(Number).sort((a, b) => b - a);
    if (pids.length === 0) return null;
    const started = performance.now();
    const stats = new Map<string, PidStat>();
    let truncated = pids.length > MAX_PIDS;
    const wanted = pids.slice(0, MAX_PIDS);
    // Read synchronously, a slice at a time with a turn of the event loop between: a promise-based
    // read of each tiny file cost the idle sidecar more than the reads themselves (issue 24, target 8).
    for (let i = 0; i < wanted.length; i++) {
      if (i > 0 && i % PIDS_PER_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      if (performance.now() - started > PIDS_TIME_BOX_MS) {
        truncated = true;
        break;
      }
      const stat = readPidStat(path.join(this.procRoot, String(wanted[i]), 'stat'));
      if (stat) stats.set(identity(stat), stat);
    }
    // Whether pid 2 is kthreadd cannot change while the sidecar runs: read once.
    this.visible ??= visibilityOf(await readFile(path.join(this.procRoot, '2', 'comm'), 'utf8').catch(() => null));
    return { stats, visible: this.visible, truncated };
  }

  /** `/sys/class/net/<if>/device` exists for an interface on a PCI, virtio or other bus device. */
  private async devicesOf(ifaces: string[]): Promise<Map<string, boolean> | null> {
    const root = this.sysRoot;
    if (root === null) return null;
    const seen = await Promise.all(
      ifaces.map(async (iface) => {
        const cached = this.deviceCache.get(iface);
        if (cached !== undefined) return [iface, cached] as const;
        const dir = path.join(root, 'class', 'net', iface);
        if (!(await exists(dir))) return [iface, null] as const;
        const hasDevice = await exists(path.join(dir, 'device'));
        this.deviceCache.set(iface, hasDevice);
        return [iface, hasDevice] as const;
      }),
    );
    const known = seen.filter((entry): entry is readonly [string, boolean] => entry[1] !== null);
    return known.length > 0 ? new Map(known) : null;
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
  const interfaces = current.nets ? chooseInterfaces(current.nets.map((net) => net.iface), current.devices) : null;
  const net = previous?.nets && current.nets && interfaces ? netRates(previous.nets, current.nets, seconds, interfaces.counted) : null;
  const pressure = (resource: Resource) => hostPressure(previous?.pressure[resource] ?? null, current.pressure[resource], seconds, resource !== 'cpu');
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
    netInterfaces: interfaces?.counted ?? [],
    netLeftOut: interfaces?.leftOut ?? [],
    cpuPressure: pressure('cpu'),
    memoryPressure: pressure('memory'),
    ioPressure: pressure('io'),
    ...(current.pids === undefined
      ? {}
      : {
          processes: current.pids
            ? { visible: current.pids.visible, read: current.pids.stats.size, truncated: current.pids.truncated, top: previous?.pids ? topProcesses(previous.pids.stats, [...current.pids.stats.values()], seconds) : [] }
            : null,
        }),
  };
}

function hostPressure(previous: PressureFile | null, current: PressureFile | null, seconds: number, hasFull: boolean): HostPressure | null {
  if (!current || (!current.some && !current.full)) return null;
  const full = hasFull ? current.full : null;
  return {
    someAvg10: current.some?.avg10 ?? null,
    somePct: stallPercent(previous?.some ?? null, current.some, seconds),
    someTotalUs: current.some?.totalUs ?? null,
    fullAvg10: full?.avg10 ?? null,
    fullPct: hasFull ? stallPercent(previous?.full ?? null, full, seconds) : null,
    fullTotalUs: full?.totalUs ?? null,
  };
}

function exists(file: string): Promise<boolean> {
  return access(file).then(
    () => true,
    () => false,
  );
}

/** The kernel's clock, read alongside the counters, as sysstat does; our own where it is missing. */
function elapsedSeconds(previous: Reading, current: Reading): number {
  if (previous.uptimeS !== null && current.uptimeS !== null) return current.uptimeS - previous.uptimeS;
  return current.monotonicS - previous.monotonicS;
}
