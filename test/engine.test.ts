import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { parseEntry, type JournalEntry } from '../src/engine/entries.js';
import { hello, rows, run, T0 } from './support/entries.js';

const config = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 };
const start = (at = 0): JournalEntry => ({ t: 'start', at: T0 + at, config });

function feed(engine: Engine, entries: JournalEntry[]) {
  for (const entry of entries) engine.apply(entry);
  return engine.snapshot();
}

describe('Engine', () => {
  it('applies every entry without throwing; what it cannot use is skipped and counted', () => {
    const engine = new Engine();
    engine.apply(start());
    expect(engine.apply({ t: 'steps', at: T0, session: 'nobody', dropped: 0, rows: rows(1, 3, 0, { compute: 10 }) })).toBeNull();
    engine.apply({ t: 'env', at: T0, session: 'nobody', env: { a: 1 } });
    engine.apply({ t: 'disconnect', at: T0, session: 'nobody' });
    expect(engine.stats.skipped).toEqual({ 'unknown-session': 3 });
    expect(engine.apply({ t: 'tick', at: T0 + 250 })?.jobs).toEqual([]);
  });

  it('refuses entries of the wrong shape with a reason naming the field', () => {
    expect(parseEntry({ t: 'steps', at: 1, session: 's', dropped: -1, rows: [] })).toMatch(/^steps\.dropped: must be >= 0/);
    expect(parseEntry({ t: 'tick' })).toMatch(/^tick: must have required property 'at'/);
    expect(parseEntry({ t: 'nope', at: 1 })).toBe('entry: unknown type nope');
    expect(parseEntry('x')).toBe('entry: not an object');
    expect(parseEntry(run('s', 0, 1, { compute: 10 }).entries[0])).toMatchObject({ t: 'steps' });
  });

  it('publishes one frozen snapshot per tick, read by everything', () => {
    const engine = new Engine();
    const snapshot = feed(engine, [start(), hello('s1'), { t: 'connect', at: T0, session: 's1' }, ...run('s1', 0, 3, { compute: 10 }).entries]);
    expect(snapshot.at).toBe(T0 + 3000);
    expect(Object.isFrozen(snapshot)).toBe(true);
    expect(Object.isFrozen(snapshot.jobs[0]!.ranks[0]!.window)).toBe(true);
    expect(snapshot.jobs[0]!.steps).toBe(300);
    expect(snapshot.ranks[0]!.durations.count).toBe(300);
    // The live state goes on after the snapshot was taken, and the snapshot does not move.
    engine.apply(hello('s1', { env: { extra: 1 } }, 3000));
    expect(snapshot.jobs[0]!.ranks[0]!.env).toEqual({});
  });

  it("dates a job from its first step, not from when the sidecar heard of it", () => {
    const engine = new Engine();
    // The hook buffered 5 s of steps before the sidecar came up; they arrive with the first hello.
    const late = hello('s1', {}, 5_000);
    const snapshot = feed(engine, [
      start(5_000),
      late,
      { t: 'connect', at: T0 + 5_000, session: 's1' },
      { t: 'steps', at: T0 + 5_000, session: 's1', dropped: 0, rows: rows(1, 500, 0, { compute: 10 }) },
      ...run('s1', 5_000, 7, { compute: 10 }, 501).entries,
      { t: 'end', at: T0 + 12_000, session: 's1', reason: 'close' },
      { t: 'tick', at: T0 + 12_250 },
    ]);
    const [ended] = snapshot.ended;
    expect(ended!.summary.started_at).toBe(new Date(T0).toISOString());
    expect(ended!.summary.duration_s).toBeCloseTo(12, 1);
    expect(ended!.summary.steps).toBe(1200);
    expect(ended!.summary.samples_per_s).toBeCloseTo((1200 * 32) / 12, -1);
  });

  it('keeps a new run of an ended job apart from it', () => {
    const engine = new Engine();
    const first = feed(engine, [
      start(),
      hello('s1'),
      { t: 'connect', at: T0, session: 's1' },
      ...run('s1', 0, 3, { compute: 10 }).entries,
      { t: 'end', at: T0 + 3_000, session: 's1', reason: 'close' },
      { t: 'tick', at: T0 + 3_250 },
    ]);
    expect(first.ended.map((r) => [r.job, r.run, r.summary.steps])).toEqual([['train', 1, 300]]);
    const second = feed(engine, [
      hello('s2', {}, 10_000),
      { t: 'connect', at: T0 + 10_000, session: 's2' },
      ...run('s2', 10_000, 2, { data: 30, compute: 10 }).entries,
    ]);
    expect(second.jobs).toHaveLength(1);
    expect(second.jobs[0]).toMatchObject({ job: 'train', run: 2, steps: 50, ended: false, started_at: T0 + 10_000 });
  });

  it('a process that comes back resumes its run, even after the run was ended', () => {
    const engine = new Engine();
    const snapshot = feed(engine, [
      start(),
      hello('s1'),
      { t: 'connect', at: T0, session: 's1' },
      ...run('s1', 0, 1, { compute: 10 }).entries,
      { t: 'disconnect', at: T0 + 1_000, session: 's1' },
      { t: 'tick', at: T0 + 3_250 },
      hello('s1', {}, 4_000),
      { t: 'connect', at: T0 + 4_000, session: 's1' },
      { t: 'tick', at: T0 + 4_250 },
    ]);
    expect(snapshot.jobs[0]).toMatchObject({ run: 1, steps: 100, ended: false });
  });

  it('a checkpoint restores exactly the state, and both go on the same', () => {
    const live = new Engine();
    const before = [start(), hello('s1'), { t: 'connect', at: T0, session: 's1' } as JournalEntry, ...run('s1', 0, 6, { data: 6, compute: 10 }).entries];
    feed(live, before);
    live.apply({ t: 'gpu', at: T0 + 6000, samples: [] });
    const restored = Engine.fromCheckpoint(JSON.parse(JSON.stringify(live.toCheckpoint())));
    const after = [...run('s1', 6_000, 6, { data: 30, compute: 10 }, 601).entries];
    expect(feed(restored, after)).toEqual(feed(live, after));
    expect(restored.snapshot().jobs[0]!.timeline.length).toBeGreaterThan(0);
  });

  it('keeps no more jobs and ranks than its limits, whatever a journal holds', () => {
    const engine = new Engine({ limits: { maxJobs: 2, maxRanksPerJob: 64 } });
    engine.apply(start());
    for (let rank = 0; rank < 16_384; rank++) engine.apply(hello(`r${rank}`, { rank, world_size: 16_384 }));
    engine.apply({ t: 'connect', at: T0, session: 'r0' });
    for (const job of ['b', 'c']) {
      engine.apply(hello(`${job}0`, { job }));
      engine.apply({ t: 'connect', at: T0, session: `${job}0` });
    }
    const snapshot = engine.apply({ t: 'tick', at: T0 + 250 })!;
    expect(snapshot.jobs.map((job) => [job.job, job.ranks.length])).toEqual([
      ['train', 64],
      ['b', 1],
    ]);
    expect(engine.stats.skipped).toEqual({ 'limit-ranks': 16_384 - 64, 'limit-jobs': 1, 'unknown-session': 1 });
  });

  it('lets a new job take the place of one that said hello, sent no step and left', () => {
    const engine = new Engine({ limits: { maxJobs: 1, maxRanksPerJob: 64 } });
    engine.apply(start());
    engine.apply(hello('squatter', { job: 'squat' }));
    engine.apply(hello('real', { job: 'train' }, 10));
    const snapshot = engine.apply({ t: 'tick', at: T0 + 250 })!;
    expect(snapshot.jobs.map((job) => job.job)).toEqual(['train']);
    expect(engine.stats.skipped).toEqual({});
  });

  it('never forgets the session being created when a rank has too many', () => {
    const engine = new Engine();
    engine.apply(start());
    // 20 processes of one rank all still connected (16 sessions are kept per rank), then 20 that come and go.
    for (let i = 0; i < 40; i++) {
      engine.apply(hello(`s${i}`, {}, i * 10));
      engine.apply({ t: 'steps', at: T0 + i * 10 + 5, session: `s${i}`, dropped: 0, rows: rows(1, 1, i * 10, { compute: 1 }) });
      engine.apply({ t: 'connect', at: T0 + i * 10 + 6, session: `s${i}` });
      if (i >= 20) engine.apply({ t: 'disconnect', at: T0 + i * 10 + 7, session: `s${i}` });
    }
    expect(engine.stats.skipped).toEqual({});
    const snapshot = engine.apply({ t: 'tick', at: T0 + 1_000 })!;
    expect(snapshot.jobs[0]!.ranks[0]).toMatchObject({ sessions: 40, steps: 40 });
  });
});
