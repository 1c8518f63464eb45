import { describe, expect, it } from 'vitest';
import type { JournalEntry } from '../src/engine/entries.js';
import { JournalRefused } from '../src/journal/recorder.js';
import { replayJournal } from '../src/journal/replay.js';
import { Wal } from '../src/journal/wal.js';
import { hello, rows, T0 } from './support/entries.js';
import { FullDisk } from './support/full-disk.js';
import { inProcess } from './support/in-process.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { waitFor } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Decide → log → apply → acknowledge, through the real write-ahead log on a disk that fills up:
 * nothing is applied (so nothing acknowledged) that is not durably written, the live state goes on,
 * /readyz and /metrics say so, and once the disk has room again ingest resumes.
 */

const tempDir = useTempDirs('stepscope-journal-');

async function sidecarOnDisk() {
  const dir = tempDir();
  const disk = new FullDisk();
  let now = T0;
  const wal = await Wal.open({ dir, maxBytes: 64 * 1024 * 1024, fs: disk, retryMs: 1000, now: () => now });
  const s = await inProcess({ at: T0, wal });
  const setTime = (at: number) => {
    now = at;
    s.setTime(at);
  };
  return { ...s, dir, disk, wal, setTime };
}

const steps = (first: number, n: number, at: number): JournalEntry => ({ t: 'steps', at: T0 + at, session: 's1', dropped: 0, rows: rows(first, n, at - n * 10, { compute: 10 }) });

describe('the journal on a full disk', () => {
  it('acknowledges nothing it could not write, keeps the live state going, says why, and resumes when space returns', async () => {
    const s = await sidecarOnDisk();
    await s.record(hello('s1'));
    await s.record({ t: 'connect', at: T0, session: 's1' });
    await s.record(steps(1, 100, 1000));
    expect(s.engine.world.jobs.ack('s1')).toBe(100);

    s.disk.mode = 'enospc';
    s.setTime(T0 + 1500);
    await expect(s.record(steps(101, 50, 1500))).rejects.toBeInstanceOf(JournalRefused);
    expect(s.engine.world.jobs.ack('s1'), 'nothing of the refused frame is held').toBe(100);
    // Ticks, connections and samples are applied all the same: the live view does not freeze.
    const snapshot = await s.tick();
    expect(snapshot.at).toBe(T0 + 1500);
    const ready = await s.app.inject({ url: '/readyz' });
    expect(ready.json()).toMatchObject({ status: 'not ready', reason: expect.stringContaining('ENOSPC') });
    const metrics = (await s.app.inject({ url: '/metrics' })).body;
    expect(metrics).toMatch(/^stepscope_journal_ok 0$/m);
    expect(metrics).toMatch(/^stepscope_journal_write_errors_total [1-9]/m);
    const state = (await s.readState()).json();
    expect(state.journal).toMatchObject({ ok: false, reason: expect.stringContaining('ENOSPC') });

    // Space comes back; after the retry delay the hook's resend is written and acknowledged.
    s.disk.mode = 'ok';
    s.setTime(T0 + 3000);
    await s.record(steps(101, 50, 3000));
    expect(s.engine.world.jobs.ack('s1')).toBe(150);
    expect(s.recorder.health()).toMatchObject({ ok: true });

    // A restart finds exactly what was acknowledged.
    const { engine } = await replayJournal(s.dir);
    expect(engine.world.jobs.ack('s1')).toBe(150);
    expect(engine.snapshot().jobs[0]!.steps).toBe(150);
  });

  it('a short write is a failed write: nothing of it is acknowledged or read back', async () => {
    const s = await sidecarOnDisk();
    await s.record(hello('s1'));
    await s.record(steps(1, 10, 100));
    s.disk.mode = 'short';
    await expect(s.record(steps(11, 10, 200))).rejects.toBeInstanceOf(JournalRefused);
    s.disk.mode = 'ok';
    s.setTime(T0 + 5000);
    await s.record(steps(11, 5, 5000));
    const { engine, report } = await replayJournal(s.dir);
    expect(engine.world.jobs.ack('s1')).toBe(15);
    expect(engine.snapshot().jobs[0]!.steps).toBe(15);
    expect(report.problems).toBe(0);
  });

  it('checkpoints while entries are in flight without losing any of them', async () => {
    const s = await sidecarOnDisk();
    await s.record(hello('s1'));
    const pending: Array<Promise<unknown>> = [];
    for (let i = 0; i < 50; i++) {
      pending.push(s.record(steps(1 + i * 10, 10, 100 + i * 100)));
      if (i === 25) pending.push(s.recorder.checkpoint());
    }
    await Promise.all(pending);
    expect(s.wal.health().checkpoints).toBe(1);
    const { engine, report } = await replayJournal(s.dir);
    expect(report.checkpoint).not.toBeNull();
    expect(engine.world.jobs.ack('s1')).toBe(500);
    expect(engine.snapshot().jobs[0]!.steps).toBe(500);
  });
});

describe('the real hook against a sidecar whose disk fills up mid-job', () => {
  const plain = findPython();
  it.skipIf(!plain.python)('loses nothing: what was refused is resent and counted once when space returns', async () => {
    const dir = tempDir();
    const disk = new FullDisk();
    const wal = await Wal.open({ dir, maxBytes: 64 * 1024 * 1024, fs: disk, retryMs: 200 });
    // Real time here: the hook runs on its own clock, and the sidecar's ticks are not needed.
    const s = await inProcess({ at: Date.now(), wal, now: Date.now });
    await s.app.listen({ host: '127.0.0.1', port: 0 });
    const address = s.app.server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    try {
      const env = { STEPSCOPE_URL: `ws://127.0.0.1:${port}/v1/ingest`, STEPSCOPE_JOB: 'full-disk', RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' };
      const running = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '1500', '--compute-ms', '2', '--close-timeout', '30'], env, 60_000);
      // Let some steps in, then fill the disk until a write was refused, then free it.
      const session = () => s.engine.world.jobs.dump()[0]?.ranks[0]?.latest ?? '';
      await waitFor(() => s.engine.world.jobs.ack(session()) > 100, 20_000);
      disk.mode = 'enospc';
      await waitFor(() => s.recorder.health()!.writeErrors > 0);
      const refusedWhileFull = s.recorder.health()!.writeErrors;
      disk.mode = 'ok';
      const run = await running;
      expect(run.code, run.stderr).toBe(0);
      expect(refusedWhileFull).toBeGreaterThan(0);
      expect(run.result).toMatchObject({ steps: 1500, closed: true, stats: { acked: 1500, dropped: 0 } });
      expect(s.engine.world.jobs.ack(session())).toBe(1500);
      const { engine } = await replayJournal(dir);
      expect(engine.snapshot().jobs[0]).toMatchObject({ job: 'full-disk', steps: 1500, dropped: 0 });
    } finally {
      await s.app.close();
    }
  });
});
