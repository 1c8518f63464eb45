import { appendFileSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import { Recorder } from '../src/journal/recorder.js';
import { Wal } from '../src/journal/wal.js';
import { createLogger } from '../src/log/log.js';
import { runReplay } from '../src/replay-command.js';
import { hello, run, T0 } from './support/entries.js';
import { useTempDirs } from './support/temp-dirs.js';

/** `stepscope replay`: a recording written through the real journal, replayed by the command. */

const tempDir = useTempDirs('stepscope-replay-');

function sink() {
  let text = '';
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  });
  return { stream, text: () => text };
}

/** Two runs of one job: the first healthy then starved of data, ended; the second still running. */
async function recording(): Promise<{ dir: string; live: Engine }> {
  const dir = tempDir();
  let now = T0;
  const wal = await Wal.open({ dir, maxBytes: 64 * 1024 * 1024, now: () => now });
  const live = new Engine();
  const recorder = new Recorder(live, wal, { checkpointBytes: 1 << 20, checkpointMs: 60_000, samplesGiveUpShare: 0.75, now: () => now, log: createLogger('silent') });
  const first = run('s1', 0, 8, { data: 1, compute: 20 });
  const starved = run('s1', 8_000, 8, { data: 60, compute: 20 }, first.nextSeq);
  const entries: JournalEntry[] = [
    { t: 'start', at: T0, config: { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 } },
    hello('s1'),
    { t: 'connect', at: T0, session: 's1' },
    ...first.entries,
    ...starved.entries,
    { t: 'end', at: T0 + 16_000, session: 's1', reason: 'close' },
    { t: 'tick', at: T0 + 16_250 },
    hello('s2', {}, 30_000),
    { t: 'connect', at: T0 + 30_000, session: 's2' },
    ...run('s2', 30_000, 4, { compute: 20 }).entries,
  ];
  const written: Array<Promise<unknown>> = [];
  for (const entry of entries) {
    now = entry.at;
    written.push(recorder.record(entry));
  }
  await Promise.all(written);
  await recorder.close();
  return { dir, live };
}

describe('stepscope replay', () => {
  it('prints every run of the recording, as the live sidecar summarised it', async () => {
    const { dir, live } = await recording();
    const out = sink();
    const err = sink();
    expect(await runReplay(dir, { format: 'json', out: out.stream, err: err.stream })).toBe(0);
    const summaries = out
      .text()
      .split(/\n(?=\{)/)
      .map((text) => JSON.parse(text));
    expect(summaries.map((s) => [s.job, s.verdict, s.steps])).toEqual([
      ['train', expect.any(String), 380 + 100],
      ['train', 'compute-bound', 200],
    ]);
    expect(summaries[0].timeline.map((segment: { verdict: string }) => segment.verdict)).toEqual(expect.arrayContaining(['compute-bound', 'input-bound']));
    // The first run's summary is what the live engine wrote when it ended.
    const liveEnded = live.snapshot().jobs[0];
    expect(liveEnded).toMatchObject({ run: 2 });
    expect(err.text()).toMatch(/^stepscope replay: \d+ entries, 2 run\(s\), \d+ ms\n$/);
  });

  it('writes the summaries as the sidecar would, each run its own file', async () => {
    const { dir } = await recording();
    const again = tempDir();
    expect(await runReplay(dir, { format: 'text', write: again, out: sink().stream, err: sink().stream })).toBe(0);
    expect(readdirSync(again).sort()).toEqual([
      'report-train.2.html',
      'report-train.html',
      'report.html',
      'summary-train.2.json',
      'summary-train.2.md',
      'summary-train.json',
      'summary-train.md',
      'summary.json',
      'summary.md',
    ]);
    expect(JSON.parse(readFileSync(path.join(again, 'summary-train.json'), 'utf8')).steps).toBe(480);
  });

  it('paced, prints the verdict changes as they happen', async () => {
    const { dir } = await recording();
    const out = sink();
    expect(await runReplay(dir, { format: 'text', speed: 1e6, out: out.stream, err: sink().stream })).toBe(0);
    // A tick after the window's mean passed the bar, its bound across the window's slices did too.
    expect(out.text()).toMatch(/^2026-12-01T12:00:10\.250Z job train rank 0: compute-bound → input-bound \(unknown\): 44% of step time waiting for data \(≥ 20%, at least 39% across the window\)/m);
    expect(out.text()).toMatch(/^2026-12-01T12:00:31\.500Z job train: warming-up → compute-bound/m);
  });

  it('replays a damaged recording, saying what it skipped and where', async () => {
    const { dir } = await recording();
    const segment = readdirSync(dir).filter((name) => name.startsWith('wal-')).sort()[0]!;
    appendFileSync(path.join(dir, segment), 'deadbeef {"t":"steps","at":\n\u0000\u0001garbage');
    const out = sink();
    const err = sink();
    expect(await runReplay(dir, { format: 'text', out: out.stream, err: err.stream })).toBe(0);
    expect(err.text()).toMatch(/2 unreadable and 0 unusable entries skipped/);
    expect(err.text()).toContain(`${segment} at byte`);
    expect(out.text()).toContain('stepscope summary: train');
  });

  it('says so when there is no journal', async () => {
    const dir = tempDir();
    const err = sink();
    expect(await runReplay(dir, { format: 'text', out: sink().stream, err: err.stream })).toBe(1);
    expect(err.text()).toContain(`no journal in ${dir}`);
    expect(existsSync(path.join(dir, 'summary.json'))).toBe(false);
  });
});
