import { describe, expect, it } from 'vitest';
import { WARMUP, warmupState } from '../src/analysis/warmup.js';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import { hello, run, T0, type Phases } from './support/entries.js';

/**
 * Warm-up ends after WARMUP.steps steps or a few seconds of steady steps, whichever comes first
 * (issue 26: with 1 s steps, 20 steps kept a one-minute job warming up for a third of its life).
 * The engine runs on a simulated clock: no sleeps, and the times asserted are the job's own.
 */

const config = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 };

/** When (ms after the job's first entry) the job first shows a verdict other than warming-up; null if never. */
function firstVerdictAt(entries: JournalEntry[]): { at: number | null; verdict: string | null } {
  const engine = new Engine();
  engine.apply({ t: 'start', at: T0, config });
  engine.apply(hello('s1'));
  engine.apply({ t: 'connect', at: T0, session: 's1' });
  for (const entry of entries) {
    const snapshot = engine.apply(entry);
    const verdict = snapshot?.jobs[0]?.verdict?.verdict ?? null;
    if (snapshot && verdict !== null && verdict !== 'warming-up') return { at: snapshot.at - T0, verdict };
  }
  return { at: null, verdict: null };
}

const steps = (phases: Phases, seconds: number, from = 0, firstSeq = 1) => run('s1', from, seconds, phases, firstSeq);

describe('warm-up by steps and by time', () => {
  it.each([
    ['1 ms steps: 20 steps end it', 19, [1, 1, 1], false],
    ['20 steps whatever they vary', 20, [5, 900, 20], true],
    ['1 s steps: three steady ones (3 s) end it', 3, [1000, 1000, 1000], true],
    ['two steady seconds are not enough', 2, [1000, 1000], false],
    ['a slow first step (compiling) is not steady with the rest', 4, [3000, 1000, 1000], false],
    ['after it, three steady steps are', 5, [3000, 1000, 1100, 950, 1000], true],
    ['steps that vary twofold are not steady', 8, [500, 1000, 500, 1000, 500, 1000, 500, 1000], false],
    ['within the ratio they are', 4, [900, 1200, 1000, 1300], true],
  ])('%s', (_title, total, recent, done) => {
    expect(warmupState(total, recent).done).toBe(done);
  });

  it('says why in the rule: steps seen and steady seconds', () => {
    expect(warmupState(2, [1000, 1000]).why).toBe('2 of 20 steps seen, 2.0 of 3 s of steady steps');
    expect(warmupState(3, [1000, 1000, 1000]).why).toBe('3 steady steps over 3.0 s');
    expect(warmupState(WARMUP.steps, []).why).toBe('20 steps seen');
  });

  it('a job of 1 s steps has its verdict within about 10 s (simulated clock)', () => {
    const { at, verdict } = firstVerdictAt(steps({ compute: 800, other: 200 }, 30).entries);
    expect(verdict).toBe('compute-bound');
    expect(at).not.toBeNull();
    expect(at!).toBeLessThanOrEqual(10_000);
    // Not before three steady steps (3 s) have ended.
    expect(at!).toBeGreaterThanOrEqual(3_000);
  });

  it('a job of 1 s steps whose first step took 5 s (compiling) waits for steady steps after it', () => {
    const first = steps({ compute: 5_000 }, 5);
    const rest = steps({ compute: 1_000 }, 30, 5_000, first.nextSeq);
    const { at, verdict } = firstVerdictAt([...first.entries, ...rest.entries]);
    expect(verdict).toBe('compute-bound');
    expect(at!).toBeGreaterThanOrEqual(8_000); // 5 s, then three steady 1 s steps
    expect(at!).toBeLessThanOrEqual(15_000);
  });

  it('a job of 1 ms steps has its verdict from its 20th step, as before', () => {
    const { at, verdict } = firstVerdictAt(steps({ compute: 1 }, 5).entries);
    expect(verdict).toBe('compute-bound');
    expect(at!).toBeLessThanOrEqual(500); // the first ticks: 20 steps take 20 ms
  });

  it('a job whose steps keep varying waits for its 20 steps', () => {
    const entries: JournalEntry[] = [];
    let seq = 1;
    let from = 0;
    for (let i = 0; i < 12; i++) {
      // 600 ms and 1500 ms steps in turn: never steady; 20 steps take about 21 s.
      const chunk = steps({ compute: i % 2 ? 1_500 : 600 }, i % 2 ? 1.5 : 0.6, from, seq);
      entries.push(...chunk.entries);
      seq = chunk.nextSeq;
      from += i % 2 ? 1_500 : 600;
    }
    const more = steps({ compute: 600 }, 20, from, seq);
    const { at } = firstVerdictAt([...entries, ...more.entries]);
    expect(at!).toBeGreaterThanOrEqual(12_600);
  });
});
