import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * The host's wall clock stepping under a running sidecar (an NTP step, a date set by hand, a VM
 * restored), made real with libfaketime (Debian's libfaketime, which .ci/run installs): the sidecar
 * runs under it, its wall clock offset by what a file says, read again each second; its monotonic
 * clock left alone, as a step leaves it. The hook, a real Python process, runs on the real clock.
 */
const LIBFAKETIME = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1'].find((file) => existsSync(file));
const plain = findPython();

/** The sidecar process's wall clock, ms: the time pino gives the log line of a frame it refuses, on a connection of its own. */
async function wallClockOf(sidecar: RunningSidecar): Promise<number> {
  const from = sidecar.logs.length;
  const socket = new WebSocket(sidecar.ingestUrl);
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  try {
    socket.send('not a frame');
    const line = await sidecar.waitForLog((l) => l.msg === 'ingest frame refused; closing connection' && sidecar.logs.indexOf(l) >= from);
    return line.time as number;
  } finally {
    socket.terminate();
  }
}

/** Once the sidecar's wall clock reads `offsetMs` from the real one (libfaketime reads its file again each second). */
const steppedBy = (sidecar: RunningSidecar, offsetMs: number) => waitFor(async () => Math.abs((await wallClockOf(sidecar)) - Date.now() - offsetMs) < 60_000, 60_000, 200);

/** The step the sidecar reports on /metrics, s. */
async function reportedStep(sidecar: RunningSidecar): Promise<number> {
  const text = await (await fetch(`${sidecar.http}/metrics`)).text();
  return Number(/^stepscope_host_clock_step_seconds (\S+)$/m.exec(text)?.[1]);
}

describe.skipIf(!plain.python || !LIBFAKETIME)("the sidecar when the host's wall clock steps", () => {
  it('keeps ticking, keeps every step and keeps its connection through a step back of an hour and one forward of two', async () => {
    const dir = tempDir();
    const offset = path.join(dir, 'offset');
    const stop = path.join(dir, 'stop');
    writeFileSync(offset, '+0');
    const sidecar = await startSidecar(['--gpu-source', 'none'], {
      LD_PRELOAD: LIBFAKETIME,
      FAKETIME_TIMESTAMP_FILE: offset,
      FAKETIME_CACHE_DURATION: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    });
    const job = runPython(plain.python!, fixture('plain_loop.py'), ['--until', stop, '--data-ms', '5', '--compute-ms', '1'], {
      STEPSCOPE_URL: sidecar.ingestUrl,
      STEPSCOPE_JOB: 'stepped',
      RANK: '0',
      WORLD_SIZE: '1',
      LOCAL_RANK: '0',
    });
    try {
      const rank = async () => (await sidecar.state()).jobs[0]?.ranks[0];
      // Steps keep reaching the state: the ticks go on, and the rank's steps are not left out as lying ahead of the sidecar.
      const stepsPast = (least: number) => waitFor(async () => ((await rank())?.steps >= least ? rank() : null), 60_000);
      await stepsPast(20);

      writeFileSync(offset, '-3600');
      await steppedBy(sidecar, -3_600_000);
      await stepsPast((await rank()).steps + 100);
      // Its times stay on its own clock, and it says by how much the host's has stepped.
      expect(Math.abs((await reportedStep(sidecar)) + 3600)).toBeLessThan(60);
      writeFileSync(offset, '+3600');
      await steppedBy(sidecar, 3_600_000);
      const forward = await stepsPast((await rank()).steps + 100);
      expect(Math.abs((await reportedStep(sidecar)) - 3600)).toBeLessThan(60);
      expect(forward.sessions).toBe(1);

      writeFileSync(stop, '');
      const run = await job;
      const state = await sidecar.state();
      expect(state.ingest.implausible).toEqual({});
      // Nothing the hook sent was lost or sent again on a new connection: one connection throughout.
      expect(run.result.closed).toBe(true);
      expect(run.result.stats).toMatchObject({ connects: 1, reconnects: 0, dropped: 0, acked: run.result.steps });
      expect((await rank()).steps).toBe(run.result.steps);
    } finally {
      writeFileSync(stop, '');
      await sidecar.stop();
    }
  }, 120_000);
});
