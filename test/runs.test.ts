import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compare, compareTo, medianReference } from '../src/analysis/compare.js';
import type { Summary } from '../src/protocol/summary.js';
import { chooseReference, fingerprintOf, judgeRun, RunComparisons, type RunsAt } from '../src/engine/runs.js';
import { pastRunEntry, referencesFor, runRecord } from '../src/outputs/past-runs.js';
import { PastRunsStore } from '../src/outputs/runs-store.js';
import { ROOT, tempDir } from './support/sidecar.js';

/**
 * Past runs (src/outputs/past-runs.ts, runs-store.ts), the comparison they feed (src/analysis/compare.ts)
 * and the engine's comparisons (src/engine/runs.ts): per sample, against the median of comparable
 * runs, with what changed; kept on disk bounded, whole, and read back through their schema; a
 * regression only once it holds past warm-up. test/runs-restart.test.ts: the same across a restart.
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
  const entry = (s: Summary, run: number) => pastRunEntry(s, runRecord(s, run, null, null));

  it('keys runs by GPU model and ranks, not by the software that changed', () => {
    const a = fingerprintOf(summary(1, 100));
    expect(fingerprintOf(summary(2, 100, { env: { ...fixture.env, torch: '9' } })).key).toBe(a.key);
    expect(fingerprintOf(summary(2, 100, { worldSize: 8 })).key).not.toBe(a.key);
    expect(fingerprintOf({ ...summary(2, 100), env: { ...fixture.env, gpu_name: 'NVIDIA H100' } }).key).not.toBe(a.key);
    expect(a).toMatchObject({ gpuName: 'NVIDIA A10', worldSize: 1 });
  });

  it('compares with the last comparable runs only, never with the run itself; a pinned baseline wins', () => {
    const entries = [summary(1, 50, { worldSize: 8 }), summary(2, 100), summary(3, 104)];
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

  it('journals the newest comparable runs of each fingerprint for a new run, or the pinned baseline alone', () => {
    const entries = [...[1, 2, 3, 4, 5, 6, 7].map((day) => entry(summary(day, 100 + day), day)), entry(summary(8, 50, { worldSize: 8 }), 8), entry({ ...summary(9, 100), steps: 0 }, 9)];
    const references = referencesFor('detector-week1', entries, null);
    expect(references).toMatchObject({ job: 'detector-week1', pinned: null });
    expect(references.past.map((s) => s.step_ms.mean)).toEqual([103, 104, 105, 106, 107, 50]);
    const pinned = referencesFor('detector-week1', entries, { ...summary(1, 10), series: entries[0]!.summary.series });
    expect(pinned.past).toEqual([]);
    expect(pinned.pinned!.series).toBeUndefined();
  });

  it('keeps the newest runs of each job on disk, whole, and reads them back through their schema', async () => {
    const dir = tempDir();
    const store = new PastRunsStore(dir, 3);
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
    const again = new PastRunsStore(dir, 3);
    expect((await again.load('detector-week1')).map((e) => e.record.run)).toEqual([3, 4, 5]);
    expect((await store.load('detector-week1')).map((e) => e.record.run)).toEqual([3, 4, 5]);
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
    const store = new PastRunsStore(dir, 20, (s) => skipped.push(`${path.basename(s.file)}: ${s.reason}`));
    expect((await store.load('detector-week1')).map((e) => e.record.run)).toEqual([1]);
    expect(skipped).toEqual([
      expect.stringMatching(/^20261102T120000000Z-run2-aaaaaaaaaaaa\.json: .*JSON/),
      '20261103T120000000Z-run3-aaaaaaaaaaaa.json: entry.record.steps: must be >= 0 (got -1)',
      '20261104T120000000Z-run4-aaaaaaaaaaaa.json: holds job "other", not "detector-week1"',
    ]);
    expect(store.skippedOf('detector-week1')).toHaveLength(3);
  });
});

describe('the engine\'s comparisons', () => {
  const T = Date.parse('2026-12-01T12:00:00Z');
  const JOB = 'detector-week1';
  const past = [summary(1, 100)];
  /** The job's run 2 at `at`, live, `judged` past warm-up, `stepMs` a step. */
  const at = (time: number, stepMs: number, judged = true): RunsAt => ({
    at: time,
    live: [JOB],
    runOf: () => 2,
    judged: () => judged,
    summary: () => ({ ...summary(2, stepMs), started_at: new Date(T).toISOString() }),
  });

  it('compares a run with its journaled references, calls a regression only once it holds past warm-up, and says when it is over', () => {
    const runs = new RunComparisons({ thresholdPct: 10, holdMs: 30_000 });
    expect(runs.tick(at(T + 1_000, 130))).toEqual([]);
    expect(runs.regressions()).toEqual([]);
    runs.reference({ job: JOB, pinned: null, past });
    // No step in yet: nothing compared.
    expect(runs.tick({ ...at(T + 1_500, 130), summary: () => ({ ...summary(2, 130), steps: 0 }) })).toEqual([]);
    expect(runs.comparisonOf(JOB, 2, false)).toBeNull();
    // Warming up: compared, never a regression.
    expect(runs.tick(at(T + 2_000, 130, false))).toEqual([]);
    expect(runs.tick(at(T + 5_000, 130))).toEqual([]);
    expect(runs.comparisonOf(JOB, 2, false)!.change_pct).toBe(30);
    expect(runs.tick(at(T + 34_000, 130))).toEqual([]);
    const begun = runs.tick(at(T + 35_000, 130));
    // It began when the run passed the threshold and stayed past it, 30 s before it was called.
    const told = {
      job: JOB,
      run: 2,
      at: T + 35_000,
      regressed: true,
      changePct: 30,
      text: expect.stringMatching(/^30% slower per sample/),
      startedAt: T + 5_000,
      endedAt: null,
      reference: { kind: 'history', label: medianReference(past)!.label },
      thresholdPct: 10,
    };
    expect(begun).toEqual([told]);
    expect(runs.tick(at(T + 35_500, 130))).toEqual([]);
    expect(runs.regressions()).toEqual([{ job: JOB, run: 2, regressed: true, change_pct: 30, began: told }]);
    expect(runs.referenced()).toEqual([{ job: JOB, run: 2, reference: { kind: 'history', label: medianReference(past)!.label, runs: 1, ms_per_sample: expect.any(Number) } }]);
    expect(runs.tick(at(T + 40_000, 100))).toEqual([]);
    expect(runs.tick(at(T + 70_000, 100))).toMatchObject([{ regressed: false, changePct: 0, startedAt: T + 5_000, endedAt: T + 40_000 }]);
    expect(runs.regressions()).toMatchObject([{ regressed: false, began: null }]);
  });

  it('gives the final figures at the end, with when the regression began, once, and shows them for the ended run', () => {
    const runs = new RunComparisons({ thresholdPct: 10, holdMs: 0 });
    runs.reference({ job: JOB, pinned: null, past });
    runs.tick(at(T + 60_000, 130));
    const final = runs.finish(2, { ...summary(2, 125), started_at: new Date(T).toISOString() });
    expect(final.regression).toMatchObject({ change_pct: 25, since_s: 60 });
    expect(runs.finish(2, summary(2, 100))).toBe(final);
    expect(runs.comparisonOf(JOB, 2, true)).toBe(final.comparison);
    expect(runs.regressions()).toEqual([]);
  });

  it('holds it all as plain data: a checkpoint loaded goes on as if never stopped', () => {
    const runs = new RunComparisons({ thresholdPct: 10, holdMs: 30_000 });
    runs.reference({ job: JOB, pinned: summary(1, 100), past: [] });
    runs.tick(at(T + 5_000, 130));
    const loaded = RunComparisons.load(JSON.parse(JSON.stringify(runs.dump())), runs.config);
    for (const r of [runs, loaded]) expect(r.tick(at(T + 35_000, 130))).toMatchObject([{ regressed: true, startedAt: T + 5_000, reference: { kind: 'baseline' } }]);
    expect(loaded.regressions()).toEqual(runs.regressions());
  });

  it('lets a job the engine lets go take its references and comparisons with it', () => {
    const runs = new RunComparisons({ thresholdPct: 10, holdMs: 0 });
    runs.reference({ job: JOB, pinned: null, past });
    expect(runs.tick(at(T + 5_000, 130))).toMatchObject([{ regressed: true }]);
    runs.tick({ ...at(T + 6_000, 130), live: [], runOf: () => null });
    expect(runs.dump()).toEqual({ references: [], tracked: [], finals: [] });
  });
});
