import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { computeAppsSource } from '../src/counters/compute-apps-source.js';
import type { ComputeApp } from '../src/counters/compute-apps.js';
import { Supervised, type Source } from '../src/counters/source.js';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { capturedLogger } from './support/logger.js';
import { ROOT, waitFor } from './support/sidecar.js';

/** The compute-apps source under the one supervisor, against the stand-in nvidia-smi (a real process each read). */

const running: Array<Supervised<unknown>> = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((supervised) => supervised.stop()));
});

function supervise<T>(source: Source<T>, intervalMs = 100) {
  const { log, lines } = capturedLogger();
  const supervised = new Supervised(source, { intervalMs, log, maxBackoffMs: 400 });
  running.push(supervised as Supervised<unknown>);
  const readings: T[] = [];
  void supervised.start((reading) => readings.push(reading));
  return { supervised, readings, lines };
}

describe('the compute-apps source', () => {
  const CAPTURE = path.join(ROOT, 'test/fixtures/nvidia-smi/h100-80gb-hbm3_590.48.01_compute-apps_load.csv');

  it("lists every GPU's compute processes, as the capture has them, one reading an interval", async () => {
    const { env } = fakeNvidiaSmiEnv({ computeApps: CAPTURE });
    const { supervised, readings } = supervise(computeAppsSource({ binary: 'nvidia-smi', env: { ...process.env, ...env } }));
    await waitFor(() => readings.length >= 2);
    expect(readings[0]).toEqual<ComputeApp[]>([
      { gpuUuid: 'GPU-00000000-0000-0000-0000-000000000000', pid: 11327, name: '/root/tools/memhog', usedMiB: 2566 },
      { gpuUuid: 'GPU-00000000-0000-0000-0000-000000000000', pid: 11328, name: '/root/tools/memhog', usedMiB: 1542 },
      { gpuUuid: 'GPU-00000000-0000-0000-0000-000000000000', pid: 11345, name: './gpu_burn', usedMiB: 15690 },
    ]);
    const health = supervised.health();
    expect(health).toMatchObject({ name: 'compute-apps', state: 'ok', lastError: null });
    expect(health.samples).toBeGreaterThanOrEqual(2);
    // Self-timing: every read is counted and timed.
    expect(supervised.timing().reads).toBeGreaterThanOrEqual(2);
    expect(supervised.timing().lastMs).toBeGreaterThan(0);
  });

  it('delivers an empty list for GPUs nobody else uses: measured, none', async () => {
    const { env } = fakeNvidiaSmiEnv({});
    const { readings } = supervise(computeAppsSource({ binary: 'nvidia-smi', env: { ...process.env, ...env } }));
    await waitFor(() => readings.length >= 1);
    expect(readings[0]).toEqual([]);
  });

  it('delivers nothing where nvidia-smi cannot run: failing with why, logged once, never an empty list', async () => {
    const { supervised, readings, lines } = supervise(computeAppsSource({ binary: path.join(ROOT, 'no-such-nvidia-smi') }));
    await waitFor(() => supervised.timing().reads >= 3);
    expect(readings).toEqual([]);
    expect(supervised.health()).toMatchObject({ state: 'failing', lastError: expect.stringContaining('does not list the compute processes') });
    // The rate-limited log: one warning however many reads failed.
    expect(lines.filter((line) => line.level === 40 && line.msg === 'compute-apps: no reading')).toHaveLength(1);
  });
});

describe('Supervised', () => {
  it('counts a read past its watchdog as a failure and reads again once it settles, never two at once', async () => {
    let inFlight = 0;
    let most = 0;
    let calls = 0;
    const slowThenFast: Source<number> = {
      name: 'slow',
      async read() {
        calls += 1;
        inFlight += 1;
        most = Math.max(most, inFlight);
        await new Promise((resolve) => setTimeout(resolve, calls === 1 ? 300 : 1));
        inFlight -= 1;
        return calls;
      },
    };
    const { log } = capturedLogger();
    const supervised = new Supervised(slowThenFast, { intervalMs: 20, log, timeoutMs: 50, maxBackoffMs: 40 });
    running.push(supervised as Supervised<unknown>);
    const readings: number[] = [];
    void supervised.start((n) => readings.push(n));
    await waitFor(() => readings.length >= 2);
    expect(readings[0]).toBe(2); // the first read timed out: not delivered
    expect(most).toBe(1);
    expect(supervised.health().state).toBe('ok');
  });

  it('reads at the pace of the moment: slowly while idle, and at once when told the pace quickened, not at the end of the slow wait', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance', 'Date'] });
    try {
      let live = false;
      let reads = 0;
      const counting: Source<number> = { name: 'paced', read: async () => ++reads };
      const { log } = capturedLogger();
      const supervised = new Supervised(counting, { intervalMs: 5_000, pace: () => (live ? 5_000 : 30_000), log });
      running.push(supervised as Supervised<unknown>);
      await supervised.start(() => undefined);
      expect(reads).toBe(1);
      await vi.advanceTimersByTimeAsync(29_000);
      expect(reads).toBe(1);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(reads, 'idle: one read each 30 s').toBe(2);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(reads).toBe(2);
      live = true;
      await vi.advanceTimersByTimeAsync(1_000);
      expect(reads, 'not told: the wait goes on (no look each second)').toBe(2);
      supervised.repace();
      await vi.advanceTimersByTimeAsync(0);
      expect(reads, 'a job went live 11 s into the idle wait: read when told').toBe(3);
      await vi.advanceTimersByTimeAsync(4_000);
      expect(reads).toBe(3);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(reads, 'live: one read each 5 s').toBe(4);
      // Told again with nothing changed: the wait under way is kept.
      supervised.repace();
      await vi.advanceTimersByTimeAsync(4_000);
      expect(reads).toBe(4);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(reads).toBe(5);
    } finally {
      vi.useRealTimers();
    }
  });
});
