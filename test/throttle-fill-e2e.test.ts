import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ROOT, startSidecar, waitFor } from './support/sidecar.js';

/**
 * Throttling seen under a DCGM exporter whose counters have no clock-event reasons, maximum clock or
 * power limit (its default counters): the sidecar's own nvidia-smi fills them by GPU UUID. Real
 * sidecar, real hook, a stand-in exporter serving the fixtures and the stand-in nvidia-smi.
 */

const plain = findPython();

/** Serves a dcgm-exporter fixture as /metrics, with the SM clock of the moment the test scripts (a GPU held down). */
async function standInExporter(file: string, smClockMHz: number): Promise<{ url: string; close(): Promise<void> }> {
  const text = readFileSync(path.join(ROOT, 'test/fixtures/dcgm', file), 'utf8').replace(/^(DCGM_FI_DEV_SM_CLOCK\{[^}]*\}) \d+$/gm, `$1 ${smClockMHz}`);
  const server = http.createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(text));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`,
    close: () => new Promise((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
  };
}

/** The two runs are independent (own exporter, nvidia-smi and sidecar), so they run at once: each closes its own parts. */
async function throttledRun(context: TestContext, options: { file: string; uuid: string; maxMHz: number; heldMHz: number; reasons: number; dcgmArgs: string[]; job: string }) {
  const closers: Array<() => Promise<unknown>> = [];
  context.onTestFinished(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });
  const exporter = await standInExporter(options.file, options.heldMHz);
  closers.push(exporter.close);
  // nvidia-smi beside the exporter sees the same physical GPU (same UUID) with its reasons, maximum clock and power limit.
  const { env } = fakeNvidiaSmiEnv({
    gpus: [{ uuid: options.uuid, 'clocks.sm': options.heldMHz, 'clocks.max.sm': options.maxMHz, 'clocks_event_reasons.active': options.reasons }],
  });
  const sidecar = await startSidecar(['--gpu-source', 'dcgm', '--dcgm-url', exporter.url, ...options.dcgmArgs, '--gpu-interval', '250', '--window', '2', '--hold', '1'], env);
  closers.push(() => sidecar.stop());
  const loop = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '600', '--data-ms', '1', '--compute-ms', '9'], {
    STEPSCOPE_URL: sidecar.ingestUrl,
    STEPSCOPE_JOB: options.job,
    RANK: '0',
    LOCAL_RANK: '0',
    WORLD_SIZE: '1',
  });
  const state = await waitFor(async () => {
    const s = await sidecar.state();
    return s.jobs[0]?.ranks[0]?.verdict?.verdict === 'throttled' ? s : null;
  }, 20_000);
  const run = await loop;
  expect(run.code, run.stderr).toBe(0);
  return state;
}

describe.skipIf(!plain.python).concurrent('throttling under the default DCGM counters, filled from nvidia-smi', () => {
  it('calls a power-capped T4 throttled, and says where the reasons came from', async (context) => {
    const state = await throttledRun(context, { file: '3.x-default-counters.txt', uuid: 'GPU-0f6d2e91-b4a8-37c5-d019-6a2e8b4c7f13', maxMHz: 1590, heldMHz: 1100, reasons: 0x4, dcgmArgs: [], job: 'dcgm-power' });
    expect(state.counters.gpu_source).toBe('dcgm');
    const rank = state.jobs[0].ranks[0];
    expect(rank.verdict).toMatchObject({ verdict: 'throttled', cause: 'power' });
    expect(rank.window.gpu).toMatchObject({
      throttle_unchecked: null,
      throttle_share: { SwPowerCap: 1 },
      throttle_filled: "the clock-event (throttle) reasons, the maximum SM clock and the power limit from the sidecar's nvidia-smi",
    });
  });

  it("calls a rank on a thermally held MIG instance (DCGM names it by its A30's UUID) throttled, from the physical GPU's reasons", async (context) => {
    const state = await throttledRun(context, {
      file: '2.x-mig-a30.txt',
      uuid: 'GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38',
      maxMHz: 1440,
      heldMHz: 900,
      reasons: 0x40,
      dcgmArgs: ['--dcgm-pod', 'bert-ft-6b9f7-2xv8c', '--dcgm-namespace', 'nlp'],
      job: 'dcgm-mig-thermal',
    });
    const rank = state.jobs[0].ranks[0];
    expect(rank.verdict).toMatchObject({ verdict: 'throttled', cause: 'thermal' });
    expect(rank.window.gpu).toMatchObject({ throttle_share: { HwThermalSlowdown: 1 }, throttle_filled: expect.stringContaining("from the sidecar's nvidia-smi") });
    // Only the pod's instance is this job's GPU; the state tells the instances apart by parent and instance id.
    expect(state.counters.gpus).toEqual([expect.objectContaining({ parent_uuid: 'GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38', gpu_instance_id: 1, mig_profile: '2g.12gb' })]);
  });
});
