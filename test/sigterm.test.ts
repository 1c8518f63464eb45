import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupList } from './support/cleanup-list.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { hello, STEP_FIELDS, TestHook } from './support/hook-client.js';
import { startSidecar, tempDir, waitFor } from './support/sidecar.js';

/**
 * Kubernetes stops a native sidecar with SIGTERM once the training container is done, or the whole
 * pod at once, and kills it terminationGracePeriodSeconds later. The end-of-job summary must be on
 * the shared volume well before that.
 */

const plain = findPython();

const cleanups = cleanupList();

function killByPidFile(pidFile: string) {
  if (!existsSync(pidFile)) return;
  try {
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // already gone
  }
}

/** The summary once it is there: the sidecar renames it into place whole. */
function summaryIn(out: string) {
  const file = path.join(out, 'summary.json');
  return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : null;
}

describe.skipIf(!plain.python)(`SIGTERM to a sidecar in the middle of a job${plain.python ? '' : ` (skipped: ${plain.why})`}`, () => {
  it('leaves a complete summary.json in --out, logs it, and exits 0', async () => {
    const out = tempDir();
    const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const pidFile = path.join(tempDir(), 'loop.pid');
    const job = 'stopped-mid-job';
    const loop = runPython(plain.python!, fixture('verdict_loop.py'), ['--seconds', '60', '--data-ms', '1', '--compute-ms', '4', '--pid-file', pidFile], {
      STEPSCOPE_URL: sidecar.ingestUrl,
      STEPSCOPE_JOB: job,
      RANK: '0',
      WORLD_SIZE: '1',
      LOCAL_RANK: '0',
    });
    cleanups.push(async () => {
      killByPidFile(pidFile);
      await loop;
    });

    await waitFor(async () => ((await sidecar.state()).jobs[0]?.steps ?? 0) >= 100, 30_000);
    const held = (await sidecar.state()).jobs[0].steps;
    expect(summaryIn(out), 'no summary while the job runs').toBeNull();

    sidecar.process.kill('SIGTERM');
    // report.html is the last file written: summary.md, beside summary.json, is there by then.
    // How soon is the grace period's business, and load's: this asserts what is written, not when.
    const summary = await waitFor(() => existsSync(path.join(out, 'report.html')) && summaryIn(out), undefined, 20);
    expect(summary).toMatchObject({ schema: 'stepscope.summary/v1', job, end_reason: 'shutdown', world_size: 1 });
    expect(summary.steps).toBeGreaterThanOrEqual(held);
    expect(summary.ranks).toMatchObject([{ rank: 0 }]);
    expect(summary.breakdown.compute).toBeGreaterThan(0.5);
    expect(existsSync(path.join(out, `summary-${job}.json`))).toBe(true);
    expect(existsSync(path.join(out, 'summary.md'))).toBe(true);

    expect(await sidecar.exited).toEqual({ code: 0, signal: null });
    // The summary is in the log too, for `kubectl logs` once the pod's volumes are gone.
    const logged = sidecar.logs.find((line) => Array.isArray(line.files) && line.files.includes(path.join(out, 'summary.json')));
    expect(logged).toMatchObject({ job, verdict: summary.verdict, steps: summary.steps });
    expect(logged!.msg).toContain(summary.headline);
  });

  // A hook still sending when SIGTERM comes: whatever the sidecar acknowledged is in the summary it
  // writes (no step may be acknowledged once the summary is being made).
  it('acknowledges no step that its summary leaves out', async () => {
    const out = tempDir();
    const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const hook = await TestHook.connect(sidecar.ingestUrl);
    cleanups.push(() => hook.close());
    const started = performance.now();
    hook.send(hello({ job: 'acked-then-stopped', clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: 1_000_000 } }));
    await hook.next((m) => m.type === 'welcome');
    // One step every 5 ms, each ending now by the hook's clock, until the sidecar goes.
    let seq = 0;
    const sending = setInterval(() => {
      if (hook.socket.readyState !== hook.socket.OPEN) return;
      seq += 1;
      const end = 1_000_000 + Math.round((performance.now() - started) * 1e6);
      hook.send({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows: [[seq, seq - 1, end, 5e6, 4e6, 0, 1e6, 8, null, null, null]], dropped: 0 });
    }, 5);
    cleanups.push(() => clearInterval(sending));
    const acked = () => Math.max(0, ...hook.received.filter((m) => m.type === 'ack').map((m) => Number(m.ack)));
    await waitFor(async () => acked() >= 50, 30_000);
    sidecar.process.kill('SIGTERM');
    expect(await sidecar.exited).toEqual({ code: 0, signal: null });
    clearInterval(sending);
    const summary = summaryIn(out);
    expect(summary.steps, `${acked()} acknowledged, ${seq} sent`).toBeGreaterThanOrEqual(acked());
  });
});

