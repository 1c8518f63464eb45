import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compare, compareTo, medianReference } from '../src/analysis/compare.js';
import type { Summary } from '../src/protocol/summary.js';
import type { EngineSnapshot, JobState } from '../src/engine/snapshot.js';
import { chooseReference, fingerprintOf, historyEntry, judgeRun, runRecord } from '../src/outputs/history.js';
import { LiveComparisons } from '../src/outputs/history-live.js';
import { HistoryStore } from '../src/outputs/history-store.js';
import { ROOT, tempDir } from './support/sidecar.js';

/**
 * The run history (src/outputs/history*.ts) and the comparison it feeds (src/analysis/compare.ts):
 * per sample, against the median of comparable runs, with what changed; kept on disk bounded, whole,
 * and read back through its schema; a regression live only once it holds past warm-up.
 */

const fixture = JSON.parse(readFileSync(path.join(ROOT, 'test/fixtures/summaries/a10-baseline.json'), 'utf8')) as Summary;

/** A run of the fixture's job: `stepMs` a step of `samples` samples, `dataShare` of it waiting for data. */
function summary(day: number, stepMs: number, options: { samples?: number; dataShare?: number; env?: Summary['env']; worldSize?: number } = {}): Summary {
  const data = options.dataShare ?? 0.05;
  const ended = new Date(Date.UTC(2026, 10, day, 12)).toISOString();
  return {
    ...fixture,
    started_at: new Date(Date.parse(ended) - 3_600_000).toISOString(),
    ended_at: ended,
    world_size: options.worldSize ?? 1,
    step_ms: { ...fixture.step_ms, mean: stepMs },
    breakdown: { data, h2d: 0.02, compute: 0.9 - data, other: 0.08 },
    samples_per_step: options.samples ?? 32,
    env: options.env ?? fixture.env,
  };
}

describe('comparing per sample', () => {
  it('does not call a bigger batch a slowdown: the reference is scaled to this run’s samples a step', () => {
    const c = compare(summary(1, 100, { samples: 32 }), summary(2, 200, { samples: 64 }));
    expect(c.change_pct).toBe(0);
    expect(c.step_ms).toEqual({ baseline: 200, current: 200 });
    expect(c.text.split('\n')[0]).toBe('About as fast per sample as baseline (run of 2026-11-01).');
  });

  it('says how much slower per sample, which phase most of it is, and what changed since', () => {
    const before = summary(1, 100, { env: { ...fixture.env, torch: '2.4.1', loader: { batch_size: 32, num_workers: 8 } } });
    const after = summary(2, 114, { dataShare: 0.15, env: { ...fixture.env, torch: '2.5.0', loader: { batch_size: 32, num_workers: 4 } } });
    const c = compare(before, after);
    expect(c.change_pct).toBe(14);
    expect(c.grew_most).toBe('data');
    expect(c.text.split('\n')[0]).toBe('14% slower per sample than baseline (run of 2026-11-01): 12 of 14 points from data wait; changed since: loader.num_workers 8→4, torch 2.4.1→2.5.0.');
  });

  it('compares per step where a run does not say its samples', () => {
    const c = compare({ ...summary(1, 100), samples_per_step: null, env: {} }, { ...summary(2, 120), samples_per_step: null, env: {} });
    expect(c.change_pct).toBe(20);
    expect(c.text).toMatch(/^20% slower per step than/);
  });

  it('takes the median run of the comparable ones, the environment of the newest', () => {
    const runs = [summary(1, 100), summary(2, 140), summary(3, 90, { env: { ...fixture.env, torch: '9.9' } })];
    const reference = medianReference(runs)!;
    expect(reference.summary.step_ms.mean).toBe(100);
    expect(reference.env.torch).toBe('9.9');
    expect(reference.label).toBe('the median of the last 3 runs (newest 2026-11-03)');
    expect(compareTo(reference, summary(4, 110)).change_pct).toBe(10);
  });
});

describe('the run history', () => {
  const entry = (s: Summary, run: number) => historyEntry(s, runRecord(s, run, null, null));

  it('keys runs by GPU model and ranks, not by the software that changed', () => {
    const a = fingerprintOf(summary(1, 100));
    expect(fingerprintOf(summary(2, 100, { env: { ...fixture.env, torch: '9' } })).key).toBe(a.key);
    expect(fingerprintOf(summary(2, 100, { worldSize: 8 })).key).not.toBe(a.key);
    expect(fingerprintOf({ ...summary(2, 100), env: { ...fixture.env, gpu_name: 'NVIDIA H100' } }).key).not.toBe(a.key);
    expect(a).toMatchObject({ gpuName: 'NVIDIA A10', worldSize: 1 });
  });

  it('compares with the last comparable runs only, never with the run itself; a pinned baseline wins', () => {
    const entries = [entry(summary(1, 50, { worldSize: 8 }), 1), entry(summary(2, 100), 2), entry(summary(3, 104), 3)];
    const current = summary(4, 130);
    expect(chooseReference(entries, current, null)!.label).toBe('the median of the last 2 runs (newest 2026-11-03)');
    expect(chooseReference(entries, summary(3, 104), null)!.runs).toBe(1);
    expect(chooseReference(entries, current, summary(1, 10))!.kind).toBe('baseline');
    expect(chooseReference([], current, null)).toBeNull();
    const { comparison, regression } = judgeRun(chooseReference(entries, current, null), current, 10, 120);
    expect(comparison!.change_pct).toBe(30);
    expect(regression).toMatchObject({ change_pct: 30, threshold_pct: 10, since_s: 120, text: expect.stringMatching(/^30% slower per sample than the median of the last 2 runs/) });
    expect(judgeRun(chooseReference(entries, summary(4, 105), null), summary(4, 105), 10, null).regression).toBeNull();
  });

  it('keeps the newest runs of each job on disk, whole, and reads them back through their schema', async () => {
    const dir = tempDir();
    const store = new HistoryStore(dir, 3);
    for (let day = 1; day <= 5; day++) {
      const s = { ...summary(day, 100 + day), series: { from: '', slice_s: 1, steps: [], step_ms: [], phase_ms: { data: [], h2d: [], compute: [], other: [] }, samples_per_s: [], ranks: [], ranks_total: 0, gpus: [] } };
      await store.add(s, runRecord(s, day, null, null));
    }
    const folder = path.join(dir, 'detector-week1');
    const files = readdirSync(folder);
    expect(files).toHaveLength(3);
    expect(files.every((f) => /^\d{8}T\d{9}Z-run[345]-[0-9a-f]{12}\.json$/.test(f))).toBe(true);
    expect(files.some((f) => f.endsWith('.partial'))).toBe(false);
    // The series is the report's: the history keeps the rest.
    expect(JSON.parse(readFileSync(path.join(folder, files[0]!), 'utf8')).summary.series).toBeUndefined();
    const again = new HistoryStore(dir, 3);
    expect((await again.load('detector-week1')).map((e) => e.record.run)).toEqual([3, 4, 5]);
    expect(store.entries('detector-week1').map((e) => e.record.run)).toEqual([3, 4, 5]);
  });

  it('skips a file that does not read or validate, or holds another job, saying which and why', async () => {
    const dir = tempDir();
    const folder = path.join(dir, 'detector-week1');
    mkdirSync(folder, { recursive: true });
    const good = entry(summary(1, 100), 1);
    writeFileSync(path.join(folder, '20261101T120000000Z-run1-aaaaaaaaaaaa.json'), JSON.stringify(good));
    writeFileSync(path.join(folder, '20261102T120000000Z-run2-aaaaaaaaaaaa.json'), '{"schema":"stepscope.history/v1", "record": ');
    writeFileSync(path.join(folder, '20261103T120000000Z-run3-aaaaaaaaaaaa.json'), JSON.stringify({ ...good, record: { ...good.record, steps: -1 } }));
    writeFileSync(path.join(folder, '20261104T120000000Z-run4-aaaaaaaaaaaa.json'), JSON.stringify({ ...good, record: { ...good.record, job: 'other' } }));
    writeFileSync(path.join(folder, 'notes.txt'), 'not ours');
    const skipped: string[] = [];
    const store = new HistoryStore(dir, 20, (s) => skipped.push(`${path.basename(s.file)}: ${s.reason}`));
    expect((await store.load('detector-week1')).map((e) => e.record.run)).toEqual([1]);
    expect(skipped).toEqual([
      expect.stringMatching(/^20261102T120000000Z-run2-aaaaaaaaaaaa\.json: .*JSON/),
      '20261103T120000000Z-run3-aaaaaaaaaaaa.json: entry.record.steps: must be >= 0 (got -1)',
      '20261104T120000000Z-run4-aaaaaaaaaaaa.json: holds job "other", not "detector-week1"',
    ]);
    expect(store.skippedOf('detector-week1')).toHaveLength(3);
  });
});

describe('live comparisons', () => {
  const T = Date.parse('2026-12-01T12:00:00Z');
  const reference = summary(1, 100);
  const job = (over: Partial<JobState>): JobState =>
    ({ job: 'detector-week1', run: 2, started_at: new Date(T).toISOString(), ended: false, baseline: null, verdict: { verdict: 'input-bound' }, ...over }) as unknown as JobState;
  const snapshot = (at: number, jobs: JobState[]) => ({ at, jobs }) as unknown as EngineSnapshot;

  it('puts the comparison in the snapshot, calls a regression only once it holds past warm-up, and says when it is over', () => {
    const live = new LiveComparisons({ has: () => true, choose: () => medianReference([reference]) }, { thresholdPct: 10, holdMs: 30_000, everyMs: 1_000 });
    let stepMs = 130;
    const decorate = (at: number, over: Partial<JobState> = {}) => live.decorate(snapshot(at, [job(over)]), () => summary(2, stepMs));
    // Warming up: compared, never a regression.
    expect(decorate(T + 1_000, { verdict: { verdict: 'warming-up' } as JobState['verdict'] }).changes).toEqual([]);
    const first = decorate(T + 5_000);
    expect(first.snapshot.jobs[0]!.baseline!.change_pct).toBe(30);
    expect(first.changes).toEqual([]);
    expect(decorate(T + 34_000).changes).toEqual([]);
    const begun = decorate(T + 35_000).changes;
    // It began when the run passed the threshold and stayed past it, 30 s before it was called.
    expect(begun).toEqual([
      {
        job: 'detector-week1',
        run: 2,
        at: T + 35_000,
        regressed: true,
        changePct: 30,
        text: expect.stringMatching(/^30% slower per sample/),
        startedAt: T + 5_000,
        endedAt: null,
        reference: { kind: 'history', label: medianReference([reference])!.label },
        thresholdPct: 10,
      },
    ]);
    expect(decorate(T + 35_000).snapshot.regressionChanges).toBeUndefined();
    expect(live.regressions()).toEqual([{ job: 'detector-week1', regressed: true, change_pct: 30 }]);
    expect(decorate(T + 35_500).snapshot.regressions).toEqual(live.regressions());
    // The run's end keeps when it began.
    stepMs = 100;
    expect(decorate(T + 40_000).changes).toEqual([]);
    const over = decorate(T + 70_000);
    expect(over.changes).toMatchObject([{ regressed: false, changePct: 0, startedAt: T + 5_000, endedAt: T + 40_000 }]);
    // The decorated snapshot carries them to the stream (src/outputs/stream-events.ts).
    expect(over.snapshot.regressionChanges).toEqual(over.changes);
  });

  it('gives the final figures at the end, with when the live regression began, and shows them for the ended run', () => {
    const live = new LiveComparisons({ has: () => true, choose: () => medianReference([reference]) }, { thresholdPct: 10, holdMs: 0, everyMs: 0 });
    live.decorate(snapshot(T + 60_000, [job({})]), () => summary(2, 130));
    live.decorate(snapshot(T + 61_000, [job({})]), () => summary(2, 130));
    const final = live.finish(2, { ...summary(2, 125), started_at: new Date(T).toISOString() });
    expect(final.regression).toMatchObject({ change_pct: 25, since_s: 60 });
    const ended = live.decorate(snapshot(T + 62_000, [job({ ended: true, baseline: null })]), () => null);
    expect(ended.snapshot.jobs[0]!.baseline).toBe(final.comparison);
  });

  it('leaves the snapshot as it is where there is nothing to compare with', () => {
    const live = new LiveComparisons({ has: () => false, choose: () => null }, { thresholdPct: 10, holdMs: 0, everyMs: 0 });
    const s = snapshot(T, [job({})]);
    expect(live.decorate(s, () => summary(2, 130)).snapshot).toBe(s);
  });
});
