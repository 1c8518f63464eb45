import WebSocket from 'ws';
import { describe, expect, it } from 'vitest';
import type { JournalEntry } from '../src/engine/entries.js';
import { emptyHostSample } from './support/counters.js';
import { hello, rows, T0 } from './support/entries.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { listen } from './support/listening.js';

/** The sidecar's own ticks (its schedule, on the test's clock) have published their snapshots. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** A rank's frame of steps arriving `at` ms after T0, its rows ending up to then. */
async function send(side: InProcess, session: string, at: number, first: number): Promise<void> {
  side.advance(T0 + at - side.now());
  const entry: JournalEntry = { t: 'steps', at: T0 + at, session, dropped: 0, rows: rows(first, 4, at - 80, { compute: 20 }) };
  await side.record(entry);
}

describe('the tick schedule as the sidecar wires it, while a viewer watches', () => {
  it("ticks a hook's steps as they come, waiting for the other rank's frame of the same send at most 20 ms", async () => {
    const side = await inProcess({ at: T0 });
    const viewer = new WebSocket((await listen(side)).streamUrl);
    await new Promise((resolve, reject) => viewer.once('open', resolve).once('error', reject));
    try {
      await side.record(hello('r0', { world_size: 2 }));
      await side.record(hello('r1', { rank: 1, local_rank: 1, world_size: 2 }));
      const shown = async (ms = 0) => (side.advance(ms), await settle(), side.engine.snapshot().at - T0);

      // The first frame of steps: no other rank sent before, so it is ticked as it comes.
      await send(side, 'r0', 1000, 1);
      expect(await shown()).toBe(1000);
      await send(side, 'r1', 1002, 1);
      expect(await shown(100)).toBe(1050);
      // Both ranks send on the next beat: the first frame waits for the second, one tick at 1203.
      await send(side, 'r0', 1200, 5);
      expect(await shown(2)).toBe(1050);
      await send(side, 'r1', 1203, 5);
      expect(await shown()).toBe(1203);
      // Rank 1's frame of the next beat never comes: the tick is 20 ms after rank 0's.
      await send(side, 'r0', 1300, 9);
      expect(await shown(19)).toBe(1203);
      expect(await shown(1)).toBe(1320);
      // A host reading is not a reason to tick: it waits for the next tick due (250 ms after the last).
      side.advance(30);
      await side.record({ t: 'host', at: side.now(), sample: { ...emptyHostSample(side.now()), cpuPct: 10 } });
      expect(await shown(100)).toBe(1320);
      expect(await shown(120)).toBe(1570);
    } finally {
      viewer.terminate();
      await side.app.close();
    }
  });

  it('keeps its ticks as far apart as the stream frames at a lower --stream-rate, so no tick goes unsent', async () => {
    const side = await inProcess({ at: T0, stream: { rateHz: 5 } });
    const viewer = new WebSocket((await listen(side)).streamUrl);
    await new Promise((resolve, reject) => viewer.once('open', resolve).once('error', reject));
    try {
      await side.record(hello('r0'));
      const shown = async (ms = 0) => (side.advance(ms), await settle(), side.engine.snapshot().at - T0);
      // The last tick was the regular one at 950: at 5 frames a second, the steps of 1000 wait for 200 ms after it, not 50.
      await send(side, 'r0', 1000, 1);
      expect(await shown()).toBe(950);
      expect(await shown(149)).toBe(950);
      expect(await shown(1)).toBe(1150);
      await send(side, 'r0', 1230, 5);
      expect(await shown(100)).toBe(1150);
      expect(await shown(20)).toBe(1350);
    } finally {
      viewer.terminate();
      await side.app.close();
    }
  });
});
