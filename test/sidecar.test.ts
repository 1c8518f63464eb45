import { describe, expect, it } from 'vitest';
import { UNWATCHED_TICK_MS } from '../src/engine/tick-schedule.js';
import { TICK_MS } from '../src/journal/replay.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, rows, T0 } from './support/entries.js';
import { inProcess } from './support/in-process.js';

/**
 * The Sidecar class on a scheduler the test moves: its tick schedule is the only periodic thing it
 * owns, and it runs on that scheduler, so what a tick does and when is the test's to say, whatever
 * load the machine is under.
 */

const cleanups = cleanupList();

async function liveJob() {
  const side = await inProcess({ at: T0 });
  cleanups.push(() => side.sidecar.stop('test'));
  await side.record(hello('s1'));
  await side.record({ t: 'connect', at: T0, session: 's1' });
  await side.record({ t: 'steps', at: T0 + 100, session: 's1', dropped: 0, rows: rows(1, 10, 0, { compute: 10 }) });
  return side;
}

/** Whether `promise` has settled once everything ready to run has. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.finally(() => (done = true)).catch(() => undefined);
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('the Sidecar on an injected scheduler', () => {
  it('ticks when its scheduler reaches the tick, at the scheduler\'s time, and not before', async () => {
    const side = await liveJob();
    const before = side.engine.snapshot().at;
    // No viewer: the ticks come at the hooks' unwatched sends.
    side.advance(UNWATCHED_TICK_MS - 1);
    expect(side.engine.snapshot().at).toBe(before);
    side.advance(1);
    await expect.poll(() => side.engine.snapshot().at).toBe(T0 + UNWATCHED_TICK_MS);
    expect(side.engine.snapshot().jobs[0]).toMatchObject({ job: 'train', steps: 10 });
    // A live job: every tick on, time alone moving its verdicts.
    side.advance(UNWATCHED_TICK_MS);
    await expect.poll(() => side.engine.snapshot().at).toBe(T0 + 2 * UNWATCHED_TICK_MS);
  });

  it('answers a state read at the tick TICK_MS after the last, not before, unwatched as it is', async () => {
    const side = await liveJob();
    const reading = side.app.inject({ url: '/v1/state' });
    expect(await settled(reading)).toBe(false);
    side.advance(TICK_MS);
    const state = (await reading).json();
    expect(state.jobs).toMatchObject([{ job: 'train', steps: 10 }]);
    expect(side.engine.snapshot().at).toBe(T0 + TICK_MS);
  });

  it('leaves no timer behind once stopped, and journals the stop at its clock', async () => {
    const side = await liveJob();
    expect(side.scheduler.pending).toBe(1);
    side.setTime(T0 + 5_000);
    expect(await side.sidecar.stop('test')).toBe(0);
    expect(side.scheduler.pending).toBe(0);
    expect(await side.sidecar.stopped).toBe(0);
    expect(side.engine.snapshot().at).toBe(T0 + 5_000);
  });
});
