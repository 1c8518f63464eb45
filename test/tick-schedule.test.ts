import { describe, expect, it } from 'vitest';
import { TickSchedule } from '../src/engine/tick-schedule.js';
import { manualScheduler } from './support/manual-scheduler.js';

function schedule(quiet = () => false) {
  const timers = manualScheduler();
  const advance = (ms: number) => timers.advance(ms);
  const ticks: number[] = [];
  let changed = false;
  const ticking = new TickSchedule(() => (ticks.push(timers.now()), (changed = false)), () => changed, { idleMs: 250, watchedMs: 50 }, timers, quiet);
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
