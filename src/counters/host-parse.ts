/**
 * Pure parsers for the /proc files the host collector reads, and the rates between two readings.
 * Every parser takes the file's text and skips lines it does not understand: a figure the kernel
 * does not report comes out as `null`, never as an exception.
 */

/** USER_HZ ticks spent in each state, from one `cpu` line of /proc/stat. */
export interface CpuTimes {
  user: number;
  nice: number;
  system: number;
  idle: number;
  /** Columns that older kernels lack (iowait and irq since 2.5.41, steal since 2.6.11). */
  iowait: number | null;
  irq: number | null;
  softirq: number | null;
  steal: number | null;
}

export interface ProcStat {
  /** The aggregate `cpu` line. */
  total: CpuTimes | null;
  /** `cpuN` lines by N; offline CPUs have no line. */
  cores: Map<number, CpuTimes>;
}

export interface LoadAvg {
  load1: number;
  load5: number;
  load15: number;
}

export interface MemoryFigures {
  totalBytes: number | null;
  availableBytes: number | null;
  usedBytes: number | null;
}

export interface DiskCounters {
  name: string;
  sectorsRead: number;
  sectorsWritten: number;
}

export interface NetCounters {
  iface: string;
  rxBytes: number;
  txBytes: number;
}

export interface CpuPercentages {
  cpuPct: number | null;
  iowaitPct: number | null;
  stealPct: number | null;
  /** Cores present in both readings, in CPU-number order. */
  cpuPerCorePct: number[];
}

export interface DiskRates {
  diskReadBps: number | null;
  diskWriteBps: number | null;
}

export interface NetRates {
  netRxBps: number | null;
  netTxBps: number | null;
}

/** /proc/diskstats counts 512-byte sectors whatever the device's own sector size. */
const DISKSTATS_SECTOR_BYTES = 512;

export function parseProcStat(text: string): ProcStat {
  const stat: ProcStat = { total: null, cores: new Map() };
  for (const line of lines(text)) {
    const match = /^cpu(\d*)\s+(.*)$/.exec(line);
    if (!match) continue;
    const times = parseCpuTimes(match[2]!);
    if (!times) continue;
    if (match[1] === '') stat.total = times;
    else stat.cores.set(Number(match[1]), times);
  }
  return stat;
}

function parseCpuTimes(columns: string): CpuTimes | null {
  const values = columns.split(/\s+/).map(Number);
  if (values.length < 4 || values.some((value) => !Number.isFinite(value))) return null;
  const column = (index: number): number | null => values[index] ?? null;
  // guest and guest_nice (columns 8, 9) are already included in user and nice.
  return {
    user: values[0]!,
    nice: values[1]!,
    system: values[2]!,
    idle: values[3]!,
    iowait: column(4),
    irq: column(5),
    softirq: column(6),
    steal: column(7),
  };
}

export function parseLoadavg(text: string): LoadAvg | null {
  const [load1, load5, load15] = text.trim().split(/\s+/).map(Number);
  if (![load1, load5, load15].every((value) => Number.isFinite(value))) return null;
  return { load1: load1!, load5: load5!, load15: load15! };
}

/** Seconds since boot, the first figure of /proc/uptime. */
export function parseUptime(text: string): number | null {
  const first = text.trim().split(/\s+/)[0];
  const seconds = Number(first);
  return first !== '' && Number.isFinite(seconds) ? seconds : null;
}

/** Every /proc/meminfo line, in bytes where the kernel gives kB and as-is where it gives a count. */
export function parseMeminfo(text: string): Map<string, number> {
  const fields = new Map<string, number>();
  for (const line of lines(text)) {
    const match = /^([^:\s]+):\s+(\d+)(?:\s+kB)?$/.exec(line);
    if (!match) continue;
    const value = Number(match[2]);
    fields.set(match[1]!, line.endsWith('kB') ? value * 1024 : value);
  }
  return fields;
}

/**
 * Used memory as free(1) reports it: total less what is available. Kernels before 3.14 have no
 * MemAvailable; there used is total less free, buffers and reclaimable caches, and available is unknown.
 */
export function memoryFigures(meminfo: Map<string, number>): MemoryFigures {
  const totalBytes = meminfo.get('MemTotal') ?? null;
  const availableBytes = meminfo.get('MemAvailable') ?? null;
  if (totalBytes === null) return { totalBytes, availableBytes, usedBytes: null };
  if (availableBytes !== null) return { totalBytes, availableBytes, usedBytes: totalBytes - availableBytes };
  const free = meminfo.get('MemFree');
  if (free === undefined) return { totalBytes, availableBytes, usedBytes: null };
  const caches = (meminfo.get('Buffers') ?? 0) + (meminfo.get('Cached') ?? 0) + (meminfo.get('SReclaimable') ?? 0);
  return { totalBytes, availableBytes, usedBytes: totalBytes - free - caches };
}

export function parseDiskstats(text: string): DiskCounters[] {
  const disks: DiskCounters[] = [];
  for (const line of lines(text)) {
    const fields = line.split(/\s+/);
    const name = fields[2];
    if (name === undefined) continue;
    // Kernels before 2.6.25 gave partitions four counters: reads, sectors read, writes, sectors written.
    const [readAt, writtenAt] = fields.length === 7 ? [4, 6] : [5, 9];
    const sectorsRead = Number(fields[readAt]);
    const sectorsWritten = Number(fields[writtenAt]);
    if (!Number.isFinite(sectorsRead) || !Number.isFinite(sectorsWritten)) continue;
    disks.push({ name, sectorsRead, sectorsWritten });
  }
  return disks;
}

const NOT_A_DISK = /^(loop|ram|zram|fd|sr|dm-|md)\d/;
const PARTITION = /^((h|s|v|xv)d[a-z]+\d+|(nvme\d+n\d+|mmcblk\d+|nbd\d+|rbd\d+)p\d+)$/;

/**
 * Whether a /proc/diskstats name is a whole physical disk. Loop, RAM and optical devices are
 * skipped, and so are partitions and stacked devices (device-mapper, md RAID), whose I/O is already
 * counted on the disks beneath them.
 */
export function isWholeDisk(name: string): boolean {
  return !NOT_A_DISK.test(name) && !PARTITION.test(name);
}

export function parseNetDev(text: string): NetCounters[] {
  const interfaces: NetCounters[] = [];
  for (const line of lines(text)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    // Old kernels print large counters flush against the colon ("eth0:1234567"), so split there.
    const iface = line.slice(0, colon).trim();
    const fields = line.slice(colon + 1).trim().split(/\s+/).map(Number);
    const rxBytes = fields[0];
    const txBytes = fields[8];
    if (iface === '' || rxBytes === undefined || txBytes === undefined) continue;
    if (!Number.isFinite(rxBytes) || !Number.isFinite(txBytes)) continue;
    interfaces.push({ iface, rxBytes, txBytes });
  }
  return interfaces;
}

/**
 * Interfaces whose bytes are counted again elsewhere: loopback; container and CNI bridges, veths,
 * overlays and tunnels (flannel, calico, cilium, weave, vxlan, geneve, wireguard, IP-in-IP), whose
 * traffic also crosses the physical NIC; VLAN sub-interfaces ("eth0.100"), counted on their parent.
 */
const VIRTUAL_INTERFACE =
  /^(lo|docker\d*|docker_gwbridge|veth.*|cni\d*|cni-.*|cbr\d+|flannel[.-].*|cali.*|tunl\d+|br-.*|virbr\d+(-nic)?|vxlan.*|weave|datapath|vethwe.*|kube-ipvs\d+|kube-bridge|kube-dummy-if|nodelocaldns|cilium_.*|lxc.*|genev_sys_.*|ovs-system|podman\d+|nerdctl\d+|ifb\d+|dummy\d+|tap.*|tun\d+|vnet\d+|wg\d+|gre\d+|gretap\d+|erspan\d+|ip6tnl\d+|ip6gre\d+|sit\d+|ip_vti\d+|ip6_vti\d+|.+\.\d+)$/;

export function isVirtualInterface(iface: string): boolean {
  return VIRTUAL_INTERFACE.test(iface);
}

export interface InterfaceChoice {
  /** Interfaces summed into the network figures, in name order. */
  counted: string[];
  /** The rest, left out because their bytes are counted on another interface too. */
  leftOut: string[];
}

/**
 * Which interfaces make up the host's network figure. By name first; then, where sysfs says which
 * interfaces sit on a device (`/sys/class/net/<if>/device`), only those, which also drops bridges
 * and bonds no name list knows. In a pod's network namespace no interface has a device (its eth0 is
 * a veth), so there the name rule alone decides. `hasDevice` is null where sysfs could not be read.
 */
export function chooseInterfaces(ifaces: readonly string[], hasDevice: ReadonlyMap<string, boolean> | null): InterfaceChoice {
  const names = [...new Set(ifaces)].sort();
  const candidates = names.filter((iface) => !isVirtualInterface(iface));
  const physical = hasDevice ? candidates.filter((iface) => hasDevice.get(iface) === true) : [];
  const counted = physical.length > 0 ? physical : candidates;
  return { counted, leftOut: names.filter((iface) => !counted.includes(iface)) };
}

/** One line of /proc/pressure/<resource>: the share of time some (or all) tasks stalled on it. */
export interface PressureLine {
  avg10: number;
  /** Microseconds stalled since boot. */
  totalUs: number;
}

export interface PressureFile {
  some: PressureLine | null;
  full: PressureLine | null;
}

/** PSI, kernels 4.20 on (Documentation/accounting/psi.rst); lines it does not know are skipped. */
export function parsePressure(text: string): PressureFile {
  const file: PressureFile = { some: null, full: null };
  for (const line of lines(text)) {
    const match = /^(some|full)\s+avg10=([\d.]+)\s+avg60=[\d.]+\s+avg300=[\d.]+\s+total=(\d+)$/.exec(line);
    if (match) file[match[1] as 'some' | 'full'] = { avg10: Number(match[2]), totalUs: Number(match[3]) };
  }
  return file;
}

/** Percent of the elapsed time stalled, from the totals of two readings; null without both. */
export function stallPercent(before: PressureLine | null, after: PressureLine | null, seconds: number): number | null {
  if (!before || !after || !(seconds > 0) || after.totalUs < before.totalUs) return null;
  return Math.min(100, (after.totalUs - before.totalUs) / (seconds * 10_000));
}

/**
 * Busy is everything but idle and iowait, as psutil and top count it; steal is also reported on
 * its own, since on a VM it is time the job wanted the CPU and did not get it.
 */
export function cpuPercentages(previous: ProcStat, current: ProcStat): CpuPercentages {
  const total = previous.total && current.total ? cpuShares(previous.total, current.total) : null;
  const cpuPerCorePct: number[] = [];
  for (const cpu of [...current.cores.keys()].sort((a, b) => a - b)) {
    const before = previous.cores.get(cpu);
    if (!before) continue;
    cpuPerCorePct.push(cpuShares(before, current.cores.get(cpu)!)?.busyPct ?? 0);
  }
  return {
    cpuPct: total?.busyPct ?? null,
    iowaitPct: total?.iowaitPct ?? null,
    stealPct: total?.stealPct ?? null,
    cpuPerCorePct,
  };
}

interface CpuShares {
  busyPct: number;
  iowaitPct: number | null;
  stealPct: number | null;
}

function cpuShares(before: CpuTimes, after: CpuTimes): CpuShares | null {
  const delta = (state: keyof CpuTimes): number | null => {
    const from = before[state];
    const to = after[state];
    // Per-CPU iowait may run backwards (see proc(5)); a negative share would be nonsense.
    return from === null || to === null ? null : Math.max(0, to - from);
  };
  const states = ['user', 'nice', 'system', 'idle', 'iowait', 'irq', 'softirq', 'steal'] as const;
  const elapsed = states.reduce((sum, state) => sum + (delta(state) ?? 0), 0);
  if (elapsed === 0) return null;
  const percentOf = (ticks: number | null) => (ticks === null ? null : (100 * ticks) / elapsed);
  const idle = (delta('idle') ?? 0) + (delta('iowait') ?? 0);
  return { busyPct: (100 * (elapsed - idle)) / elapsed, iowaitPct: percentOf(delta('iowait')), stealPct: percentOf(delta('steal')) };
}

export function diskRates(previous: DiskCounters[], current: DiskCounters[], seconds: number): DiskRates {
  const deltas = counterDeltas(
    previous.filter((disk) => isWholeDisk(disk.name)),
    current.filter((disk) => isWholeDisk(disk.name)),
    (disk) => disk.name,
    (disk) => [disk.sectorsRead, disk.sectorsWritten],
  );
  return {
    diskReadBps: perSecond(deltas?.[0], seconds, DISKSTATS_SECTOR_BYTES),
    diskWriteBps: perSecond(deltas?.[1], seconds, DISKSTATS_SECTOR_BYTES),
  };
}

/** Rates over the `counted` interfaces (by default all but the virtual ones, see chooseInterfaces). */
export function netRates(previous: NetCounters[], current: NetCounters[], seconds: number, counted?: readonly string[]): NetRates {
  const isCounted = (net: NetCounters) => (counted ? counted.includes(net.iface) : !isVirtualInterface(net.iface));
  const deltas = counterDeltas(
    previous.filter(isCounted),
    current.filter(isCounted),
    (net) => net.iface,
    (net) => [net.rxBytes, net.txBytes],
  );
  return { netRxBps: perSecond(deltas?.[0], seconds, 1), netTxBps: perSecond(deltas?.[1], seconds, 1) };
}

/**
 * Summed increase of a pair of counters over the devices present in both readings; null when there
 * is none. A device whose counters went backwards was reset or replaced, so it sits this one out.
 */
function counterDeltas<T>(previous: T[], current: T[], key: (item: T) => string, counters: (item: T) => [number, number]): [number, number] | null {
  const before = new Map(previous.map((item) => [key(item), counters(item)]));
  let sums: [number, number] | null = null;
  for (const item of current) {
    const from = before.get(key(item));
    if (!from) continue;
    const [first, second] = counters(item);
    if (first < from[0] || second < from[1]) continue;
    sums = [(sums?.[0] ?? 0) + first - from[0], (sums?.[1] ?? 0) + second - from[1]];
  }
  return sums;
}

function perSecond(delta: number | undefined, seconds: number, unitBytes: number): number | null {
  if (delta === undefined || !(seconds > 0)) return null;
  return (delta * unitBytes) / seconds;
}

function lines(text: string): string[] {
  return text.split('\n').map((line) => line.trim()).filter((line) => line !== '');
}
