import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Sources } from '../src/counters/registry.js';
import { hello } from './support/entries.js';
import { inProcess } from './support/in-process.js';
import { capturedLogger } from './support/logger.js';
import { ROOT } from './support/sidecar.js';

// A /proc of its own, read the same each time: what is counted is readings, not figures.
const PROC = path.join(ROOT, 'test/fixtures/proc/rates/t0');

describe("the sources' pace as the sidecar wires them", () => {
  let sources: Sources | null = null;

  afterEach(async () => {
    await sources?.stop();
    sources = null;
    vi.useRealTimers();
  });

  /**
   * Fake time stands still while real I/O runs until `done`: while a job is live the host source also
   * scans the node's processes, asynchronously. Bounded by the real clock (hrtime is not faked).
   */
  async function until(done: () => boolean, what: string): Promise<void> {
    const since = process.hrtime.bigint();
    while (!done()) {
      if (process.hrtime.bigint() - since > 20_000_000_000n) throw new Error(`never came: ${what}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  it('reads the host every 5 s while no job is live, every --host-interval while one is, quickening when told (repace)', async () => {
    let live = false;
    let samples = 0;
    const { log } = capturedLogger();
    sources = new Sources({ gpuSource: 'none', nvidiaSmi: '/nonexistent/nvidia-smi', gpuIntervalMs: 500, dcgm: null, hostIntervalMs: 1_000, procRoot: PROC, jobsLive: () => live, log });
    await sources.inventory;
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance', 'Date'] });
    await sources.start({ gpu: () => undefined, fill: () => undefined, apps: () => undefined, host: () => void samples++ });
    expect(samples, 'the first reading, at start').toBe(1);
    await vi.advanceTimersByTimeAsync(4_500);
    expect(samples).toBe(1);
    await vi.advanceTimersByTimeAsync(500);
    expect(samples, 'idle: one reading each 5 s').toBe(2);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(samples).toBe(2);
    live = true;
    // Not told yet: nothing looks at the pace in between (an idle sidecar wakes for its readings only).
    await vi.advanceTimersByTimeAsync(1_000);
    expect(samples).toBe(2);
    // The sidecar's tick tells the sources when a job went live (Sidecar.tick).
    sources.repace();
    await until(() => samples === 3, 'a job went live 3 s into the idle wait: a reading once told');
    for (let second = 1; second <= 3; second++) {
      await vi.advanceTimersByTimeAsync(1_000);
      await until(() => samples === 3 + second, `live: a reading each second (second ${second})`);
    }
    live = false;
    sources.repace();
    await vi.advanceTimersByTimeAsync(4_000);
    expect(samples, 'the last job ended: the idle pace again').toBe(6);
    await vi.advanceTimersByTimeAsync(1_000);
    await until(() => samples === 7, 'idle: 5 s after the last live reading');
  });

  it('is told by the sidecar when a job goes live and when the last one ends, at the tick that sees it', async () => {
    let told = 0;
    const side = await inProcess({ at: 0, onRepace: () => void told++ });
    const at = side.now();
    await side.record({ t: 'tick', at: at + 250 });
    expect(told, 'no job: nothing changed').toBe(0);
    await side.record({ ...hello('s1', {}, 0), at: at + 300 });
    await side.record({ t: 'tick', at: at + 500 });
    expect(told, 'a job went live').toBe(1);
    await side.record({ t: 'tick', at: at + 750 });
    expect(told, 'still live: not told again').toBe(1);
    await side.record({ t: 'end', at: at + 800, session: 's1', reason: 'close' });
    await side.record({ t: 'tick', at: at + 30_000 });
    expect(told, 'the last job ended').toBe(2);
    await side.app.close();
  });
});
