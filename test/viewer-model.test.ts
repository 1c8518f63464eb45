import { describe, expect, it } from 'vitest';
import type { VerdictEvent } from '../src/analysis/job-analysis.js';
import { emptyGpuSample, ThrottleReason, type GpuSample } from '../src/counters/types.js';
import { Engine } from '../src/engine/engine.js';
import { toRow } from '../src/engine/entries.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import type { SnapshotFrame, VerdictFrame } from '../src/protocol/stream.js';
import { streamUrl } from '../src/viewer/client.js';
import { fit, fmtMs, resample, sparkline, stackedCells } from '../src/viewer/format.js';
import { FIXED_LINES, fitColumns, layout } from '../src/viewer/layout.js';
import { parseFrame, type ViewerFrame } from '../src/viewer/model/frames.js';
import { mergeSeries, valuesBetween } from '../src/viewer/model/history.js';
import { buildView } from '../src/viewer/model/job-view.js';
import { applyFrame, initialSource, type SourceState } from '../src/viewer/model/source.js';
import { plainEvent, plainLine } from '../src/viewer/plain.js';
import { streamFrame } from './support/viewer-stream.js';

/**
 * The viewer's data layer fed with what the sidecar's own code makes of a scripted job: a real
 * Engine stepped through simulated time, its state and history encoded as the stream encodes them
 * and parsed back as the viewer parses them.
 */

const T0 = Date.parse('2026-12-02T15:00:00Z');

interface Phases {
  data: number;
  h2d: number;
  compute: number;
  other: number;
}

interface RankScript {
  rank: number;
  host: string;
  /** Phase times (ms) of a step ending at `t` ms after T0. */
  phases: (t: number) => Phases;
}

interface GpuScript {
  index: number;
  figures: (t: number) => Partial<GpuSample>;
}


class SimulatedSidecar {
  readonly engine = new Engine();
  readonly events: VerdictEvent[] = [];
  private readonly next = new Map<number, { t: number; seq: number; step: number }>();
  at = T0;

  constructor(
    readonly job: string,
    private readonly ranks: RankScript[],
    private readonly gpus: GpuScript[],
    worldSize = ranks.length,
  ) {
    this.engine.apply({ t: 'start', at: T0, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10_000 } });
    this.engine.apply({ t: 'source', at: T0, gpu: 'sim', reason: 'test' });
    for (const [localRank, r] of ranks.entries()) {
      const hello = { type: 'hello', job, rank: r.rank, local_rank: localRank, world_size: worldSize, session: `${job}-${r.rank}`, pid: 100 + r.rank, host: r.host, clock: { wall_ms: T0, mono_ns: 0 }, env: { loader: { num_workers: 0 } } } as const;
      this.engine.apply({ t: 'hello', at: T0, hello });
      this.engine.apply({ t: 'connect', at: T0, session: `${job}-${r.rank}` });
      this.next.set(r.rank, { t: 0, seq: 0, step: 0 });
    }
  }

  /** Runs the job on until `seconds` after T0: steps as scripted, GPU samples every 250 ms, the analysis every 500 ms. */
  runUntil(seconds: number): void {
    for (let t = this.at - T0 + 50; t <= seconds * 1000; t += 50) {
      const at = T0 + t;
      for (const r of this.ranks) {
        const state = this.next.get(r.rank)!;
        const records = [];
        for (;;) {
          const p = r.phases(state.t);
          const dur = p.data + p.h2d + p.compute + p.other;
          if (state.t + dur > t) break;
          state.t += dur;
          state.seq += 1;
          const ns = (ms: number) => Math.round(ms * 1e6);
          records.push({ seq: state.seq, step: state.step++, endNs: ns(state.t), durNs: ns(dur), dataNs: ns(p.data), h2dNs: ns(p.h2d), computeNs: ns(p.compute), samples: 32, gpuH2dNs: null, gpuComputeNs: null, gpuIdleNs: null, commNs: null, commWaitNs: null, commBytes: null, evalNs: null });
        }
        if (records.length) this.engine.apply({ t: 'steps', at, session: `${this.job}-${r.rank}`, dropped: 0, rows: records.map(toRow) });
      }
      if (t % 250 === 0) this.engine.apply({ t: 'gpu', at, samples: this.gpus.map((g) => ({ ...emptyGpuSample(at, g.index), uuid: `GPU-${this.job}-${g.index}`, name: 'Test GPU', ...g.figures(t) })) });
      if (t % 500 === 0) this.tick(at);
      this.at = at;
    }
  }

  private tick(at: number): void {
    this.events.push(...(this.engine.apply({ t: 'tick', at })?.events ?? []));
  }

  /** The engine's snapshot as of now, as the sidecar's timer publishes them between the frames. */
  private snapshot(): EngineSnapshot {
    if (this.engine.snapshot().at !== this.at) this.tick(this.at);
    return this.engine.snapshot();
  }

  /** Encoded as the stream encodes it, parsed as the viewer parses it. */
  frame(type: 'snapshot' | 'update', seq: number): ViewerFrame {
    return streamFrame(this.snapshot(), { type, seq, gpuSource: 'sim', windowMs: 4000 });
  }

  verdictFrames(): VerdictFrame[] {
    return this.events.map((e) =>
      parseFrame(
        JSON.stringify({ v: 1, type: 'verdict', at: new Date(e.at).toISOString(), job: e.job, rank: e.rank, from: e.from, from_cause: e.fromCause, to: e.to, cause: e.cause, since: new Date(e.since).toISOString(), rule: e.judgement.evidence.rule, recommendation: null }),
      ) as VerdictFrame,
    );
  }
}

const healthy: Phases = { data: 0.5, h2d: 0.5, compute: 12, other: 0.5 };
const starved: Phases = { data: 12, h2d: 0.5, compute: 12, other: 0.5 };
const hotGpu = (t: number): Partial<GpuSample> =>
  t >= 8000 ? { utilGpu: 97, smClockMHz: 1000, smClockMaxMHz: 1980, tempC: 91, throttleReasons: ThrottleReason.HwThermalSlowdown, powerW: 500, powerLimitW: 700, memUsedMiB: 40_000, memTotalMiB: 81_559 } : coolGpu(t);
const coolGpu = (_t: number): Partial<GpuSample> => ({ utilGpu: 92, smClockMHz: 1980, smClockMaxMHz: 1980, tempC: 60, throttleReasons: 0, powerW: 600, powerLimitW: 700, memUsedMiB: 40_000, memTotalMiB: 81_559 });

function live(url: string, ...frames: ViewerFrame[]): SourceState {
  return frames.reduce((source, frame) => applyFrame(source, frame, T0), initialSource(url));
}

describe('viewer data layer on the sidecar\'s own state', () => {
  it('shows one job: its verdict with evidence and recommendation, a row per rank, a row per GPU, and its history', () => {
    const sidecar = new SimulatedSidecar('one', [{ rank: 0, host: 'node-a', phases: (t) => (t < 8000 ? healthy : starved) }], [{ index: 0, figures: coolGpu }]);
    sidecar.runUntil(16);
    const view = buildView([live('ws://a/v1/stream', sidecar.frame('snapshot', 1))], null, sidecar.at);
    const job = view.job!;
    expect(job.id).toBe('one');
    expect(job.banner).toMatchObject({ verdict: 'input-bound', cause: 'few-workers' });
    expect(job.banner!.rule).toMatch(/waiting for data/);
    expect(job.banner!.figures).toMatch(/data \d+%.*GPU 92% busy/);
    expect(job.banner!.recommendation).toMatch(/num_workers/);
    expect(job.ranks).toHaveLength(1);
    expect(job.ranks[0]).toMatchObject({ rank: 0, host: 'node-a', verdict: 'input-bound', cause: 'few-workers', straggler: false, gpu: 0, state: 'running', stale: false });
    expect(job.ranks[0]!.p50).toBeCloseTo(25, 0);
    expect(job.ranks[0]!.breakdown!.data).toBeGreaterThan(0.4);
    expect(job.gpus).toEqual([expect.objectContaining({ index: 0, util: 92, smMHz: 1980, smMaxMHz: 1980, tempC: 60, throttle: [], ranks: [0] })]);

    const history = job.history!;
    // From the job's start to the last complete slice: 16 slices, the step time rising at 8 s.
    expect(history.slices).toBe(16);
    const steps = history.stepMs[0]!.values;
    expect(steps[2]).toBeCloseTo(13.5, 0);
    expect(steps[14]).toBeCloseTo(25, 0);
    expect(history.gpuUtil[0]!.values.slice(1)).toEqual(new Array(15).fill(92));
    expect(history.verdicts.slice(4, 7)).toEqual(['compute-bound', 'compute-bound', 'compute-bound']);
    expect(history.verdicts.at(-1)).toBe('input-bound');
    expect(job.timelines[0]!.segments.map((s) => s.verdict)).toEqual(['compute-bound', 'input-bound']);
  });

  it('merges updates into the snapshot\'s history and keeps verdict events', () => {
    const sidecar = new SimulatedSidecar('merge', [{ rank: 0, host: 'node-a', phases: (t) => (t < 8000 ? healthy : starved) }], [{ index: 0, figures: coolGpu }]);
    sidecar.runUntil(6);
    let source = live('ws://a/v1/stream', sidecar.frame('snapshot', 1));
    for (let seq = 2; seq <= 40; seq++) {
      sidecar.runUntil(6 + (seq - 1) * 0.25);
      source = applyFrame(source, sidecar.frame('update', seq), T0);
    }
    for (const event of sidecar.verdictFrames()) source = applyFrame(source, event, T0);
    const fromUpdates = buildView([source], null, sidecar.at).job!.history!;
    const fromSnapshot = buildView([live('ws://a/v1/stream', sidecar.frame('snapshot', 41))], null, sidecar.at).job!.history!;
    expect(fromUpdates.slices).toBe(fromSnapshot.slices);
    expect(fromUpdates.stepMs[0]!.values).toEqual(fromSnapshot.stepMs[0]!.values);
    expect(fromUpdates.gpuUtil[0]!.values).toEqual(fromSnapshot.gpuUtil[0]!.values);
    expect(source.seq).toBe(40);
    const events = buildView([source], null, sidecar.at).job!.events;
    expect(events.flatMap((e) => (e.kind === 'verdict' && e.who === 'job' ? [[e.from, e.to]] : []))).toEqual([[null, 'compute-bound'], ['compute-bound', 'input-bound']]);
  });

  it('ignores an update that comes before any snapshot', () => {
    const sidecar = new SimulatedSidecar('early', [{ rank: 0, host: 'h', phases: () => healthy }], []);
    sidecar.runUntil(2);
    const source = applyFrame(initialSource('ws://a/v1/stream'), sidecar.frame('update', 7), T0);
    expect(source.state).toBeNull();
    expect(buildView([source], null, T0).job).toBeNull();
  });

  it('shows a job spread over two sidecars as one: ranks from both nodes, the straggler\'s verdict as the job\'s', () => {
    const nodeA = new SimulatedSidecar('ddp', [{ rank: 0, host: 'node-a', phases: () => healthy }, { rank: 1, host: 'node-a', phases: () => healthy }], [{ index: 0, figures: coolGpu }, { index: 1, figures: coolGpu }], 4);
    const hot = (t: number): Phases => (t >= 8000 ? { ...healthy, compute: 24 } : healthy);
    const nodeB = new SimulatedSidecar('ddp', [{ rank: 2, host: 'node-b', phases: () => healthy }, { rank: 3, host: 'node-b', phases: hot }], [{ index: 0, figures: coolGpu }, { index: 1, figures: hotGpu }], 4);
    nodeA.runUntil(16);
    nodeB.runUntil(16);
    const view = buildView([live('ws://node-a:9477/v1/stream', nodeA.frame('snapshot', 1)), live('ws://node-b:9477/v1/stream', nodeB.frame('snapshot', 1))], null, nodeB.at);
    const job = view.job!;
    expect(job.ranks.map((r) => [r.rank, r.node])).toEqual([[0, 'node-a'], [1, 'node-a'], [2, 'node-b'], [3, 'node-b']]);
    expect(job.worldSize).toBe(4);
    expect(job.nodes).toEqual(['node-a', 'node-b']);
    expect(job.straggler).toMatchObject({ rank: 3, reason: 'gpu-clocks' });
    expect(job.banner).toMatchObject({ verdict: 'throttled', cause: 'thermal', rank: 3 });
    expect(job.ranks.find((r) => r.rank === 3)).toMatchObject({ straggler: true, verdict: 'throttled' });
    expect(job.gpus.map((g) => `${g.node}/${g.index}`)).toEqual(['node-a/0', 'node-a/1', 'node-b/0', 'node-b/1']);
    expect(job.history!.stepMs.map((r) => r.label)).toEqual(['rank 0', 'rank 1', 'rank 2', 'rank 3']);
    expect(job.timelines.map((t) => t.label)).toEqual(['node-a', 'node-b']);

    const line = plainLine(view, Date.parse('2026-12-02T15:20:01.456Z'));
    expect(line).toMatch(/^2026-12-02T15:20:01Z job=ddp verdict=throttled cause=thermal steps=\d+ step_p50=[\d.]+ms/);
    expect(line).toContain('ranks=0:compute-bound,1:compute-bound,2:compute-bound,3:throttled straggler=rank3');
    expect(line).toContain('node-b/gpu1 util=97% sm=51% temp=91C power=500/700W thr=HwThermalSlowdown mem=40000/81559MiB');
  });

  it('marks what a lost sidecar last sent as stale, and says so in the plain line', () => {
    const sidecar = new SimulatedSidecar('lost', [{ rank: 0, host: 'h', phases: () => healthy }], [{ index: 0, figures: coolGpu }]);
    sidecar.runUntil(4);
    const source: SourceState = { ...live('ws://h:1/v1/stream', sidecar.frame('snapshot', 1)), status: 'reconnecting', attempt: 2, error: 'connect ECONNREFUSED', retryAt: T0 + 1500 };
    const view = buildView([source], null, T0);
    expect(view.sources[0]).toMatchObject({ status: 'reconnecting', attempt: 2, retryInMs: 1500 });
    expect(view.job!.ranks[0]!.stale).toBe(true);
    expect(plainLine(view, T0)).toContain('source=ws://h:1/v1/stream:reconnecting source_error=connect_ECONNREFUSED job=lost');
    expect(plainLine(buildView([initialSource('ws://h:1/v1/stream')], null, T0), T0)).toBe('2026-12-02T15:00:00Z source=ws://h:1/v1/stream:connecting job=- status=waiting-for-a-job');
  });

  it('lists live jobs before ended ones and shows the one asked for', () => {
    const a = new SimulatedSidecar('a', [{ rank: 0, host: 'h', phases: () => healthy }], []);
    a.runUntil(2);
    const state = a.frame('snapshot', 1) as SnapshotFrame;
    const ended = { ...state.state.jobs[0]!, job: 'old', ended: true, started_at: new Date(T0 + 10_000).toISOString() };
    const frame: SnapshotFrame = { ...state, state: { ...state.state, jobs: [ended, ...state.state.jobs] } };
    const source = live('ws://h/v1/stream', frame);
    expect(buildView([source], null, T0).jobs).toEqual([{ id: 'a', ended: false }, { id: 'old', ended: true }]);
    expect(buildView([source], null, T0).job!.id).toBe('a');
    expect(buildView([source], 'old', T0).job!.id).toBe('old');
    expect(buildView([source], 'gone', T0).job!.id).toBe('a');
  });
});

describe('stream frames', () => {
  it('refuses what is not a stream frame of this version', () => {
    expect(() => parseFrame('{')).toThrow(/not JSON/);
    expect(() => parseFrame('[]')).toThrow(/not a JSON object/);
    expect(() => parseFrame('{"v":2,"type":"update"}')).toThrow(/stream version 2/);
    expect(() => parseFrame('{"v":1,"type":"hello"}')).toThrow(/unknown frame type "hello"/);
    expect(() => parseFrame('{"v":1,"type":"update","seq":1,"at":"x","state":{"jobs":[],"counters":{}}}')).toThrow('update.history: missing');
    expect(() => parseFrame('{"v":1,"type":"verdict","job":"j"}')).toThrow('verdict.at: missing');
  });

  it('prints a verdict change as one plain line', () => {
    const event = parseFrame(
      JSON.stringify({ v: 1, type: 'verdict', at: '2026-12-02T15:20:01.900Z', job: 'demo', rank: null, from: 'compute-bound', from_cause: null, to: 'input-bound', cause: 'few-workers', since: '2026-12-02T15:19:59Z', rule: 'r', recommendation: null }),
    ) as VerdictFrame;
    expect(plainEvent(event)).toBe('2026-12-02T15:20:01Z event=verdict job=demo rank=- from=compute-bound to=input-bound cause=few-workers');
  });

  it('normalises sidecar addresses to their stream URL', () => {
    expect(streamUrl('ws://127.0.0.1:9477')).toBe('ws://127.0.0.1:9477/v1/stream');
    expect(streamUrl('node-3:9477')).toBe('ws://node-3:9477/v1/stream');
    expect(streamUrl('https://sidecar.example/')).toBe('wss://sidecar.example/v1/stream');
    expect(streamUrl('ws://h:1/custom/stream')).toBe('ws://h:1/custom/stream');
    expect(() => streamUrl('ftp://h')).toThrow(/not a ws/);
  });
});

describe('history series', () => {
  it('writes newer slices over older ones, fills gaps with null and keeps the last N', () => {
    const held = { from: 10_000, values: [1, 2, 3] };
    expect(mergeSeries(held, { from: 11_000, values: [20, 30, 40] }, 1000, 10)).toEqual({ from: 10_000, values: [1, 20, 30, 40] });
    expect(mergeSeries(held, { from: 15_000, values: [6] }, 1000, 10)).toEqual({ from: 10_000, values: [1, 2, 3, null, null, 6] });
    expect(mergeSeries(held, { from: 12_000, values: [30, 40, 50] }, 1000, 3)).toEqual({ from: 12_000, values: [30, 40, 50] });
    expect(valuesBetween({ from: 10_000, values: [1, 2, 3] }, 9_000, 5, 1000)).toEqual([null, 1, 2, 3, null]);
  });

  it('lays out only the slices it keeps, however far apart the two series start', () => {
    // A series from a snapshot dated 1970 (a sidecar that had not ticked yet) and one from now.
    const now = Date.parse('2026-12-06T12:00:00Z');
    expect(mergeSeries({ from: -299_000, values: [1, 2] }, { from: now, values: [7, 8] }, 1000, 300)).toEqual({ from: now + 2000 - 300_000, values: [...new Array(298).fill(null), 7, 8] });
    expect(mergeSeries({ from: now, values: [7, 8] }, { from: -299_000, values: [1] }, 1000, 5)).toEqual({ from: now - 3000, values: [null, null, null, 7, 8] });
    // A date it could not read lays out nothing (and throws nothing).
    expect(mergeSeries({ from: now, values: [7, 8] }, { from: Number.NaN, values: [1] }, 1000, 5).values).toEqual([]);
  });
});

describe('formatting', () => {
  it('draws sparklines on a fixed or an automatic scale, blank where nothing was seen', () => {
    expect(sparkline([0, 50, 100, null], { min: 0, max: 100 })).toBe('▁▅█ ');
    expect(sparkline([5, 10])).toBe('▅█');
    expect(sparkline([])).toBe('');
  });

  it('averages long histories down to the width, aligned on the newest value', () => {
    expect(resample([1, 2, 3, 4, 5, 6], 3)).toEqual([1.5, 3.5, 5.5]);
    expect(resample([1, 2, 3, 4, 5], 2)).toEqual([1.5, 4]);
    expect(resample([null, null, 4, 6], 2)).toEqual([null, 5]);
    expect(resample([1, 2], 5)).toEqual([1, 2]);
  });

  it('splits a bar into exactly its width, each part by its share', () => {
    const shares = { data: 0.61, h2d: 0.01, compute: 0.35, other: 0.03 };
    const cells = stackedCells(shares, 20);
    expect(cells.reduce((sum, c) => sum + c.cells, 0)).toBe(20);
    expect(cells).toEqual([{ part: 'data', cells: 12 }, { part: 'compute', cells: 7 }, { part: 'other', cells: 1 }]);
    expect(stackedCells(null, 4)).toEqual([]);
  });

  it('fits text into columns and figures into few characters', () => {
    expect(fit('abc', 5)).toBe('abc  ');
    expect(fit('abc', 5, 'right')).toBe('  abc');
    expect(fit('abcdef', 4)).toBe('abc…');
    expect([fmtMs(1.234), fmtMs(12.34), fmtMs(123.4), fmtMs(null)]).toEqual(['1.23', '12.3', '123', '–']);
  });

  it('gives ranks and GPUs their lines first on a small terminal and never fills the last line', () => {
    const big = layout(48, { ranks: 2, gpus: 2, sparks: 6, events: 12, advice: 3 });
    expect(big).toEqual({ ranks: 2, gpus: 2, sparks: 6, events: 8, advice: 3 });
    const small = layout(24, { ranks: 8, gpus: 8, sparks: 24, events: 8, advice: 3 });
    expect(small.ranks + small.gpus + small.sparks + small.events).toBe(24 - 1 - FIXED_LINES);
    expect(small.ranks).toBeGreaterThanOrEqual(small.sparks);
    expect(small.advice).toBe(0);
    // Recommendations only with their heading and the gap before it.
    expect(layout(FIXED_LINES + 1 + 2, { ranks: 0, gpus: 0, sparks: 0, events: 0, advice: 3 }).advice).toBe(0);
    expect(layout(FIXED_LINES + 1 + 3, { ranks: 0, gpus: 0, sparks: 0, events: 0, advice: 3 }).advice).toBe(1);
    expect(layout(10, { ranks: 8, gpus: 8, sparks: 24, events: 8, advice: 3 })).toEqual({ ranks: 0, gpus: 0, sparks: 0, events: 0, advice: 0 });
  });
});

describe('columns', () => {
  it('drops the least needed columns first until the rest fit', () => {
    const columns = [
      { key: 'rank', width: 5, keep: 10 },
      { key: 'host', width: 14, keep: 1 },
      { key: 'p50', width: 8, keep: 9 },
      { key: 'verdict', width: 30, keep: 10 },
    ];
    expect(fitColumns(columns, 100)).toEqual(['rank', 'host', 'p50', 'verdict']);
    expect(fitColumns(columns, 45)).toEqual(['rank', 'p50', 'verdict']);
    expect(fitColumns(columns, 36)).toEqual(['rank', 'verdict']);
    expect(fitColumns(columns, 3)).toEqual(['rank']);
  });
});
