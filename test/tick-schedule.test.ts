import { describe, expect, it } from 'vitest';
import { TickSchedule } from '../src/engine/tick-schedule.js';
import { manualScheduler } from './support/manual-scheduler.js';

function schedule(quiet = () => false, quietMs?: number, awaited = () => false, unwatchedMs?: number) {
  const timers = manualScheduler();
  const advance = (ms: number) => timers.advance(ms);
  const ticks: number[] = [];
  let changed = false;
  const ticking = new TickSchedule(() => (ticks.push(timers.now()), (changed = false)), () => changed, { idleMs: 250, watchedMs: 50, quietMs, unwatchedMs }, timers, quiet, awaited);
  // As the engine does: each entry applied tells the schedule (Engine.onChange).
  return {
    ticking,
    ticks,
    advance,
    timers,
    arrive: () => ((changed = true), ticking.entered()),
    /** A reading (the host's, a hook's counters): nothing a person sees change at once. */
    reading: () => ((changed = true), ticking.entered(false)),
  };
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

  it("while watched, ticks a rank's steps as they come, 50 ms after the last tick at least", () => {
    const { ticking, ticks, advance, arrive, timers } = schedule();
    ticking.watched(true);
    advance(250);
    expect(ticks).toEqual([250]);
    // A hook's send at 370: ticked then, not at a beat of the sidecar's own.
    advance(120);
    arrive();
    advance(0);
    expect(ticks).toEqual([250, 370]);
    // A frame 10 ms after that tick waits for 50 ms after it.
    advance(10);
    arrive();
    advance(60);
    expect(ticks).toEqual([250, 370, 420]);
    // Nothing new: no look before the next tick due (one timer armed, at 420 + 250).
    expect(timers.pending).toBe(1);
    advance(250);
    expect(ticks).toEqual([250, 370, 420, 670]);
  });

  it("while watched, waits for the other ranks' frames of the same send, 20 ms after the first at most", () => {
    let waiting = false;
    const { ticking, ticks, advance, arrive } = schedule(undefined, undefined, () => waiting);
    ticking.watched(true);
    advance(250);
    // Two ranks send on the same beat: the first at 370 waits for the second, in at 374: one tick.
    advance(120);
    waiting = true;
    arrive();
    advance(4);
    expect(ticks).toEqual([250]);
    waiting = false;
    arrive();
    advance(0);
    expect(ticks).toEqual([250, 374]);
    // The next beat's second frame never comes: the tick 20 ms after the first.
    advance(76);
    waiting = true;
    arrive();
    advance(30);
    expect(ticks).toEqual([250, 374, 470]);
  });

  it('while watched, lets a reading wait for the next tick, so it does not hold the steps behind it back', () => {
    const { ticking, ticks, advance, arrive, reading } = schedule();
    ticking.watched(true);
    advance(250);
    // The host's reading at 300, then a hook's steps at 320: ticked at 320, not 50 ms after a tick for the reading.
    advance(50);
    reading();
    advance(20);
    arrive();
    advance(0);
    expect(ticks).toEqual([250, 320]);
    // A reading alone: at the next tick due ...
    advance(100);
    reading();
    advance(200);
    expect(ticks).toEqual([250, 320, 570]);
    // ... unless a state read asks for it.
    advance(30);
    reading();
    ticking.soon();
    advance(0);
    expect(ticks).toEqual([250, 320, 570, 650]);
  });

  it('shows what came in before the first viewer as soon as one connects', () => {
    const { ticking, ticks, advance, arrive } = schedule();
    advance(260);
    arrive();
    ticking.watched(true);
    // 50 ms after the last tick, not at the next one due (500).
    advance(40);
    expect(ticks).toEqual([250, 300]);
  });

  it('a viewer of an idle sidecar leaves the ticks at every 250 ms', () => {
    const { ticking, ticks, advance } = schedule();
    ticking.watched(true);
    advance(1000);
    expect(ticks).toEqual([250, 500, 750, 1000]);
  });

  it('while no job is live, looks at nothing until something comes in, then ticks at once', () => {
    let live = false;
    const { ticking, ticks, advance, arrive, timers } = schedule(() => !live);
    advance(1000);
    expect(ticks).toEqual([]);
    // Asleep: no timer armed at all, so an idle sidecar wakes only for its readings.
    expect(timers.pending).toBe(0);
    arrive();
    advance(0);
    expect(ticks).toEqual([1000]);
    advance(1000);
    expect(timers.pending).toBe(0);
    // Watched and still idle: asleep too; what comes in is ticked at once.
    ticking.watched(true);
    advance(100);
    expect(timers.pending).toBe(0);
    arrive();
    advance(0);
    expect(ticks).toEqual([1000, 2100]);
    ticking.watched(false);
    // A job becomes live (its hello is an entry): every tick again, since time alone moves its verdicts.
    advance(100);
    live = true;
    arrive();
    advance(500);
    // Its first tick when the schedule next looks (250 ms after the last tick: it was not asleep).
    expect(ticks).toEqual([1000, 2100, 2350, 2600]);
  });

  it('while no job is live, lets what comes in wait for one tick quietMs after the last, unless watched or asked', () => {
    let live = false;
    const { ticking, ticks, advance, arrive, timers } = schedule(() => !live, 5_000);
    // The host's reading at 1 s and the GPUs' at 3.4 s: one tick for both, 5 s after the last (at 0),
    // with no look in between.
    advance(1_000);
    arrive();
    advance(2_400);
    arrive();
    advance(2_000);
    expect(ticks).toEqual([5_000]);
    // Nothing new: no tick, and no look, however long.
    advance(10_000);
    expect(ticks).toEqual([5_000]);
    expect(timers.pending).toBe(0);
    // A reader asks (GET /v1/state) after something came in: a tick at once.
    arrive();
    ticking.soon();
    advance(0);
    expect(ticks).toEqual([5_000, 15_400]);
    // ... and with nothing new, a look that finds nothing and sleeps again.
    ticking.soon();
    advance(100);
    expect(ticks).toEqual([5_000, 15_400]);
    expect(timers.pending).toBe(0);
    // Watched: what comes in is ticked at once.
    ticking.watched(true);
    arrive();
    advance(0);
    expect(ticks).toEqual([5_000, 15_400, 15_500]);
    ticking.watched(false);
    // A live job: every tick again.
    live = true;
    arrive();
    advance(500);
    expect(ticks).toEqual([5_000, 15_400, 15_500, 15_750, 16_000]);
  });

  it('ticks a job that goes live while a quiet reading waits for its tick at once, not when the wait ends', () => {
    let live = false;
    const { ticking, ticks, advance, arrive } = schedule(() => !live, 5_000);
    // The host's reading at 1 s waits for the tick 5 s after the last (at 0) ...
    advance(1_000);
    arrive();
    advance(1_000);
    expect(ticks).toEqual([]);
    // ... and a job's hello at 2 s makes a job live: ticked at once, then every 250 ms.
    live = true;
    arrive();
    advance(500);
    expect(ticks).toEqual([2_000, 2_250, 2_500]);
    // The job ends; a reading at 3.5 s waits for its tick (5 s after the last), until a state read asks at 4 s.
    live = false;
    advance(1_000);
    arrive();
    advance(500);
    expect(ticks).toEqual([2_000, 2_250, 2_500]);
    ticking.soon();
    advance(0);
    expect(ticks).toEqual([2_000, 2_250, 2_500, 4_000]);
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

  describe('with unwatchedMs (the sidecar gives 500 ms)', () => {
    const unwatched = () => schedule(() => false, undefined, () => false, 500);

    it('ticks a live job every 500 ms while no viewer watches, whatever comes in', () => {
      const { ticks, advance, arrive } = unwatched();
      arrive();
      advance(250);
      arrive();
      advance(1750);
      expect(ticks).toEqual([500, 1000, 1500, 2000]);
    });

    it('answers a reader 250 ms after the last tick at most, and only when something came in', () => {
      const { ticking, ticks, advance, arrive } = unwatched();
      advance(500);
      // Nothing new: a read does not bring a tick.
      advance(100);
      ticking.soon();
      advance(399);
      expect(ticks).toEqual([500]);
      advance(1);
      expect(ticks).toEqual([500, 1000]);
      // Something new at 1,100, read at 1,120: ticked at 1,250, not at 1,500.
      advance(100);
      arrive();
      advance(20);
      ticking.soon();
      advance(130);
      expect(ticks).toEqual([500, 1000, 1250]);
      // Asked just after a tick: 250 ms after it.
      arrive();
      ticking.soon();
      advance(250);
      expect(ticks).toEqual([500, 1000, 1250, 1500]);
      // Then every 500 ms again.
      advance(500);
      expect(ticks).toEqual([500, 1000, 1250, 1500, 2000]);
    });

    it('keeps a waiting reader\'s tick 250 ms after the last when the last viewer leaves', () => {
      const { ticking, ticks, advance, arrive } = unwatched();
      advance(500);
      ticking.watched(true);
      // Steps at 510 and a read waiting for them; the viewer leaves at 520, before their tick (550).
      advance(10);
      arrive();
      ticking.soon();
      advance(10);
      ticking.watched(false);
      advance(229);
      expect(ticks).toEqual([500]);
      // 250 ms after the last tick, not 500.
      advance(1);
      expect(ticks).toEqual([500, 750]);
    });

    it('ticks every 250 ms and on what comes in while watched, and every 500 ms again once the viewer leaves', () => {
      const { ticking, ticks, advance, arrive } = unwatched();
      advance(500);
      ticking.watched(true);
      advance(250);
      expect(ticks).toEqual([500, 750]);
      arrive();
      advance(50);
      expect(ticks).toEqual([500, 750, 800]);
      ticking.watched(false);
      advance(500);
      expect(ticks).toEqual([500, 750, 800, 1300]);
    });
  });
});
