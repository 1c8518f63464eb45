import { cpSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { topConsumers } from '../src/analysis/window.js';
import { HostSource, type HostSample } from '../src/counters/host.js';
import { Supervised } from '../src/counters/source.js';
import { identity, parsePidStat, topProcesses, visibilityOf, type PidStat } from '../src/counters/proc-pid.js';
import { capturedLogger } from './support/logger.js';
import { ROOT, tempDir, waitFor } from './support/sidecar.js';
import { emptyHostSample } from './support/counters.js';

// Every /proc/<pid>/stat of a VM, twice, 2.95 s apart, while a python3 busy loop (27074) and its forked child (27116) spun.
const PROCESSES = path.join(ROOT, 'test/fixtures/proc/processes');
const SECONDS = 18986.08 - 18983.13;
const stat = (t: string, pid: number) => readFileSync(path.join(PROCESSES, t, String(pid), 'stat'), 'utf8');
const reading = (t: string): PidStat[] =>
  readdirSync(path.join(PROCESSES, t))
    .filter((name) => /^\d+$/.test(name))
    .flatMap((pid) => parsePidStat(stat(t, Number(pid))) ?? []);
const byIdentity = (stats: PidStat[]) => new Map(stats.map((s) => [identity(s), s]));

describe('/proc/<pid>/stat, parsed', () => {
  it('reads the name, parent, CPU ticks and start of a process', () => {
    expect(parsePidStat(stat('t1', 27116))).toEqual({ pid: 27116, name: 'python3', ppid: 27074, cpuTicks: 318, startTicks: expect.any(Number) });
  });

  it('takes a name with spaces and slashes whole, counting the fields after the last parenthesis', () => {
    expect(parsePidStat(stat('t1', 27311))).toMatchObject({ pid: 27311, name: 'npm exec tsc -p', ppid: 27308 });
    expect(parsePidStat('42 (a) b) c) S 1 1 1 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 99 0 0')).toMatchObject({ pid: 42, name: 'a) b) c', ppid: 1, cpuTicks: 10, startTicks: 99 });
  });

  it('gives null for what a process that exited leaves (nothing) or a damaged line', () => {
    expect(parsePidStat('')).toBeNull();
    expect(parsePidStat('12 (x S 1')).toBeNull();
  });

  it("tells the node's pid namespace (kthreadd is pid 2) from a pod's own", () => {
    expect(visibilityOf(readFileSync(path.join(PROCESSES, 't0', '2', 'comm'), 'utf8'))).toBe('node');
    expect(visibilityOf(null)).toBe('pod');
    expect(visibilityOf('pause\n')).toBe('pod');
  });
});

describe('the busiest processes between two readings', () => {
  const top = topProcesses(byIdentity(reading('t0')), reading('t1'), SECONDS);

  it('are ranked by cores, with their ancestors, leaving out those that started between the readings', () => {
    expect(top.slice(0, 2)).toEqual([
      { pid: 27074, name: 'python3', cores: 0.515, ancestors: [27071, 27070, 17945, 17930, 1] },
      { pid: 27116, name: 'python3', cores: 0.502, ancestors: [27074, 27071, 27070, 17945, 17930, 1] },
    ]);
    // `node` 27394 started after t0: no rate yet.
    expect(top.map((p) => p.pid)).not.toContain(27394);
  });

  it("leave out a job's ranks and everything below them", () => {
    const sample: HostSample = { ...emptyHostSample(0), processes: { visible: 'node', read: 80, truncated: false, top } };
    const others = topConsumers([sample], new Set([27074]))!;
    expect(others.processes.map((p) => p.pid)).not.toContain(27116);
    expect(others).toMatchObject({ visible: 'node', job_seen: true });
    expect(others.processes.slice(0, 2)).toEqual([
      { pid: 27071, name: 'bash', cores: 0.017 },
      { pid: 1, name: 'process_api', cores: 0.003 },
    ]);
    // A job whose pids are nowhere (another pid namespace): everything is listed, and the window says so.
    expect(topConsumers([sample], new Set([1_000_000]))).toMatchObject({ job_seen: false, processes: [{ pid: 27074 }, { pid: 27116 }, {}, {}, {}] });
  });

  it('are null where no sample carried them (journals before them, no /proc/<pid>)', () => {
    expect(topConsumers([emptyHostSample(0)], new Set())).toBeNull();
  });
});

describe('the host source, processes', () => {
  const dirs: string[] = [];
  const collectors: Array<Supervised<HostSample>> = [];
  afterEach(async () => {
    await Promise.all(collectors.splice(0).map((c) => c.stop()));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('reads every /proc/<pid>/stat and reports the busiest since its previous sample', async () => {
    const root = tempDir('stepscope-proc-');
    dirs.push(root);
    cpSync(path.join(PROCESSES, 't0'), root, { recursive: true });
    const log = capturedLogger().log;
    const host = new Supervised(new HostSource({ log, procRoot: root, sysRoot: null }), { intervalMs: 50, log });
    collectors.push(host);
    const samples: HostSample[] = [];
    await host.start((sample) => {
      samples.push(sample);
      if (samples.length === 1) cpSync(path.join(PROCESSES, 't1'), root, { recursive: true });
    });
    await waitFor(() => samples.length >= 2);
    expect(samples[0]!.processes).toEqual({ visible: 'node', read: 72, truncated: false, top: [] });
    // t1 holds t0's pids too (copied over): those that exited by t1 have no rate, the rest as above.
    const second = samples[1]!.processes!;
    expect(second).toMatchObject({ visible: 'node', truncated: false });
    expect(second.top.slice(0, 2)).toMatchObject([{ pid: 27074, cores: 0.515 }, { pid: 27116, cores: 0.502 }]);
  });

  it('reads no process while nothing wants them (no job is live), and the busiest again from the second reading after', async () => {
    const root = tempDir('stepscope-proc-');
    dirs.push(root);
    cpSync(path.join(PROCESSES, 't0'), root, { recursive: true });
    let wanted = false;
    const host = new HostSource({ log: capturedLogger().log, procRoot: root, sysRoot: null, processesWanted: () => wanted });
    const idle = await host.read();
    expect('processes' in idle).toBe(false);
    wanted = true;
    expect((await host.read()).processes).toEqual({ visible: 'node', read: 72, truncated: false, top: [] });
    cpSync(path.join(PROCESSES, 't1'), root, { recursive: true });
    expect((await host.read()).processes!.top.slice(0, 2)).toMatchObject([{ pid: 27074, cores: 0.515 }, { pid: 27116, cores: 0.502 }]);
  });
});
