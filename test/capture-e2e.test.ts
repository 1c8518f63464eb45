import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ALL_E2E } from './support/scenarios.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * Deep capture on a verdict, end to end with real torch on the CPU: a real sidecar that asks for a
 * capture once a non-healthy verdict has held 1 s, the real hook in a real PyTorch loop whose
 * DataLoader sleeps for each item (input-bound, held). The job gets exactly one trace — at most one
 * a job each --capture-every — stored under --out, linked from the summary, and it reads as the
 * Chrome trace JSON Perfetto opens. Refusals are checked on the same sidecar. STEPSCOPE_E2E=all (.ci/run).
 */

const torch = findPython(['torch']);
const LOOP = fixture('verdict_loop.py');

describe.skipIf(!ALL_E2E || !torch.python)('deep capture with real torch on the CPU', { timeout: 120_000 }, () => {
  const out = tempDir('stepscope-capture-e2e-');
  const sidecars: RunningSidecar[] = [];
  afterAll(async () => {
    for (const sidecar of sidecars) await sidecar.stop('SIGKILL');
    rmSync(out, { recursive: true, force: true });
  });

  const post = async (sidecar: RunningSidecar, body: unknown) => {
    const response = await fetch(`${sidecar.http}/v1/capture`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as { ok: boolean; reason: string | null } };
  };

  it('stores exactly one trace for a job whose input-bound verdict holds, linked from its summary, as Chrome trace JSON', async () => {
    const sidecar = await startSidecar(['--out', out, '--exit-on-end', '--end-grace', '1', '--hold', '1', '--capture-after', '1', '--capture-steps', '5']);
    sidecars.push(sidecar);
    const env = { STEPSCOPE_URL: sidecar.ingestUrl, STEPSCOPE_JOB: 'slow-data', RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' };
    const run = runPython(torch.python!, LOOP, ['--torch', '--seconds', '12', '--item-sleep-ms', '4', '--batch', '8'], env, 90_000);
    // While it runs: the refusals, each with its reason.
    await waitFor(async () => (await sidecar.state()).jobs.some((j: { job: string }) => j.job === 'slow-data'), 30_000);
    expect(await post(sidecar, { job: 'nope' })).toMatchObject({ status: 404, body: { ok: false, reason: 'no running job named "nope"' } });
    expect((await post(sidecar, { job: 'slow-data', rank: 3 })).status).toBe(404);
    expect((await post(sidecar, { job: 'slow-data', steps: 100_000 })).status).toBe(400);
    expect((await post(sidecar, { job: '../../etc', rank: 0 })).status).toBe(404);
    // The verdict's capture, then a capture on demand within --capture-every: refused.
    await waitFor(async () => (await sidecar.state()).jobs.find((j: { job: string }) => j.job === 'slow-data')?.captures?.length > 0, 60_000);
    const again = await post(sidecar, { job: 'slow-data' });
    expect(again.status).toBe(429);
    expect(again.body.reason).toMatch(/at most one capture every 600 s/);
    const result = await run;
    expect(result.code, result.stderr).toBe(0);
    await sidecar.exited;
    const summary = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
    expect(summary.verdict).toBe('input-bound');
    expect(summary.captures).toHaveLength(1);
    const [capture] = summary.captures;
    expect(capture).toMatchObject({ rank: 0, steps: 5, reason: 'verdict', status: 'stored', error: null });
    expect(capture.verdict).toMatch(/^input-bound/);
    const dir = path.join(out, 'captures', 'slow-data');
    expect(readdirSync(dir)).toEqual([path.basename(capture.file)]);
    const trace = JSON.parse(gunzipSync(readFileSync(path.join(out, capture.file))).toString('utf8'));
    // Perfetto's JSON trace format: traceEvents of complete ("X") events with a name, ts and dur.
    const events = Array.isArray(trace) ? trace : trace.traceEvents;
    expect(Array.isArray(events)).toBe(true);
    const complete = events.filter((e: { ph?: string }) => e.ph === 'X');
    expect(complete.length).toBeGreaterThan(0);
    for (const e of complete.slice(0, 50)) expect(e).toMatchObject({ name: expect.any(String), ts: expect.any(Number), dur: expect.any(Number) });
    expect(complete.some((e: { name: string }) => /addmm|linear/i.test(e.name))).toBe(true);
    expect(readFileSync(path.join(out, 'summary.md'), 'utf8')).toContain(capture.file);
    expect(existsSync(path.join(out, 'report.html')) && readFileSync(path.join(out, 'report.html'), 'utf8').includes('Deep captures')).toBe(true);
  });

  it('--no-capture refuses captures, saying so', async () => {
    const sidecar = await startSidecar(['--no-capture']);
    sidecars.push(sidecar);
    expect(await post(sidecar, { job: 'any' })).toMatchObject({ status: 503, body: { reason: 'deep captures are off (--no-capture)' } });
  });
});
