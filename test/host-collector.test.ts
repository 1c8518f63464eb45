import { cpSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { HostSource, type HostSample, type HostSourceOptions } from '../src/counters/host.js';
import { Supervised } from '../src/counters/source.js';
import { capturedLogger } from './support/logger.js';
import { ROOT, tempDir, waitFor } from './support/sidecar.js';

const RATES = path.join(ROOT, 'test/fixtures/proc/rates');
const GIB = 1024 ** 3;


const percent = (value: number | null) => value !== null && value >= 0 && value <= 100;
const rateOrNothing = (value: number | null) => value === null || value >= 0;

describe('the host source, supervised', () => {
  const collectors: Array<Supervised<HostSample>> = [];
  const dirs: string[] = [];

  afterEach(async () => {
    await Promise.all(collectors.splice(0).map((collector) => collector.stop()));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  function collector({ intervalMs = 100, ...options }: Partial<HostSourceOptions> & { intervalMs?: number } = {}) {
    const { log, lines } = capturedLogger();
    const made = new Supervised(new HostSource({ log, ...options }), { intervalMs, maxBackoffMs: 8 * intervalMs, log });
    collectors.push(made);
    return { collector: made, lines };
  }

  function procRoot(from: string): string {
    const dir = tempDir('stepscope-proc-');
    dirs.push(dir);
    cpSync(from, dir, { recursive: true });
    return dir;
  }

  it('gives sane figures from this machine’s /proc', async () => {
    const { collector: host } = collector();
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    const [first] = samples;
    expect(first).toMatchObject({ cpuPct: null, cpuPerCorePct: [], diskReadBps: null, netRxBps: null });
    expect(first!.memTotalBytes).toBeGreaterThan(0);
    expect(first!.memUsedBytes).toBeGreaterThan(0);
    expect(first!.memUsedBytes!).toBeLessThanOrEqual(first!.memTotalBytes!);
    expect(first!.memAvailableBytes!).toBeLessThanOrEqual(first!.memTotalBytes!);
    expect(first!.load1).toBeGreaterThanOrEqual(0);

    await waitFor(() => samples.length >= 2);
    const second = samples[1]!;
    expect(percent(second.cpuPct)).toBe(true);
    expect(percent(second.iowaitPct)).toBe(true);
    expect(percent(second.stealPct)).toBe(true);
    expect(second.cpuPerCorePct).toHaveLength(os.cpus().length);
    expect(second.cpuPerCorePct.every(percent)).toBe(true);
    for (const rate of [second.diskReadBps, second.diskWriteBps, second.netRxBps, second.netTxBps]) expect(rateOrNothing(rate)).toBe(true);
    expect(host.health()).toMatchObject({ name: 'host', state: 'ok', lastError: null });
  });

  it('computes rates between two readings of an injected proc root', async () => {
    const root = procRoot(path.join(RATES, 't0'));
    const { collector: host } = collector({ procRoot: root, now: () => 5_000 });
    const samples: HostSample[] = [];
    await host.start((sample) => {
      samples.push(sample);
      // The next reading starts only after the sink returns, so it sees all of t1.
      if (samples.length === 1) cpSync(path.join(RATES, 't1'), root, { recursive: true });
    });
    await waitFor(() => samples.length >= 2);

    expect(samples[0]).toMatchObject({ at: 5_000, cpuPct: null, cpuPerCorePct: [], load1: 0.5, diskReadBps: null, netTxBps: null });
    const second = samples[1]!;
    expect(second.cpuPct).toBeCloseTo(51.25, 9);
    expect(second.iowaitPct).toBeCloseTo(3.75, 9);
    expect(second.stealPct).toBeCloseTo(1.25, 9);
    expect(second).toMatchObject({
      at: 5_000,
      cpuPerCorePct: [75, 30, 100, 0],
      load1: 2.5,
      load5: 1.75,
      load15: 1,
      memTotalBytes: 16 * GIB,
      memAvailableBytes: 12 * GIB,
      memUsedBytes: 4 * GIB,
      diskReadBps: 512 * 1024,
      diskWriteBps: 1024 * 1024,
      netRxBps: 1_500_000,
      netTxBps: 250_000,
      netInterfaces: ['eth0', 'eth1'],
      netLeftOut: ['lo'],
      // PSI totals moved 0.5 s (CPU), 0.1 s and 0.04 s (I/O) in 2 s; CPU `full` means nothing system-wide.
      cpuPressure: { someAvg10: 13.02, someTotalUs: 3192961213, fullAvg10: null, fullPct: null, fullTotalUs: null },
      memoryPressure: { someAvg10: 0, somePct: 0, fullAvg10: 0, fullPct: 0 },
      ioPressure: { someAvg10: 0.84, fullAvg10: 0.33 },
    });
    expect(second.cpuPressure!.somePct).toBeCloseTo(25, 9);
    expect(second.ioPressure!.somePct).toBeCloseTo(5, 9);
    expect(second.ioPressure!.fullPct).toBeCloseTo(2, 9);
    expect(samples[0]!.cpuPressure).toMatchObject({ someAvg10: 11.02, somePct: null });
  });

  it('counts only the interfaces sysfs puts on a device, and leaves out the rest', async () => {
    // /host/proc beside /host/sys, as a pod mounts the node's: eth0 on a virtio device, eth1 not (a bond, say).
    const host = tempDir('stepscope-host-');
    dirs.push(host);
    const root = path.join(host, 'proc');
    cpSync(path.join(RATES, 't0'), root, { recursive: true });
    for (const iface of ['lo', 'eth0', 'eth1']) mkdirSync(path.join(host, 'sys/class/net', iface), { recursive: true });
    mkdirSync(path.join(host, 'sys/devices/virtio2'), { recursive: true });
    symlinkSync('../../../devices/virtio2', path.join(host, 'sys/class/net/eth0/device'));
    const { collector: reader } = collector({ procRoot: root });
    const samples: HostSample[] = [];
    await reader.start((sample) => {
      samples.push(sample);
      if (samples.length === 1) cpSync(path.join(RATES, 't1'), root, { recursive: true });
    });
    await waitFor(() => samples.length >= 2);
    expect(samples[1]).toMatchObject({ netInterfaces: ['eth0'], netLeftOut: ['eth1', 'lo'], netRxBps: 1_000_000, netTxBps: 250_000 });
  });

  it('has no pressure figures on a kernel without PSI, and does not warn about it', async () => {
    const root = procRoot(path.join(RATES, 't0'));
    rmSync(path.join(root, 'pressure'), { recursive: true });
    const { collector: host, lines } = collector({ procRoot: root });
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    expect(samples[0]).toMatchObject({ cpuPressure: null, memoryPressure: null, ioPressure: null, netInterfaces: ['eth0', 'eth1'] });
    expect(lines.filter((line) => line.level >= 40)).toEqual([]);
  });

  it('reports what it cannot read as not available, and says so once', async () => {
    const root = tempDir('stepscope-proc-');
    dirs.push(root);
    cpSync(path.join(RATES, 't0/stat'), path.join(root, 'stat'));
    cpSync(path.join(RATES, 't0/meminfo'), path.join(root, 'meminfo'));
    const { collector: host, lines } = collector({ procRoot: root });
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    await waitFor(() => samples.length >= 3);

    expect(samples[2]).toMatchObject({ load1: null, diskReadBps: null, netRxBps: null, memUsedBytes: 4 * GIB, cpuPct: null });
    const warnings = lines.filter((line) => line.msg === 'some host counters are not available');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.unreadable).toEqual(['loadavg', 'diskstats', 'net/dev', 'uptime']);
    expect(host.health().state).toBe('ok');
  });

  it('starts without procfs, emitting nothing and saying why in its health', async () => {
    const root = tempDir('stepscope-proc-');
    dirs.push(root);
    const { collector: host, lines } = collector({ procRoot: path.join(root, 'missing') });
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    expect(samples).toEqual([]);
    expect(host.health()).toMatchObject({ state: 'failing', samples: 0 });
    expect(host.health().lastError).toMatch(/^cannot read .*missing\/stat, .*missing\/loadavg, /);
    expect(lines.filter((line) => line.msg === 'some host counters are not available')).toHaveLength(1);
  });

  it('marks itself failing when procfs goes away, and recovers when it is back', async () => {
    const root = procRoot(path.join(RATES, 't0'));
    const { collector: host } = collector({ procRoot: root });
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    const hidden = `${root}-hidden`;
    dirs.push(hidden);
    cpSync(root, hidden, { recursive: true });
    rmSync(root, { recursive: true });
    await waitFor(() => host.health().state === 'failing');

    const delivered = samples.length;
    mkdirSync(root);
    cpSync(hidden, root, { recursive: true });
    await waitFor(() => samples.length > delivered);
    expect(host.health()).toMatchObject({ state: 'ok', lastError: null });
  });

  it('emits nothing after stop()', async () => {
    const { collector: host } = collector({ intervalMs: 20 });
    const samples: HostSample[] = [];
    await host.start((sample) => samples.push(sample));
    await waitFor(() => samples.length >= 2);
    await host.stop();
    const emitted = samples.length;
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(samples).toHaveLength(emitted);
    expect(host.health().state).toBe('stopped');
  });
});
