import { describe, expect, it } from 'vitest';
import { RunSeries, SERIES_MAX_RANKS, SERIES_MAX_SLICES, sig3 } from '../src/analysis/summary-series.js';
import { emptyGpuSample, ThrottleReason } from '../src/counters/types.js';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { parseInput } from '../src/protocol/parse.js';
import { hello, rows, run, T0 } from './support/entries.js';

/**
 * The summary's series (src/analysis/summary-series.ts): built by the engine's ticks from what it
 * keeps anyway, bounded for a run of any length, the same after a replay, and valid as written.
 */

const CONFIG = { windowMs: 4_000, holdMs: 0, endGraceMs: 10_000 };

function feed(engine: Engine, entries: JournalEntry[]): EngineSnapshot | null {
  let last: EngineSnapshot | null = null;
  for (const entry of entries) last = engine.apply(entry) ?? last;
  return last;
}

const gpu = (at: number, throttled: boolean) => ({
  ...emptyGpuSample(at, 0),
  uuid: 'GPU-0',
  name: 'NVIDIA A10',
  utilGpu: throttled ? 97 : 90,
  smClockMHz: throttled ? 1065 : 1695,
  smClockMaxMHz: 1695,
  tempC: throttled ? 90 : 65,
  powerW: 130,
  powerLimitW: 150,
  memUsedMiB: 17_000,
  memTotalMiB: 23_028,
  throttleReasons: throttled ? ThrottleReason.HwThermalSlowdown : 0,
});

/** A one-rank job: 10 s compute-bound, then 10 s waiting on data with its GPU throttled; GPU samples every 500 ms. */
function story(): JournalEntry[] {
  const entries: JournalEntry[] = [
    { t: 'start', at: T0, config: CONFIG },
    { t: 'source', at: T0, gpu: 'sim', reason: 'test' },
    hello('s0', { env: { gpu_name: 'NVIDIA A10' } }),
    { t: 'connect', at: T0, session: 's0' },
  ];
  const first = run('s0', 0, 10, { data: 1, compute: 9 });
  const second = run('s0', 10_000, 10, { data: 8, compute: 12 }, first.nextSeq);
  const gpus: JournalEntry[] = Array.from({ length: 40 }, (_, i) => ({ t: 'gpu', at: T0 + i * 500 + 50, samples: [gpu(T0 + i * 500 + 50, i >= 24)] }));
  const all = [...first.entries, ...second.entries, ...gpus].sort((a, b) => a.at - b.at);
  return [...entries, ...all, { t: 'end', at: T0 + 20_050, session: 's0', reason: 'done' }, { t: 'tick', at: T0 + 20_250 }];
}

describe("the summary's series", () => {
  it('follows the run: step phases, throughput, the rank, the GPU with its throttled stretch', () => {
    const engine = new Engine();
    const last = feed(engine, story());
    const summary = last!.ended[0]!.summary;
    const series = summary.series!;
    expect(series.slice_s).toBe(1);
    expect(series.steps.length).toBeGreaterThanOrEqual(20);
    expect(series.steps.reduce((a, b) => a + b, 0)).toBe(summary.steps);
    // Compute-bound first (10 ms steps, 9 of them compute), then 20 ms steps waiting 8 ms on data.
    expect(series.step_ms[3]).toBeCloseTo(10, 5);
    expect(series.phase_ms.compute[3]).toBeCloseTo(9, 5);
    expect(series.step_ms[15]).toBeCloseTo(20, 5);
    expect(series.phase_ms.data[15]).toBeCloseTo(8, 5);
    expect(series.samples_per_s[3]).toBeCloseTo(3200, -1);
    expect(series.ranks).toEqual([{ rank: 0, step_ms: series.step_ms }]);
    const g = series.gpus[0]!;
    expect(g).toMatchObject({ index: 0, uuid: 'GPU-0', name: 'NVIDIA A10' });
    expect(g.throttled[5]).toBe(0);
    expect(g.throttled[15]).toBe(1);
    expect(g.sm_clock_pct[15]).toBeCloseTo(62.8, 1);
    expect(g.temp_c_max[15]).toBe(90);
    // As written, it reads back through the summary's schema.
    expect(() => parseInput(SummarySchema, JSON.parse(JSON.stringify(summary)), 'summary')).not.toThrow();
  });

  it('is the same when the journal is replayed, and after a restart from a checkpoint', () => {
    const entries = story();
    const live = feed(new Engine(), entries)!.ended[0]!.summary;
    const replayed = new Engine();
    replayed.replaying = true;
    feed(replayed, entries);
    expect(replayed.publishNow().ended[0]!.summary.series).toEqual(live.series);
    // Killed half way: the engine from its checkpoint takes the series on from there.
    const half = entries.findIndex((e) => e.at >= T0 + 12_000);
    const before = new Engine();
    feed(before, entries.slice(0, half));
    const after = Engine.fromCheckpoint(JSON.parse(JSON.stringify(before.toCheckpoint())));
    expect(feed(after, entries.slice(half))!.ended[0]!.summary.series).toEqual(live.series);
  });

  it('stays within its bounds for a long run of many ranks: slices double, the straggler and the extremes are kept', () => {
    const engine = new Engine();
    // Ticks analyse as live but publish no snapshot, which this test does not read.
    engine.replaying = true;
    const ranks = 20;
    const hours = 6;
    const entries: JournalEntry[] = [{ t: 'start', at: T0, config: CONFIG }];
    for (let r = 0; r < ranks; r++) entries.push(hello(`r${r}`, { rank: r, local_rank: r % 8, world_size: ranks }), { t: 'connect', at: T0, session: `r${r}` });
    feed(engine, entries);
    // A step every two minutes per rank (rank 7 the slowest), a tick every four.
    for (let step = 1; step <= hours * 30; step++) {
      const at = step * 120_000;
      const batch: JournalEntry[] = [];
      for (let r = 0; r < ranks; r++) batch.push({ t: 'steps', at: T0 + at, session: `r${r}`, dropped: 0, rows: rows(step, 1, at - 100 - r, { compute: r === 7 ? 50 : 10 + r / 10 }) });
      if (step % 2 === 0) batch.push({ t: 'tick', at: T0 + at + 1 });
      feed(engine, batch);
    }
    const summary = engine.runSummary('train', T0 + hours * 3_600_000)[0]!.summary;
    const series = summary.series!;
    expect(series.steps.length).toBeLessThanOrEqual(SERIES_MAX_SLICES);
    expect(series.steps.length).toBeGreaterThan(SERIES_MAX_SLICES / 2);
    expect(series.slice_s).toBe(64);
    expect(series.steps.reduce((a, b) => a + b, 0)).toBe(summary.steps);
    expect(series.ranks_total).toBe(ranks);
    expect(series.ranks).toHaveLength(SERIES_MAX_RANKS);
    const shown = series.ranks.map((r) => r.rank);
    expect(shown).toContain(7);
    expect(shown).toContain(0);
    expect(shown).toContain(ranks - 1);
    expect(JSON.stringify(series).length).toBeLessThan(100_000);
    // In the checkpoint, as bounded: its slices, every rank's sums in each (not only the 16 shown).
    const dump = engine.toCheckpoint().analyses[0]!.series!;
    expect(dump.slices.length).toBeLessThanOrEqual(SERIES_MAX_SLICES);
    expect(new Set(dump.slices.flatMap((slice) => slice.ranks.map(([rank]) => rank))).size).toBe(ranks);
    expect(JSON.stringify(dump).length).toBeLessThan(1_000_000);
    expect(RunSeries.load(JSON.parse(JSON.stringify(dump))).describe(T0 + hours * 3_600_000, 7)).toEqual(engine.analyst.all()[0]!.series!.describe(T0 + hours * 3_600_000, 7));
  });

  it('comes back from a checkpoint only whole: a checkpoint whose series does not validate is refused, with the reason', () => {
    const entries = story();
    const half = entries.findIndex((e) => e.at >= T0 + 12_000);
    const before = new Engine();
    feed(before, entries.slice(0, half));
    const checkpoint = JSON.parse(JSON.stringify(before.toCheckpoint()));
    const dump = checkpoint.analyses[0].series;
    const withSeries = (series: unknown) => () => Engine.fromCheckpoint({ ...checkpoint, analyses: [{ ...checkpoint.analyses[0], series }] });
    expect(withSeries(dump)).not.toThrow();
    expect(withSeries({ ...dump, slices: Array.from({ length: SERIES_MAX_SLICES + 1 }, () => dump.slices[0]) })).toThrow(/^checkpoint\.analyses\.0\.series\.slices: must NOT have more than/);
    expect(withSeries({ ...dump, slices: [{ ...dump.slices[0], sums: { ...dump.slices[0].sums, durNs: 'x' } }] })).toThrow(/^checkpoint\.analyses\.0\.series\.slices\.0\.sums\.durNs: must be number/);
    // Held before the run's first tick (null): rebuilt from the buckets, which hold this short run whole.
    checkpoint.analyses[0].series = null;
    const live = feed(new Engine(), entries)!.ended[0]!.summary;
    expect(feed(Engine.fromCheckpoint(checkpoint), entries.slice(half))!.ended[0]!.summary.series).toEqual(live.series);
  });

  it('rounds to three significant digits', () => {
    expect([sig3(12.3456), sig3(0.0012345), sig3(98765), sig3(0), sig3(-1.23456)]).toEqual([12.3, 0.00123, 98800, 0, -1.23]);
  });
});
