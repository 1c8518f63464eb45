import { describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { startSidecar, tempDir, waitFor } from './support/sidecar.js';

const plain = findPython();
const torch = findPython(['torch']);
const withTorch = torch.python ? 'real PyTorch' : `real PyTorch (skipped: ${torch.why})`;

const jobEnv = (url: string, job: string) => ({ STEPSCOPE_URL: url, STEPSCOPE_JOB: job, RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' });

describe.skipIf(!torch.python)(`hook in a ${withTorch} training loop`, () => {
  it.each([0, 2])('counts every step exactly and measures the data share (num_workers=%i, 500 steps)', async (workers) => {
    const sidecar = await startSidecar();
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
    await sidecar.stop();
  });
});

describe.skipIf(!plain.python)('hook against a sidecar that goes away', () => {
  it('a sidecar killed with SIGKILL and restarted on the same --out ends with the exact step count', async () => {
    const out = tempDir();
    const first = await startSidecar(['--out', out]);
    const steps = 3000;
    const loop = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', String(steps), '--compute-ms', '1'], jobEnv(first.ingestUrl, 'killed'));
    await waitFor(async () => ((await first.state()).jobs[0]?.steps ?? 0) > 500, 30_000);
    first.process.kill('SIGKILL');
    await first.exited;
    await new Promise((resolve) => setTimeout(resolve, 500));
    const second = await startSidecar(['--out', out, '--port', String(first.port)]);
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
    await second.stop();
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
    const sidecar = await startSidecar();
    const run = await runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '50', '--no-step', '--data-ms', '2'], jobEnv(sidecar.ingestUrl, 'no-step'));
    expect(run.code, run.stderr).toBe(0);
    const state = await waitFor(async () => {
      const s = await sidecar.state();
      return s.jobs[0]?.ranks[0]?.ended ? s : null;
    });
    expect(state.jobs[0].ranks[0].steps).toBe(50);
    expect(state.jobs[0].ranks[0].breakdown.data).toBeGreaterThan(0.5);
    await sidecar.stop();
  });
});
