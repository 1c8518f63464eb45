import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { askCapture } from '../src/viewer/capture-client.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * The sidecar's side of deep capture (src/ingest/profiles.ts) with real websockets: what it asks a
 * hook for, what it stores, and every refusal — bad K, an unknown job or rank, a hook that cannot
 * capture, too soon after the last, chunks out of order, a trace that is not gzipped Chrome JSON,
 * an answer from a rank nothing was asked of, bytes that are not bytes. The trace's name is the
 * sidecar's: a hostile job name stays one file name under captures/.
 */

const temp = useTempDirs('stepscope-profiles-');
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const TRACE = { traceEvents: [{ name: 'aten::addmm', ph: 'X', ts: 1, dur: 5, pid: 1, tid: 1 }] };

async function setup(job: string, options: { profile?: boolean } = {}) {
  const out = temp();
  const side: InProcess = await inProcess({ at: Date.now(), out, capture: { enabled: true, afterMs: 1000, everyMs: 600_000, steps: 20, maxBytes: 1 << 20, chunkBytes: 64 } });
  const { captures } = side;
  const address = await listen(side);
  cleanups.push(() => side.app.close());
  const hook = await TestHook.connect(address.ingestUrl);
  cleanups.push(() => hook.close());
  hook.send(hello({ job, session: `${job.length}-s`, ...(options.profile === false ? {} : { profile: true }) }));
  await hook.next((m) => m.type === 'welcome');
  hook.send(steps(range(1, 5).map((seq) => row({ seq }))));
  await hook.next((m) => m.type === 'ack' && m.ack >= 5);
  return { side, out, captures, hook, address, later: (ms: number) => side.setTime(side.now() + ms) };
}

const chunked = (bytes: Buffer, size: number) => range(0, Math.ceil(bytes.length / size) - 1).map((i) => bytes.subarray(i * size, (i + 1) * size));

describe('deep capture, the sidecar side', () => {
  it('asks the hook for K steps, stores the gzipped trace it sends under captures/<job>/, and then refuses another too soon', async () => {
    const job = '../../etc/passwd';
    const { side, out, captures, hook, later } = await setup(job);
    const snapshot = await side.tick();
    const asked = captures.request(snapshot, job, null, 7, 'demand');
    expect(asked).toMatchObject({ ok: true, capture: { rank: 0, steps: 7, status: 'requested', reason: 'demand' } });
    const request = await hook.next((m) => m.type === 'profile');
    expect(request).toEqual({ v: 1, type: 'profile', id: expect.any(Number), steps: 7, max_bytes: 1 << 20, chunk_bytes: 64 });
    const gz = gzipSync(JSON.stringify(TRACE));
    const parts = chunked(gz, 64);
    parts.forEach((data, seq) => hook.send({ v: 1, type: 'profile', id: request.id, seq, last: seq === parts.length - 1, data }));
    await expect.poll(() => captures.of(job)[0]!.status).toBe('stored');
    const capture = captures.of(job)[0]!;
    expect(capture.file!.startsWith('captures/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/rank0-')).toBe(true);
    expect(readdirSync(path.join(out, 'captures'))).toEqual(['%2E%2E%2F%2E%2E%2Fetc%2Fpasswd']);
    expect(readFileSync(path.join(out, capture.file!))).toEqual(gz);
    // The state lists it.
    expect(captures.decorate((await side.tick()).jobs)[0]!.captures).toEqual([capture]);
    later(60_000);
    expect(captures.request(await side.tick(), job, 0, 7, 'demand')).toMatchObject({ ok: false, status: 429 });
  });

  it('keeps the newest 16 captures of a job, and deletes the trace of each one that leaves the list', async () => {
    const { side, out, captures, hook, later } = await setup('job-k');
    const asked = new Set<number>();
    const gz = gzipSync(JSON.stringify(TRACE));
    for (let n = 1; n <= 17; n++) {
      expect(captures.request(await side.tick(), 'job-k', 0, 3, 'demand')).toMatchObject({ ok: true });
      const request = await hook.next((m) => m.type === 'profile' && !asked.has(m.id));
      asked.add(request.id);
      hook.send({ v: 1, type: 'profile', id: request.id, seq: 0, last: true, data: gz });
      await expect.poll(() => captures.of('job-k').at(-1)!.status).toBe('stored');
      later(600_001);
    }
    const listed = captures.of('job-k').map((c) => path.basename(c.file!));
    expect(listed).toHaveLength(16);
    await expect.poll(() => readdirSync(path.join(out, 'captures', 'job-k')).sort()).toEqual(listed.slice().sort());
  });

  it('is asked for over HTTP (stepscope capture, the viewer key) and answers refusals there with their status', async () => {
    const { side, hook, address, later } = await setup('job-h');
    await side.tick();
    const post = (body: unknown) => side.app.inject({ method: 'POST', url: '/v1/capture', payload: body as object });
    expect((await post({ job: 'job-h', steps: 0 })).statusCode).toBe(400);
    expect((await post({ job: 'job-h', rank: 'zero' })).json()).toMatchObject({ ok: false, reason: 'capture request.rank: must be integer (got "zero")' });
    expect((await post({ job: 'nobody' })).statusCode).toBe(404);
    // The viewer's key, over a real HTTP request to each sidecar it watches.
    expect(await askCapture([address.streamUrl], 'job-h', undefined)).toBe('capture asked of rank 0 (20 steps): its trace will be listed under --out/captures');
    expect(await hook.next((m) => m.type === 'profile')).toMatchObject({ steps: 20 });
    later(1000);
    expect(await askCapture([address.streamUrl], 'job-h', undefined)).toMatch(/^no capture: job job-h was captured 1 s ago: at most one capture every 600 s$/);
    expect(await askCapture([address.streamUrl], 'nobody', undefined)).toBe('no capture: no sidecar runs nobody');
  });

  it('asks by itself when the run falls into a regression, once for it, however long it lasts', async () => {
    const { side, captures, hook, later } = await setup('job-r');
    const snapshot = await side.tick();
    captures.onSnapshot(snapshot);
    expect(captures.of('job-r')).toEqual([]);
    const regressed = { ...snapshot, regressions: [{ job: 'job-r', run: 1, regressed: true, change_pct: 25, began: null }] };
    captures.onSnapshot(regressed);
    expect(captures.of('job-r')).toMatchObject([{ reason: 'regression', rank: 0, steps: 20, status: 'requested' }]);
    expect(await hook.next((m) => m.type === 'profile')).toMatchObject({ steps: 20 });
    later(60_000);
    captures.onSnapshot(regressed);
    expect(captures.of('job-r')).toHaveLength(1);
    // Past --capture-every, the same regression is not captured again: once an episode, not once every 10 min.
    later(600_000);
    captures.onSnapshot(regressed);
    expect(captures.of('job-r')).toHaveLength(1);
    // Cleared, then back: a new episode, captured.
    captures.onSnapshot(snapshot);
    captures.onSnapshot(regressed);
    expect(captures.of('job-r').map((c) => c.reason)).toEqual(['regression', 'regression']);
  });

  it('asks by itself once for each time a non-healthy verdict sets in, however long it holds', async () => {
    const { side, captures, later } = await setup('job-v');
    const snapshot = await side.tick();
    const holding = (since: number) => ({
      ...snapshot,
      jobs: snapshot.jobs.map((job) => ({ ...job, verdict: { ...job.verdict!, verdict: 'input-bound' as const, since } })),
    });
    const setIn = Date.now() - 5_000;
    captures.onSnapshot(holding(setIn));
    expect(captures.of('job-v')).toMatchObject([{ reason: 'verdict', status: 'requested' }]);
    later(7 * 24 * 3600 * 1000);
    captures.onSnapshot(holding(setIn));
    expect(captures.of('job-v')).toHaveLength(1);
    // It set in again (another since): a new episode.
    captures.onSnapshot(holding(setIn + 7 * 24 * 3600 * 1000 - 60_000));
    expect(captures.of('job-v')).toHaveLength(2);
  });

  it('refuses bad K, an unknown job or rank, and a hook that cannot capture, saying why', async () => {
    const { side, captures } = await setup('old', { profile: false });
    const snapshot = await side.tick();
    expect(captures.request(snapshot, 'old', 0, 0, 'demand')).toMatchObject({ ok: false, status: 400, reason: 'steps=0: a window holds 1 to 1000 steps' });
    expect(captures.request(snapshot, 'old', 0, 1_000_000, 'demand')).toMatchObject({ ok: false, status: 400 });
    expect(captures.request(snapshot, 'other', 0, 5, 'demand')).toMatchObject({ ok: false, status: 404, reason: 'no running job named "other"' });
    expect(captures.request(snapshot, 'old', 9, 5, 'demand')).toMatchObject({ ok: false, status: 404, reason: 'job old has no rank 9 reporting to this sidecar (ranks 0)' });
    expect(captures.request(snapshot, 'old', 0, 5, 'demand')).toMatchObject({ ok: false, status: 409, reason: "rank 0's hook cannot take profiler windows (an older hook)" });
  });

  it('refuses a trace whose chunks come out of order, or that is not gzipped Chrome trace JSON, and keeps the hook’s own reason', async () => {
    const { side, captures, hook, later } = await setup('job-b');
    const ask = async () => {
      later(600_000);
      const asked = captures.request(await side.tick(), 'job-b', 0, 5, 'demand');
      expect(asked.ok).toBe(true);
      return asked.ok ? asked.capture.id : -1;
    };
    let id = await ask();
    hook.send({ v: 1, type: 'profile', id, seq: 1, last: true, data: Buffer.from('x') });
    await expect.poll(() => captures.of('job-b').at(-1)!.error).toBe('chunk 1 came where 0 was due');
    id = await ask();
    hook.send({ v: 1, type: 'profile', id, seq: 0, last: true, data: gzipSync('{"not":"a trace"}') });
    await expect.poll(() => captures.of('job-b').at(-1)!.error).toMatch(/does not read as gzipped Chrome trace JSON: no traceEvents/);
    id = await ask();
    hook.send({ v: 1, type: 'profile', id, seq: 0, last: true, error: 'torch is not imported in this process: no torch.profiler' });
    await expect.poll(() => captures.of('job-b').at(-1)).toMatchObject({ status: 'refused', error: 'torch is not imported in this process: no torch.profiler', file: null });
    // An answer to nothing asked is ignored: no file, no capture.
    hook.send({ v: 1, type: 'profile', id: 999, seq: 0, last: true, data: gzipSync(JSON.stringify(TRACE)) });
    expect(captures.of('job-b')).toHaveLength(3);
    // Data that is not bytes, or more than a chunk, closes the connection as any invalid frame does.
    hook.send({ v: 1, type: 'profile', id, seq: 0, last: true, data: 'text' });
    expect(await hook.closed).toMatchObject({ code: 1007, reason: expect.stringMatching(/profile.data: must be bytes/) });
  });
});
