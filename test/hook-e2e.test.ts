import { describe, expect, it } from 'vitest';
import { readWal } from '../src/journal/wal-read.js';
import { cleanupList } from './support/cleanup-list.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { startSidecar, tempDir, waitFor } from './support/sidecar.js';

/**
 * The real Python hook in real loops. Where the point is the hook (its counts, its timings, its
 * warnings) the sidecar is assembled in this process, on the real clock, listening on a free port;
 * where the point is the sidecar's process (killed with SIGKILL and restarted on its journal) it is
 * the real one.
 */

const plain = findPython();
const torch = findPython(['torch']);
const withTorch = torch.python ? 'real PyTorch' : `real PyTorch (skipped: ${torch.why})`;

const cleanups = cleanupList();

/** The sidecar in this process on the real clock (the hook's rows carry it), listening for the hook. */
async function sidecarInProcess() {
  const side = await inProcess({ now: Date.now });
  cleanups.push(() => side.app.close());
  const { ingestUrl } = await listen(side);
  return { ingestUrl, state: async () => (await side.readState()).json() };
}

/** The steps entries of a journal's segments: how many hold a frame, and the most records one holds as rows. */
async function journaledSteps(dir: string): Promise<{ framed: number; largestRows: number }> {
  const counts = { framed: 0, largestRows: 0 };
  for await (const item of readWal(dir, { onBad: () => undefined })) {
    const entry = item.kind === 'entry' ? (item.value as { t?: string; frame?: string; rows?: unknown[] }) : null;
    if (entry?.t !== 'steps') continue;
    if (entry.frame !== undefined) counts.framed += 1;
    counts.largestRows = Math.max(counts.largestRows, entry.rows?.length ?? 0);
  }
  return counts;
}

const jobEnv = (url: string, job: string) => ({ STEPSCOPE_URL: url, STEPSCOPE_JOB: job, RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' });

describe.skipIf(!torch.python)(`hook in a ${withTorch} training loop`, () => {
  it.each([0, 2])('counts every step exactly and measures the data share (num_workers=%i, 500 steps)', async (workers) => {
    const sidecar = await sidecarInProcess();
    const job = `torch-${workers}`;
    const run = await runPython(torch.python!, fixture('torch_loop.py'), ['--steps', '500', '--workers', String(workers), '--item-ms', '0.6'], jobEnv(sidecar.ingestUrl, job));
    expect(run.code, run.stderr).toBe(0);
    expect(run.result).toMatchObject({ steps: 500, closed: true });
    const state = await waitFor(async () => {
      const s = await sidecar.state();
      return s.jobs[0]?.ranks[0]?.ended ? s : null;
    });
    const [rank] = state.jobs[0].ranks;
    expect(state.jobs[0].job).toBe(job);
    expect(rank.steps).toBe(500);
    expect(rank.duplicates).toBe(0);
    expect(rank.dropped).toBe(0);
    const measured = run.result.data_s / run.result.total_s;
    expect(measured).toBeGreaterThan(0.2);
    expect(Math.abs(rank.breakdown.data - measured)).toBeLessThanOrEqual(0.1 * measured);
    expect(rank.env.loader).toMatchObject({ batch_size: 8, num_workers: workers, pin_memory: false });
    expect(rank.env.torch).toMatch(/^\d+\.\d+/);
  });
});

describe.skipIf(!plain.python)('hook against a sidecar that goes away', () => {
  it('a sidecar killed with SIGKILL and restarted on the same --out ends with the exact step count', async () => {
    const out = tempDir();
    const first = await startSidecar(['--out', out]);
    cleanups.push(() => first.stop('SIGKILL'));
    const steps = 3000;
    const loop = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', String(steps), '--compute-ms', '1'], jobEnv(first.ingestUrl, 'killed'));
    await waitFor(async () => ((await first.state()).jobs[0]?.steps ?? 0) > 500, 30_000);
    first.process.kill('SIGKILL');
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
    // What the restart reads back: the hook's frames as they came, but those too small to be worth it.
    const written = await journaledSteps(out);
    expect(written.framed).toBeGreaterThan(0);
    expect(written.largestRows).toBeLessThan(8);
    // Gone, its sockets with it: the port is free again at once.
    const second = await startSidecar(['--out', out, '--port', String(first.port)]);
    cleanups.push(() => second.stop('SIGKILL'));
    const run = await loop;
    expect(run.code, run.stderr).toBe(0);
    expect(run.result.steps).toBe(steps);
    expect(run.result.closed).toBe(true);
    const state = await waitFor(async () => {
      const s = await second.state();
      return s.jobs[0]?.ranks[0]?.ended ? s : null;
    });
    expect(state.jobs[0].steps).toBe(steps);
    expect(state.jobs[0].ranks[0].steps).toBe(steps);
    expect(state.jobs[0].ranks[0].last_step).toBe(steps - 1);
    expect(state.jobs[0].dropped).toBe(0);
    expect(await second.stop()).toEqual({ code: 0, signal: null });
  });

  it('with no sidecar at all the loop completes, the hook warns once and says at close what was not delivered', async () => {
    const run = await runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '2000', '--close-timeout', '1'], jobEnv('ws://127.0.0.1:9/v1/ingest', 'alone'));
    expect(run.code, run.stderr).toBe(0);
    expect(run.result.steps).toBe(2000);
    expect(run.result.closed).toBe(false);
    const warnings = run.stderr.split('\n').filter((line) => line.includes('stepscope'));
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toMatch(/unreachable/);
    expect(warnings[1]).toMatch(/close: 0 of 2000 step records delivered to the sidecar; 2000 not delivered/);
  });

  it('without scope.step() each next() of the loader ends the previous step', async () => {
    const sidecar = await sidecarInProcess();
    const run = await runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '50', '--no-step', '--data-ms', '2'], jobEnv(sidecar.ingestUrl, 'no-step'));
    expect(run.code, run.stderr).toBe(0);
    const state = await waitFor(async () => {
      const s = await sidecar.state();
      return s.jobs[0]?.ranks[0]?.ended ? s : null;
    });
    expect(state.jobs[0].ranks[0].steps).toBe(50);
    expect(state.jobs[0].ranks[0].breakdown.data).toBeGreaterThan(0.5);
  });
});
