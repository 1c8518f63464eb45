import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  chooseInterfaces,
  cpuPercentages,
  diskRates,
  isVirtualInterface,
  isWholeDisk,
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
} from '../src/counters/host-parse.js';
import { ROOT } from './support/sidecar.js';

function proc(file: string): string {
  return readFileSync(path.join(ROOT, 'test/fixtures/proc', file), 'utf8');
}

const KIB = 1024;

describe('parseProcStat', () => {
  it('reads the aggregate and per-CPU lines of a current kernel', () => {
    const stat = parseProcStat(proc('this-machine/stat'));
    expect(stat.total).toEqual({ user: 25265, nice: 0, system: 6785, idle: 255534, iowait: 526, irq: 0, softirq: 114, steal: 55 });
    expect([...stat.cores.keys()]).toEqual([0, 1]);
    expect(stat.cores.get(1)).toMatchObject({ user: 14373, iowait: 480, steal: 30 });
  });

  it('reads 64 CPUs and ignores the intr, ctxt and softirq lines after them', () => {
    const stat = parseProcStat(proc('many-cores/stat'));
    expect([...stat.cores.keys()]).toEqual(Array.from({ length: 64 }, (_, cpu) => cpu));
    expect(stat.total!.user).toBe(494669571);
  });

  it('reads the eight columns of a 2.6.18 kernel, which has no guest time', () => {
    const stat = parseProcStat(proc('old-kernel/stat'));
    expect(stat.total).toEqual({ user: 2255, nice: 34, system: 2290, idle: 22625563, iowait: 6290, irq: 127, softirq: 456, steal: 0 });
  });

  it('reports the columns a 2.4 kernel lacks as not available', () => {
    const stat = parseProcStat('cpu  1132 34 1441 183034\ncpu0 1132 34 1441 183034\n');
    expect(stat.total).toEqual({ user: 1132, nice: 34, system: 1441, idle: 183034, iowait: null, irq: null, softirq: null, steal: null });
  });
});

describe('parseLoadavg and parseUptime', () => {
  it('reads the three load averages', () => {
    expect(parseLoadavg(proc('this-machine/loadavg'))).toEqual({ load1: 0.87, load5: 0.46, load15: 0.29 });
    expect(parseLoadavg('')).toBeNull();
  });

  it('reads seconds since boot', () => {
    expect(parseUptime(proc('this-machine/uptime'))).toBe(1448.06);
    expect(parseUptime('')).toBeNull();
  });
});

describe('parseMeminfo and memoryFigures', () => {
  it('reads kB figures as bytes and counts as they are', () => {
    const meminfo = parseMeminfo(proc('this-machine/meminfo'));
    expect(meminfo.get('MemTotal')).toBe(24683568 * KIB);
    expect(meminfo.get('Active(anon)')).toBe(1572 * KIB);
    expect(meminfo.get('HugePages_Total')).toBe(0);
  });

  it('counts used memory as total less available', () => {
    expect(memoryFigures(parseMeminfo(proc('this-machine/meminfo')))).toEqual({
      totalBytes: 24683568 * KIB,
      availableBytes: 24051068 * KIB,
      usedBytes: (24683568 - 24051068) * KIB,
    });
  });

  it('falls back to total less free, buffers and caches before MemAvailable existed, and leaves available unknown', () => {
    expect(memoryFigures(parseMeminfo(proc('old-kernel/meminfo')))).toEqual({
      totalBytes: 8174352 * KIB,
      availableBytes: null,
      usedBytes: (8174352 - 2301228 - 210964 - 3402348) * KIB,
    });
  });

  it('knows nothing from an empty file', () => {
    expect(memoryFigures(parseMeminfo(''))).toEqual({ totalBytes: null, availableBytes: null, usedBytes: null });
  });
});

describe('parseDiskstats and isWholeDisk', () => {
  it('reads sectors read and written from the 17-counter format', () => {
    const vda = parseDiskstats(proc('this-machine/diskstats')).find((disk) => disk.name === 'vda');
    expect(vda).toEqual({ name: 'vda', sectorsRead: 5389946, sectorsWritten: 2934768 });
  });

  it('counts whole disks only on this machine: no loop devices, no zram', () => {
    expect(parseDiskstats(proc('this-machine/diskstats')).filter((disk) => isWholeDisk(disk.name)).map((disk) => disk.name)).toEqual(['vda']);
  });

  it('skips partitions, md RAID, device-mapper, loop, zram and optical devices on a GPU server', () => {
    const names = parseDiskstats(proc('nvme-host/diskstats')).map((disk) => disk.name);
    expect(names.filter(isWholeDisk)).toEqual(['nvme0n1', 'nvme1n1', 'nvme2n1', 'sda']);
  });

  it('reads the four-counter partition lines of kernels before 2.6.25', () => {
    const disks = parseDiskstats(proc('old-kernel/diskstats'));
    expect(disks.find((disk) => disk.name === 'sda2')).toEqual({ name: 'sda2', sectorsRead: 44565738, sectorsWritten: 67099712 });
    expect(disks.find((disk) => disk.name === 'sda')).toEqual({ name: 'sda', sectorsRead: 44567894, sectorsWritten: 66851088 });
    expect(disks.map((disk) => disk.name).filter(isWholeDisk)).toEqual(['sda']);
  });

  it('tells partitions from whole disks across naming schemes', () => {
    for (const whole of ['sda', 'sdaa', 'vdb', 'xvda', 'hda', 'nvme0n1', 'nvme12n3', 'mmcblk0', 'nbd0', 'rbd7']) expect(isWholeDisk(whole), whole).toBe(true);
    for (const part of ['sda1', 'sdaa12', 'vdb2', 'xvda1', 'nvme0n1p1', 'mmcblk0p2', 'nbd0p1', 'rbd7p1', 'loop3', 'ram0', 'zram0', 'dm-2', 'md127', 'sr0', 'fd0']) {
      expect(isWholeDisk(part), part).toBe(false);
    }
  });
});

describe('parseNetDev', () => {
  it('reads every interface with its byte counters', () => {
    expect(parseNetDev(proc('this-machine/net/dev'))).toEqual([
      { iface: 'lo', rxBytes: 24337097, txBytes: 24337097 },
      { iface: 'ifb0', rxBytes: 0, txBytes: 0 },
      { iface: 'ifb1', rxBytes: 0, txBytes: 0 },
      { iface: 'eth0', rxBytes: 195390417, txBytes: 414127 },
    ]);
  });

  it('reads a counter printed flush against the colon', () => {
    expect(parseNetDev(proc('old-kernel/net/dev')).find((net) => net.iface === 'eth0')).toEqual({ iface: 'eth0', rxBytes: 3698523616, txBytes: 781243982 });
  });

  it('reads a pod’s network namespace', () => {
    expect(parseNetDev(proc('container/net/dev')).map((net) => net.iface)).toEqual(['eth0', 'lo']);
  });
});

describe('rates between two readings', () => {
  const seconds = parseUptime(proc('rates/t1/uptime'))! - parseUptime(proc('rates/t0/uptime'))!;

  it('takes the time between the readings from the kernel clock', () => {
    expect(seconds).toBeCloseTo(2, 9);
  });

  it('counts busy as all but idle and iowait, per CPU and in total, without counting guest time twice', () => {
    const cpu = cpuPercentages(parseProcStat(proc('rates/t0/stat')), parseProcStat(proc('rates/t1/stat')));
    expect(cpu.cpuPct).toBeCloseTo(51.25, 9);
    expect(cpu.iowaitPct).toBeCloseTo(3.75, 9);
    expect(cpu.stealPct).toBeCloseTo(1.25, 9);
    expect(cpu.cpuPerCorePct).toEqual([75, 30, 100, 0]);
  });

  it('leaves out a CPU that was offline in the first reading', () => {
    const before = proc('rates/t0/stat').replace(/^cpu2 .*\n/m, '');
    expect(cpuPercentages(parseProcStat(before), parseProcStat(proc('rates/t1/stat'))).cpuPerCorePct).toEqual([75, 30, 0]);
  });

  it('has no CPU rate when no time has passed', () => {
    const stat = parseProcStat(proc('rates/t0/stat'));
    expect(cpuPercentages(stat, stat)).toEqual({ cpuPct: null, iowaitPct: null, stealPct: null, cpuPerCorePct: [0, 0, 0, 0] });
  });

  it('sums whole disks only, in bytes per second', () => {
    const rates = diskRates(parseDiskstats(proc('rates/t0/diskstats')), parseDiskstats(proc('rates/t1/diskstats')), seconds);
    expect(rates).toEqual({ diskReadBps: (2048 * 512) / 2, diskWriteBps: (4096 * 512) / 2 });
  });

  it('sums every interface but the virtual ones (here lo)', () => {
    const rates = netRates(parseNetDev(proc('rates/t0/net/dev')), parseNetDev(proc('rates/t1/net/dev')), seconds);
    expect(rates).toEqual({ netRxBps: 1_500_000, netTxBps: 250_000 });
  });

  it('sums only the interfaces it is given', () => {
    const rates = netRates(parseNetDev(proc('rates/t0/net/dev')), parseNetDev(proc('rates/t1/net/dev')), seconds, ['eth1']);
    expect(rates).toEqual({ netRxBps: 500_000, netTxBps: 0 });
  });

  it('has no rate for counters that went backwards, nor without elapsed time', () => {
    const earlier = parseNetDev(proc('rates/t0/net/dev'));
    const later = parseNetDev(proc('rates/t1/net/dev'));
    expect(netRates(later, earlier, seconds)).toEqual({ netRxBps: null, netTxBps: null });
    expect(netRates(earlier, later, 0)).toEqual({ netRxBps: null, netTxBps: null });
  });

  it('has no disk rate on a host without a whole disk', () => {
    const loops = parseDiskstats(proc('rates/t0/diskstats')).filter((disk) => disk.name === 'loop0');
    expect(diskRates(loops, loops, seconds)).toEqual({ diskReadBps: null, diskWriteBps: null });
  });
});

const ifaces = (file: string) => parseNetDev(proc(file)).map((net) => net.iface);

describe('chooseInterfaces', () => {
  it('leaves out the bridges, veths and overlay of a k3s node with Docker, by name', () => {
    expect(chooseInterfaces(ifaces('k3s-node/net/dev'), null)).toEqual({
      counted: ['eth0'],
      leftOut: ['cni0', 'docker0', 'flannel.1', 'lo', 'veth6802495', 'vethbf86cd0a'],
    });
    expect(chooseInterfaces(ifaces('docker-host/net/dev'), null)).toEqual({ counted: ['eth0'], leftOut: ['docker0', 'lo', 'vethf345468'] });
    expect(chooseInterfaces(ifaces('this-machine/net/dev'), null)).toEqual({ counted: ['eth0'], leftOut: ['ifb0', 'ifb1', 'lo'] });
  });

  it('counts only interfaces on a device where sysfs tells: a bond, a bridge or a VLAN nobody names is left out', () => {
    const sysfs = new Map([
      ['eth0', true],
      ['eth1', true],
      ['bond0', false],
      ['br0', false],
      ['lo', false],
    ]);
    expect(chooseInterfaces(['lo', 'eth0', 'eth1', 'bond0', 'br0'], sysfs)).toEqual({ counted: ['eth0', 'eth1'], leftOut: ['bond0', 'br0', 'lo'] });
  });

  it('keeps a pod’s eth0, a veth with no device, since nothing there has one', () => {
    expect(chooseInterfaces(ifaces('container/net/dev'), new Map([['eth0', false], ['lo', false]]))).toEqual({ counted: ['eth0'], leftOut: ['lo'] });
  });

  it('knows the virtual interfaces of the usual CNIs and tunnels', () => {
    for (const iface of ['cali1a2b3c4d5e6', 'cilium_host', 'lxc12345', 'tunl0', 'vxlan.calico', 'kube-ipvs0', 'br-b9c95bab7fe5', 'virbr0', 'wg0', 'eth0.100', 'docker_gwbridge', 'genev_sys_6081']) {
      expect(isVirtualInterface(iface), iface).toBe(true);
    }
    for (const iface of ['eth0', 'ens5', 'enp175s0f1', 'ib0', 'eno16777736', 'bond0']) expect(isVirtualInterface(iface), iface).toBe(false);
  });
});

describe('parsePressure', () => {
  it('reads some and full of a 6.18 kernel, the CPU file included', () => {
    expect(parsePressure(proc('this-machine/pressure/cpu'))).toEqual({ some: { avg10: 11.02, totalUs: 3192461213 }, full: { avg10: 0, totalUs: 0 } });
    expect(parsePressure(proc('this-machine/pressure/io'))).toEqual({ some: { avg10: 0, totalUs: 37142228 }, full: { avg10: 0, totalUs: 19717932 } });
  });

  it('reads a 5.8 kernel, whose CPU file has no full line', () => {
    expect(parsePressure(proc('old-kernel-psi/pressure/cpu'))).toEqual({ some: { avg10: 0, totalUs: 2344622763 }, full: null });
    expect(parsePressure(proc('old-kernel-psi/pressure/memory')).full).toEqual({ avg10: 0, totalUs: 15845529 });
  });

  it('reads nothing out of what is not a pressure file', () => {
    expect(parsePressure(proc('this-machine/loadavg'))).toEqual({ some: null, full: null });
  });

  it('gives the share of the elapsed time stalled from two totals', () => {
    const before = parsePressure(proc('rates/t0/pressure/cpu')).some;
    const after = parsePressure(proc('rates/t1/pressure/cpu')).some;
    expect(stallPercent(before, after, 2)).toBeCloseTo(25, 9);
    expect(stallPercent(after, before, 2)).toBeNull();
    expect(stallPercent(before, after, 0)).toBeNull();
    expect(stallPercent(null, after, 2)).toBeNull();
  });
});
