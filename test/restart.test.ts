import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { replayJournal } from '../src/journal/replay.js';
import { hello, run, T0 } from './support/entries.js';
import { feed, recorderOn } from './support/journaled.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * A sidecar killed mid-job and started again on its --out ends up where an uninterrupted one does:
 * the same verdicts, timeline, straggler and summary, with or without a checkpoint before the kill;
 * for a run longer than the step buckets keep, the summary's series (the report's charts) too.
 */

const tempDir = useTempDirs('stepscope-restart-');

const config = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 };

/** Two ranks: healthy for 10 s, then rank 1's loader slows down for 10 s (it becomes the straggler), then both end. */
function job(): JournalEntry[] {
  const r0a = run('a', 0, 10, { data: 1, compute: 20 });
  const r1a = run('b', 0, 10, { data: 1, compute: 20 });
  const r0b = run('a', 10_000, 10, { data: 1, compute: 20, other: 30 }, r0a.nextSeq);
  const r1b = run('b', 10_000, 10, { data: 30, compute: 20, other: 1 }, r1a.nextSeq);
  const ticks = (entries: JournalEntry[]) => entries.filter((e) => e.t !== 'tick');
  const merged = [...r0a.entries, ...ticks(r1a.entries), ...r0b.entries, ...ticks(r1b.entries)].sort((x, y) => x.at - y.at || Number(x.t === 'tick') - Number(y.t === 'tick'));
  return [
    { t: 'start', at: T0, config },
    hello('a', { world_size: 2 }),
    hello('b', { rank: 1, local_rank: 1, world_size: 2 }),
    { t: 'connect', at: T0, session: 'a' },
    { t: 'connect', at: T0, session: 'b' },
    ...merged,
    { t: 'end', at: T0 + 20_000, session: 'a', reason: 'close' },
    { t: 'end', at: T0 + 20_000, session: 'b', reason: 'close' },
    { t: 'tick', at: T0 + 20_250 },
  ];
}

describe('a sidecar killed mid-job and started again', () => {
  it.each([
    ['from the segments alone', false],
    ['from a checkpoint and the segments after it', true],
  ])('gives the same verdicts, timeline and summary as an uninterrupted run (%s)', async (_title, checkpoint) => {
    const entries = job();
    const uninterrupted = new Engine();
    let ended = null;
    for (const entry of entries) ended = uninterrupted.apply(entry)?.ended.length ? uninterrupted.snapshot() : ended;

    const dir = tempDir();
    const clock = { now: T0 };
    const kill = entries.findIndex((e) => e.at >= T0 + 14_000);
    const first = await recorderOn(dir, new Engine(), clock);
    await feed(first, clock, entries.slice(0, kill));
    if (checkpoint) await first.checkpoint();
    // SIGKILL: the first recorder is abandoned as it is, nothing closed or flushed beyond what was acknowledged.

    const { engine, report } = await replayJournal(dir);
    expect(report).toMatchObject({ problems: 0, skipped: 0, checkpoint: checkpoint ? expect.stringMatching(/^checkpoint-/) : null });
    const second = await recorderOn(dir, engine, clock);
    const restartAt = entries[kill]!.at;
    // As serve() does on start, and as the hooks do when they reconnect.
    await feed(second, clock, [
      { t: 'start', at: restartAt, config },
      { t: 'connect', at: restartAt, session: 'a' },
      { t: 'connect', at: restartAt, session: 'b' },
      ...entries.slice(kill),
    ]);
    const restarted = engine.snapshot();
    expect(restarted.ended).toHaveLength(1);
    expect(restarted.ended[0]!.summary).toEqual(ended!.ended[0]!.summary);
    expect(restarted.ended[0]!.summary.straggler).toMatchObject({ rank: 1, reason: 'data' });
    expect(restarted.jobs[0]!.timeline).toEqual(ended!.jobs[0]!.timeline);
    expect(restarted.jobs[0]!.ranks.map((r) => r.verdict)).toEqual(ended!.jobs[0]!.ranks.map((r) => r.verdict));
    await second.close();
  });

  it('keeps the series of a run longer than the step buckets hold: the report after a restart from a checkpoint starts where the run did', async () => {
    // 12 minutes of 500 ms steps, one tick every 2 s: the buckets keep the last 10, so by the kill
    // (at 11 min) the first minute is only in the series, and from there in the checkpoint.
    const steps = run('a', 0, 12 * 60, { data: 100, compute: 400 });
    const entries: JournalEntry[] = [
      { t: 'start', at: T0, config },
      hello('a'),
      { t: 'connect', at: T0, session: 'a' },
      ...steps.entries.filter((e) => e.t !== 'tick' || (e.at - T0) % 2_000 === 0),
      { t: 'end', at: T0 + 12 * 60_000 + 50, session: 'a', reason: 'close' },
      { t: 'tick', at: T0 + 12 * 60_000 + 250 },
    ];
    const uninterrupted = new Engine();
    let ended: EngineSnapshot | null = null;
    for (const entry of entries) ended = uninterrupted.apply(entry)?.ended.length ? uninterrupted.snapshot() : ended;
    const whole = ended!.ended[0]!.summary;
    expect(Date.parse(whole.series!.from)).toBeLessThanOrEqual(T0);

    const dir = tempDir();
    const clock = { now: T0 };
    const kill = entries.findIndex((e) => e.at >= T0 + 11 * 60_000);
    const first = await recorderOn(dir, new Engine(), clock);
    await feed(first, clock, entries.slice(0, kill));
    await first.checkpoint();
    const { engine } = await replayJournal(dir);
    const second = await recorderOn(dir, engine, clock);
    const restartAt = entries[kill]!.at;
    await feed(second, clock, [{ t: 'start', at: restartAt, config }, { t: 'connect', at: restartAt, session: 'a' }, ...entries.slice(kill)]);
    const summary = engine.snapshot().ended[0]!.summary;
    expect(summary.series).toEqual(whole.series);
    expect(summary).toEqual(whole);
    await second.close();
  });
});
