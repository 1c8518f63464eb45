import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { JournalEntry } from '../src/engine/entries.js';
import { replayJournal } from '../src/journal/replay.js';
import { encodeLine, segmentName } from '../src/journal/wal-files.js';
import { hello, run, T0 } from './support/entries.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * A journal whose entries are far apart in time (a job idle for hours, or a forged one spanning a
 * year) replays in time that grows with its entries, not with the span: replay jumps over the gap
 * instead of making up a tick every 250 ms through it, and reaches the state the ticks would have.
 */

const tempDir = useTempDirs('stepscope-replay-gaps-');

const config = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 };

function write(entries: JournalEntry[]): string {
  const dir = tempDir();
  writeFileSync(path.join(dir, segmentName(1)), Buffer.concat(entries.map((entry) => encodeLine(entry))));
  return dir;
}

/** The entries with a tick every 250 ms of their time before each, as replay made them up before it jumped gaps. */
function denseTicks(entries: JournalEntry[]): JournalEntry[] {
  const out: JournalEntry[] = [];
  let next = entries[0]!.at;
  for (const entry of entries) {
    for (; next + 250 <= entry.at; next += 250) out.push({ t: 'tick', at: next + 250 });
    out.push(entry);
  }
  return out;
}

/** A job that steps for 10 s, is silent for `gapMs`, steps 10 s more and ends, journaled without ticks. */
function job(gapMs: number): JournalEntry[] {
  const first = run('a', 0, 10, { data: 2, compute: 20 });
  const second = run('a', 10_000 + gapMs, 10, { data: 12, compute: 20 }, first.nextSeq);
  const entries: JournalEntry[] = [
    { t: 'start', at: T0, config },
    hello('a'),
    { t: 'connect', at: T0, session: 'a' },
    ...first.entries,
    ...second.entries,
    { t: 'end', at: T0 + 20_000 + gapMs, session: 'a', reason: 'close' },
    { t: 'stop', at: T0 + 23_000 + gapMs },
  ];
  return entries.filter((entry) => entry.t !== 'tick');
}

async function summaryOf(dir: string) {
  const { engine, report } = await replayJournal(dir);
  const ended = engine.snapshot().ended;
  expect(ended).toHaveLength(1);
  return { summary: ended[0]!.summary, report, engine };
}

describe('replaying a journal with gaps in time', () => {
  it('reaches the summary that ticking through a two-hour gap every 250 ms reached', async () => {
    const gap = 2 * 3_600_000;
    const ticked = await summaryOf(write(denseTicks(job(gap))));
    const jumped = await summaryOf(write(job(gap)));
    expect(jumped.summary).toEqual(ticked.summary);
    // Still connected, not stepping for two hours: hung (issue 29), in the timeline as the ticks had it.
    expect(jumped.summary.timeline.map((s) => s.verdict)).toContain('hung');
    // The ticks made up for the jump are a few hundred around the entries, not the 28,800 of the gap.
    expect(jumped.report.entries).toBeLessThan(1_000);
  });

  it('replays two entries a year apart at once', async () => {
    const year = 365 * 24 * 3_600_000;
    const dir = write([hello('a'), { t: 'steps', at: T0 + year, session: 'a', dropped: 0, rows: [[1, 0, year * 1e6, 20e6, 1e6, 0, 19e6, 32, null, null, null]] }]);
    const { engine, report } = await replayJournal(dir);
    expect(report.problems).toBe(0);
    expect(report.entries).toBeLessThan(1_000);
    expect(engine.snapshot().at).toBeGreaterThanOrEqual(T0 + year - 250);
  }, 20_000);
});
