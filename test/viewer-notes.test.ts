import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { render } from 'ink';
import { createElement } from 'react';
import { describe, expect, it } from 'vitest';
import { parseComputeApps } from '../src/counters/compute-apps.js';
import { identity, parsePidStat, topProcesses } from '../src/counters/proc-pid.js';
import { emptyGpuSample } from '../src/counters/types.js';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import { gpuKey, gpuSeries, historyFromSnapshot, legacyGpuKey } from '../src/viewer/model/history.js';
import { buildView, gpuLabel } from '../src/viewer/model/job-view.js';
import { fmtForecast } from '../src/viewer/model/notes.js';
import { applyFrame, initialSource } from '../src/viewer/model/source.js';
import { plainLine } from '../src/viewer/plain.js';
import { Notes } from '../src/viewer/ui/Notes.js';
import { hello, run, T0 } from './support/entries.js';
import { ROOT } from './support/sidecar.js';
import { streamFrame } from './support/viewer-stream.js';
import { computeAppFields, emptyHostSample } from './support/counters.js';

/**
 * The lines under the viewer's tables, from a real Engine fed a scripted job: an input-starved rank
 * (so the waste ledger fills) sharing its H100 with the processes of a literal --query-compute-apps
 * capture, on a node whose busiest processes come from a literal /proc capture, with its allocator
 * growing steadily. Encoded as the stream encodes it and parsed as the viewer parses it.
 */

const H100 = 'GPU-00000000-0000-0000-0000-000000000000';
const GIB = 1024 ** 3;
const [header, ...rows] = readFileSync(path.join(ROOT, 'test/fixtures/nvidia-smi/h100-80gb-hbm3_590.48.01_compute-apps_load.csv'), 'utf8').split('\n').filter((l) => l.trim());
const APPS = parseComputeApps(rows.join('\n'), computeAppFields(header!));
const PROCESSES = path.join(ROOT, 'test/fixtures/proc/processes');
const pidStats = (t: string) =>
  readdirSync(path.join(PROCESSES, t))
    .filter((n) => /^\d+$/.test(n))
    .flatMap((pid) => parsePidStat(readFileSync(path.join(PROCESSES, t, pid, 'stat'), 'utf8')) ?? []);
const TOP = topProcesses(new Map(pidStats('t0').map((s) => [identity(s), s])), pidStats('t1'), 2.95);

function scriptedJob(seconds: number): JournalEntry[] {
  const entries: JournalEntry[] = [
    { t: 'start', at: T0, config: { windowMs: 4_000, holdMs: 1_000, endGraceMs: 10_000, gpuHourPrice: 2.5 } },
    { t: 'source', at: T0, gpu: 'nvidia-smi', reason: 'test' },
    // The rank is memhog 11327 of the capture: gpu_burn and the other memhog are someone else's.
    hello('s1', { pid: 11327 }),
    { t: 'connect', at: T0, session: 's1' },
  ];
  const timed: JournalEntry[] = [...run('s1', 0, seconds, { data: 60, compute: 40 }).entries];
  for (let s = 1; s <= seconds; s++) {
    const at = T0 + s * 1000;
    timed.push({ t: 'gpu', at, samples: [{ ...emptyGpuSample(at, 0), uuid: H100, name: 'NVIDIA H100 80GB HBM3', utilGpu: 40, smClockMHz: 1980, smClockMaxMHz: 1980, powerW: 300, powerLimitW: 700, memTotalMiB: 81559 }] });
    timed.push({ t: 'host', at, sample: { ...emptyHostSample(at), cpuPct: 90, processes: { visible: 'node', read: 79, truncated: false, top: TOP } } });
    if (s % 5 === 0) {
      timed.push({ t: 'apps', at, apps: APPS });
      // 20 GiB allocated, growing 10 MiB a second, on an 80 GiB device.
      const allocated = 20 * GIB + s * 10 * 1024 ** 2;
      timed.push({
        t: 'counters', at, session: 's1',
        batch: { source: 'memory', samples: [{ at_ns: s * 1e9, device: 0, allocated_bytes: allocated, reserved_bytes: 24 * GIB, peak_allocated_bytes: allocated, alloc_retries: 0, ooms: 0, inactive_split_bytes: 0, total_bytes: 80 * GIB, free_bytes: 50 * GIB }] },
      });
    }
  }
  return [...entries, ...timed.sort((a, b) => a.at - b.at)];
}

function viewOf(seconds: number) {
  const engine = new Engine();
  for (const entry of scriptedJob(seconds)) engine.apply(entry);
  const snapshot = engine.snapshot();
  const frame = streamFrame(snapshot, { type: 'snapshot', seq: 1, gpuSource: 'nvidia-smi', windowMs: 4000 });
  const source = applyFrame(initialSource('ws://node-a/v1/stream'), frame, T0);
  if (frame.type !== 'snapshot') throw new Error('a snapshot frame was asked for');
  return { view: buildView([source], null, snapshot.at), state: frame.state };
}

describe('the notes under the viewer tables', () => {
  const { view, state } = viewOf(180);
  const notes = view.job!.notes;

  it("show the rank's memory with its growth and when it runs out at that rate", () => {
    // The newest sample in: 20 GiB + 175 × 10 MiB; (80 − 21.7) GiB at 10 MiB/s is about 100 minutes.
    expect(notes.memory).toBe('memory rank 0: 21.7 GiB allocated, 24.0 GiB reserved of 80.0 GiB (30%), +10.0 MiB/s, out of memory in ~1.7 h');
  });

  it('show what the bottlenecks cost so far, with the energy and the price', () => {
    expect(state.jobs[0]!.waste).not.toBeNull();
    expect(notes.waste).toMatch(/^lost [\d.]+ GPU-(min|s|h) \(\d+%\): input [\d.]+ GPU-(min|s|h)/);
    expect(notes.waste).toMatch(/ · [\d.]+ MJ · [\d.]+ at 2\.5 a GPU-hour$/);
  });

  it("name the other processes on the rank's GPU, and the busiest others on the node", () => {
    expect(notes.gpuOthers).toEqual(['gpu 0: ./gpu_burn (pid 11345) 15.3 GiB, /root/tools/memhog (pid 11328) 1.5 GiB']);
    expect(notes.cpuOthers).toEqual(['python3 (pid 27074) 0.5 cores, python3 (pid 27116) 0.5 cores, bash (pid 27071) 0.0 cores and 2 more (some may be the job\'s own)']);
    expect(state.counters.gpus[0]!.processes!.map((p) => p.pid)).toEqual([11345, 11327, 11328]);
  });

  it('print them in plain mode too, and nothing of them where nothing was measured', () => {
    const line = plainLine(view, T0);
    expect(line).toContain('memory=memory_rank_0:_21.7_GiB_allocated');
    expect(line).toMatch(/ waste=lost_/);
    expect(line).toContain('gpu_others=gpu_0:_./gpu_burn_(pid_11345)_15.3_GiB');
    expect(line).toContain('cpu_others=python3_(pid_27074)');
    const early = viewOf(2).view;
    expect(early.job!.notes).toMatchObject({ memory: null, waste: null });
    expect(plainLine(early, T0)).not.toMatch(/memory=|waste=/);
  });

  it('draw one line each under the tables', async () => {
    let out = '';
    const stdout = Object.assign(new Writable({ write: (chunk, _encoding, done) => ((out += String(chunk)), done()) }), { columns: 160, rows: 40, isTTY: false });
    const app = render(createElement(Notes, { notes }), { stdout: stdout as unknown as NodeJS.WriteStream, debug: true, patchConsole: false });
    app.unmount();
    expect(out).toContain('memory rank 0: 21.7 GiB allocated');
    expect(out).toContain('other processes on gpu 0: ./gpu_burn (pid 11345) 15.3 GiB');
    expect(out).toContain('busiest others on the node: python3 (pid 27074) 0.5 cores');
  });
});

describe('GPU history keys', () => {
  it("follow the sidecar's key, which tells MIG instances of one GPU apart, and fall back for sidecars without it", () => {
    const slice1 = { key: `${H100}/gi:1`, uuid: null, index: 0 };
    const slice2 = { key: `${H100}/gi:2`, uuid: null, index: 0 };
    expect(gpuKey(slice1)).not.toBe(gpuKey(slice2));
    expect(legacyGpuKey(slice1)).toBe(legacyGpuKey(slice2));
    const history = historyFromSnapshot({ from: new Date(T0).toISOString(), slice_s: 1, ranks: [], gpus: [{ index: 0, uuid: null, util: [50, 60], sm_clock_pct: [100, 100] }] }, T0 + 2000);
    expect(gpuSeries(history.gpuUtil, slice1)?.values).toEqual([50, 60]);
    expect(gpuLabel({ index: 0, gpu_instance_id: 2 })).toBe('gpu 0 gi 2');
    expect(gpuLabel({ index: 3, gpu_instance_id: null })).toBe('gpu 3');
  });

  it('read a forecast roughly', () => {
    expect([fmtForecast(45), fmtForecast(2400), fmtForecast(9000)]).toEqual(['~45 s', '~40 min', '~2.5 h']);
  });
});
