import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import { emptyGpuSample } from '../src/model/gpu.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, row, steps, TestHook } from './support/hook-client.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { waitFor } from './support/sidecar.js';
import WebSocket from 'ws';

/**
 * The sparkline history is what only viewers read: the sidecar leaves it out of its snapshots while
 * none is connected (issue 24, target 8), and a viewer that connects gets all of it in its first frame.
 */

const cleanups = cleanupList();
const T0 = 1_760_000_000_000;

/** Two GPUs read every 500 ms and a tick after each reading, for `seconds`. */
function gpuEntries(seconds: number): JournalEntry[] {
  const entries: JournalEntry[] = [];
  for (let ms = 0; ms < seconds * 1000; ms += 500) {
    const at = T0 + ms;
    const samples = [0, 1].map((index) => ({ ...emptyGpuSample(at, index), uuid: `GPU-${index}`, utilGpu: (ms / 500 + index * 7) % 100, smClockMHz: 1500, smClockMaxMHz: 1980 }));
    entries.push({ t: 'gpu', at, samples }, { t: 'tick', at: at + 1 });
  }
  return entries;
}

describe('the sparkline history in the snapshots', () => {
  it('is left out while not shown, and is at once what it would have been when shown again', () => {
    const shown = new Engine();
    const hidden = new Engine();
    hidden.showHistory(false);
    for (const entry of gpuEntries(30)) {
      shown.apply(entry);
      hidden.apply(entry);
    }
    expect(shown.snapshot().history.gpus.map((gpu) => gpu.uuid)).toEqual(['GPU-0', 'GPU-1']);
    expect(shown.snapshot().history.gpus[0]!.util.filter((value) => value !== null).length).toBe(30);
    const left = hidden.snapshot().history;
    expect(left).toEqual({ from: shown.snapshot().history.from, sliceMs: 1000, ranks: [], gpus: [] });
    // Everything else in the snapshot is the same either way.
    expect({ ...hidden.snapshot(), history: null }).toEqual({ ...shown.snapshot(), history: null });

    hidden.showHistory(true);
    expect(hidden.snapshot().history).toEqual(shown.snapshot().history);
    expect(Object.isFrozen(hidden.snapshot().history.gpus[0]!.util)).toBe(true);
  });

  it('is not in the sidecar snapshots until a viewer connects, whose first frame carries all of it', async () => {
    const side = await inProcess({ at: Date.now() });
    const start = side.now();
    cleanups.push(() => side.app.close());
    const { ingestUrl, streamUrl } = await listen(side);
    const hook = await TestHook.connect(ingestUrl);
    cleanups.push(() => hook.close());
    hook.send(hello({ job: 'spark', session: 'spark' }));
    let sent = 0;
    for (let s = 1; s <= 5; s++) {
      side.setTime(start + s * 1000);
      hook.send(steps(Array.from({ length: 4 }, () => row({ seq: ++sent }))));
      await hook.next((m) => m.type === 'ack' && m.ack === sent);
      await side.tick();
    }
    expect(side.engine.snapshot().history.ranks).toEqual([]);

    const viewer = new WebSocket(streamUrl);
    cleanups.push(() => viewer.terminate());
    const first = await new Promise<{ type: string; history: { ranks: Array<{ job: string; step_ms: Array<number | null> }> } }>((resolve, reject) => {
      viewer.once('message', (data: Buffer) => resolve(JSON.parse(data.toString()))).once('error', reject);
    });
    expect(first.type).toBe('snapshot');
    expect(first.history.ranks.map((r) => r.job)).toEqual(['spark']);
    expect(first.history.ranks[0]!.step_ms.filter((value) => value !== null).length).toBeGreaterThan(0);
    expect(side.engine.snapshot().history.ranks).toHaveLength(1);

    // The last viewer gone, the next tick leaves it out again.
    viewer.close();
    await new Promise((resolve) => viewer.once('close', resolve));
    side.setTime(start + 6_000);
    await waitFor(async () => (await side.tick()).history.ranks.length === 0);

    // A viewer that comes later gets the state as it is then, history included, not as the last viewer saw it.
    side.setTime(start + 9_000);
    hook.send(steps(Array.from({ length: 4 }, () => row({ seq: ++sent }))));
    await hook.next((m) => m.type === 'ack' && m.ack === sent);
    const latest = await side.tick();
    const again = new WebSocket(streamUrl);
    cleanups.push(() => again.terminate());
    const second = await new Promise<{ at: string; state: { jobs: Array<{ steps: number }> }; history: { ranks: unknown[] } }>((resolve, reject) => {
      again.once('message', (data: Buffer) => resolve(JSON.parse(data.toString()))).once('error', reject);
    });
    expect(Date.parse(second.at)).toBe(latest.at);
    expect(second.state.jobs[0]!.steps).toBe(sent);
    expect(second.history.ranks).toHaveLength(1);
  });
});
