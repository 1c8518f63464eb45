import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { Engine } from '../src/engine/engine.js';
import { parseEntry, REFERENCE_ENTRY_VERSION, type EngineConfig, type JournalEntry } from '../src/engine/entries.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { replayJournal } from '../src/journal/replay.js';
import { hello, run, T0 } from './support/entries.js';
import { feed, recorderOn } from './support/journaled.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * A run's comparison with its reference survives a restart and a replay: the sidecar killed mid-run
 * and started again on its journal (before the regression is called, and while it holds; from the
 * segments alone and from a checkpoint), and `stepscope replay` of that journal, give the same
 * regression, begun at the same time, and the same baseline comparison as a sidecar that never stopped.
 */

const tempDir = useTempDirs('stepscope-runs-restart-');

const config: EngineConfig = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000, regressionThresholdPct: 10, regressionHoldMs: 5_000 };

/** The job's good run: the same loop, 10 ms a step, 2 of them waiting for data. */
function baseline(): Summary {
  const engine = new Engine();
  for (const entry of [{ t: 'start', at: T0, config } as const, hello('b0'), { t: 'connect', at: T0, session: 'b0' } as const, ...run('b0', 0, 20, { data: 2, compute: 8 }).entries]) engine.apply(entry);
  return engine.analyst.summary('train', T0 + 20_000, { series: false })!;
}

/** Run 1 of `train`, compared with the pinned baseline: twice as slow per sample, from data wait, for 40 s, then it ends. */
function job(): JournalEntry[] {
  return [
    { t: 'start', at: T0, config },
    hello('s0'),
    { t: 'connect', at: T0, session: 's0' },
    { t: 'reference', at: T0, v: REFERENCE_ENTRY_VERSION, job: 'train', pinned: baseline(), past: [] },
    ...run('s0', 0, 40, { data: 12, compute: 8 }).entries,
    { t: 'end', at: T0 + 40_000, session: 's0', reason: 'close' },
    { t: 'tick', at: T0 + 40_250 },
  ];
}

describe('the run history across a restart', () => {
  const entries = job();
  const uninterrupted = new Engine();
  /** The uninterrupted engine's snapshot after each entry, by the entry's index. */
  const after: EngineSnapshot[] = [];
  let ended: EngineSnapshot | null = null;
  for (const entry of entries) {
    if (uninterrupted.apply(entry)?.ended.length) ended = uninterrupted.snapshot();
    after.push(uninterrupted.snapshot());
  }
  const began = after.flatMap((s) => s.regressionChanges).find((c) => c.regressed)!;
  const summary = ended!.ended[0]!.summary;

  it('is a regression in the uninterrupted run, begun well before it is called, against the pinned baseline', () => {
    expect(began).toMatchObject({ job: 'train', run: 1, reference: { kind: 'baseline' }, thresholdPct: 10 });
    expect(began.at - began.startedAt).toBeGreaterThanOrEqual(5_000);
    expect(summary.regression).toMatchObject({ threshold_pct: 10, against: expect.stringMatching(/^baseline/), since_s: Math.round((began.startedAt - Date.parse(summary.started_at)) / 1000) });
    expect(summary.baseline!.change_pct).toBeGreaterThan(50);
  });

  it.each([
    ['before the regression is called, from the segments alone', 'before', false],
    ['before the regression is called, from a checkpoint', 'before', true],
    ['while it holds, from the segments alone', 'during', false],
    ['while it holds, from a checkpoint', 'during', true],
  ] as const)('gives the same onset, regression and baseline when killed %s; and so does a replay of its journal', async (_title, when, checkpoint) => {
    const dir = tempDir();
    const clock = { now: T0 };
    // Past the threshold but not yet called, or called a few seconds before.
    const killAt = when === 'before' ? began.startedAt + 2_000 : began.at + 3_000;
    const kill = entries.findIndex((e) => e.at >= killAt);
    const first = await recorderOn(dir, new Engine(), clock);
    await feed(first, clock, entries.slice(0, kill));
    if (checkpoint) await first.checkpoint();
    // SIGKILL: the first recorder is abandoned as it is.

    const { engine, report } = await replayJournal(dir);
    expect(report).toMatchObject({ problems: 0, skipped: 0, checkpoint: checkpoint ? expect.stringMatching(/^checkpoint-/) : null });
    // What the restarted sidecar serves before anything new comes: the regression holding, with its onset, or none yet.
    expect(engine.snapshot().regressions).toEqual(after[kill - 1]!.regressions);
    expect(engine.snapshot().references).toEqual(after[kill - 1]!.references);
    const second = await recorderOn(dir, engine, clock);
    const restartAt = entries[kill]!.at;
    await feed(second, clock, [{ t: 'start', at: restartAt, config }, { t: 'connect', at: restartAt, session: 's0' }, ...entries.slice(kill)]);
    const restarted = engine.snapshot();
    expect(restarted.ended).toHaveLength(1);
    expect(restarted.ended[0]!.summary).toEqual(summary);
    expect(restarted.jobs[0]!.baseline).toEqual(ended!.jobs[0]!.baseline);
    await second.close();

    // `stepscope replay` of the journal both sidecars wrote: the same summary, regression and onset.
    const replayed = await replayJournal(dir);
    expect(replayed.engine.snapshot().ended.map((e) => e.summary)).toEqual([summary]);
  });

  it('refuses a reference entry of a version it does not know, or holding no summary, saying why', () => {
    const reference = entries.find((e) => e.t === 'reference')!;
    expect(parseEntry(JSON.parse(JSON.stringify(reference)))).toEqual(reference);
    expect(parseEntry({ ...reference, v: 2 })).toBe('reference.v: must be 1 (got 2)');
    expect(parseEntry({ ...reference, pinned: { schema: 'stepscope.summary/v1' } })).toMatch(/^reference\.pinned/);
    expect(parseEntry({ ...reference, past: [{ job: 'train' }] })).toMatch(/^reference\.past\.0/);
  });
});
