import { describe, expect, it } from 'vitest';
import { TickSchedule } from '../src/engine/tick-schedule.js';
import { manualScheduler } from './support/manual-scheduler.js';

function schedule(quiet = () => false, quietMs?: number) {
  const timers = manualScheduler();
  const advance = (ms: number) => timers.advance(ms);
  const ticks: number[] = [];
  let changed = false;
  const ticking = new TickSchedule(() => (ticks.push(timers.now()), (changed = false)), () => changed, { idleMs: 250, watchedMs: 50, quietMs }, timers, quiet);
  return { ticking, ticks, advance, arrive: () => (changed = true) };
}

describe('the engine tick schedule', () => {
  it('ticks every 250 ms with no viewer, whatever comes in', () => {
    const { ticks, advance, arrive } = schedule();
    arrive();
    advance(1000);
    expect(ticks).toEqual([250, 500, 750, 1000]);
  });

  it('ticks 50 ms after the last tick while watched and steps come in', () => {
    const { ticking, ticks, advance, arrive } = schedule();
    advance(250);
    ticking.watched(true);
    arrive();
    advance(50);
    arrive();
    advance(100);
    expect(ticks).toEqual([250, 300, 350]);
  });

  it('a viewer of an idle sidecar leaves the ticks at every 250 ms', () => {
    const { ticking, ticks, advance } = schedule();
    ticking.watched(true);
    advance(1000);
    expect(ticks).toEqual([250, 500, 750, 1000]);
  });

  it('while no job is live, ticks only at the first look after something came in', () => {
    let live = false;
    const { ticking, ticks, advance, arrive } = schedule(() => !live);
    advance(1000);
    expect(ticks).toEqual([]);
    arrive();
    advance(300);
    expect(ticks).toEqual([1250]);
    ticking.watched(true);
    advance(100);
    arrive();
    advance(100);
    expect(ticks).toEqual([1250, 1450]);
    // A live job: every tick again, since time alone moves its verdicts.
    live = true;
    advance(500);
    expect(ticks).toEqual([1250, 1450, 1700, 1950]);
  });

  it('while no job is live, lets what comes in wait for one tick quietMs after the last, unless watched or asked', () => {
    let live = false;
    const { ticking, ticks, advance, arrive } = schedule(() => !live, 5_000);
    // The host's reading at 1 s and the GPUs' at 3.4 s: one tick for both, 5 s after the last (at 0).
    advance(1_000);
    arrive();
    advance(2_400);
    arrive();
    advance(2_000);
    expect(ticks).toEqual([5_000]);
    // Nothing new: no tick, however long.
    advance(10_000);
    expect(ticks).toEqual([5_000]);
    // A reader asks (GET /v1/state): the next look (every 250 ms since the last tick) ticks.
    arrive();
    ticking.soon();
    advance(100);
    expect(ticks).toEqual([5_000, 15_500]);
    // Watched: the next short look ticks, as before.
    ticking.watched(true);
    arrive();
    advance(50);
    expect(ticks).toEqual([5_000, 15_500, 15_550]);
    ticking.watched(false);
    // A live job: every tick again.
    live = true;
    advance(500);
    expect(ticks).toEqual([5_000, 15_500, 15_550, 15_800, 16_050]);
  });

  it('goes back to 250 ms once the last viewer leaves, and stops for good', () => {
    const { ticking, ticks, advance, arrive } = schedule();
    ticking.watched(true);
    arrive();
    advance(50);
    ticking.watched(false);
    arrive();
    advance(250);
    expect(ticks).toEqual([50, 300]);
    ticking.stop();
    arrive();
    advance(1000);
    expect(ticks).toEqual([50, 300]);
  });
});
