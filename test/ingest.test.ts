import { encode } from '../src/protocol/codec.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { capturedLogger } from './support/logger.js';
import { startSidecar, tempDir, waitFor, type LogLine } from './support/sidecar.js';

/** The ingest over a real websocket to the sidecar assembled in this process, on the real clock (the hook's rows carry it). */
describe('ingest over a real websocket', () => {
  let side: InProcess;
  let logs: LogLine[];
  const sidecar = {
    ingestUrl: '',
    state: async () => (await side.readState()).json(),
    waitForLog: (predicate: (line: LogLine) => boolean) => waitFor(() => logs.find(predicate)),
  };
  beforeEach(async () => {
    const captured = capturedLogger();
    logs = captured.lines;
    side = await inProcess({ now: Date.now, log: captured.log });
    await side.app.listen({ host: '127.0.0.1', port: 0 });
    const address = side.app.server.address();
    sidecar.ingestUrl = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`;
  });
  afterEach(async () => {
    await side.app.close();
  });

  it('acknowledges step records and shows them per rank in /v1/state', async () => {
    const hook = await TestHook.connect(sidecar.ingestUrl);
    hook.send(hello());
    expect(await hook.next((m) => m.type === 'welcome')).toEqual({
      v: 1,
      type: 'welcome',
      session: 'sess-0',
      resume: expect.stringMatching(/^[0-9a-f]{32}$/),
      ack: 0,
      counters: { nvml: false, interval_ms: 500, process: true, memory: true },
      watched: false,
    });
    hook.send(steps(range(1, 10).map((seq) => row({ seq, durMs: 10, dataMs: 4, h2dMs: 1, computeMs: 3 }))));
    expect(await hook.next((m) => m.type === 'ack')).toEqual({ v: 1, type: 'ack', ack: 10 });

    const state = await sidecar.state();
    const [job] = state.jobs;
    expect(job.job).toBe('job-a');
    expect(job.steps).toBe(10);
    const [rank] = job.ranks;
    expect(rank.steps).toBe(10);
    expect(rank.breakdown.data).toBeCloseTo(0.4, 6);
    expect(rank.breakdown.h2d).toBeCloseTo(0.1, 6);
    expect(rank.breakdown.compute).toBeCloseTo(0.3, 6);
    expect(rank.breakdown.other).toBeCloseTo(0.2, 6);
    expect(rank.step_ms.p50).toBe(10);
    expect(rank.samples).toBe(320);
    expect(rank.env.python).toBe('3.11.7');
    hook.close();
  });

  it('drops records resent after a reconnect and counts them as duplicates', async () => {
    const first = await TestHook.connect(sidecar.ingestUrl);
    first.send(hello());
    first.send(steps(range(1, 5).map((seq) => row({ seq }))));
    await first.next((m) => m.type === 'ack' && m.ack === 5);
    first.close();

    const second = await TestHook.connect(sidecar.ingestUrl);
    second.send(hello());
    expect((await second.next((m) => m.type === 'welcome')).ack).toBe(5);
    second.send(steps(range(3, 8).map((seq) => row({ seq }))));
    await second.next((m) => m.type === 'ack' && m.ack === 8);
    const state = await sidecar.state();
    expect(state.jobs[0].steps).toBe(8);
    expect(state.jobs[0].duplicates).toBe(3);
    expect(state.ingest.duplicates).toBe(3);
    second.close();
  });

  const withoutKey = (value: Record<string, unknown>, key: string) => Object.fromEntries(Object.entries(value).filter(([k]) => k !== key));
  const badFrames: Array<[string, (hook: TestHook) => void, number, RegExp]> = [
    ['a text frame', (h) => h.sendRaw('{"type":"hello"}', false), 1003, /text frames/],
    ['bytes that are not msgpack', (h) => h.sendRaw(Buffer.from([0xc1, 0xc1, 0xc1])), 1007, /not valid msgpack/],
    ['a msgpack value that is not a map', (h) => h.sendRaw(encode([1, 2, 3])), 1007, /must be a msgpack map/],
    ['a frame nested 3,000 deep (decoded, its depth would be up to the stack)', (h) => h.sendRaw(Buffer.concat([Buffer.alloc(3_000, 0x91), Buffer.from([0xc0])])), 1007, /frame: nested deeper than 64 levels/],
    ['another protocol version', (h) => h.send(hello({ v: 2 })), 1008, /unsupported protocol version 2/],
    ['an unknown message type', (h) => h.send({ v: 1, type: 'launch' }), 1008, /unknown message type launch/],
    ['steps before hello', (h) => h.send(steps([row({ seq: 1 })])), 1008, /before hello/],
    ['a hello without its job', (h) => h.send(withoutKey(hello(), 'job')), 1007, /hello.job: missing/],
    ['a hello whose job is nil', (h) => h.send(hello({ job: null })), 1007, /hello.job: must be string/],
    ['a rank beyond the world size', (h) => h.send(hello({ rank: 4, world_size: 4 })), 1007, /hello.rank: 4 is not below world_size 4/],
  ];
  const badSteps: Array<[string, (number | null)[] | (number | null)[][], RegExp]> = [
    ['a NaN duration', [1, 0, 100, Number.NaN, 0, 0, 0, null, null, null, null], /dur_ns: must be a non-negative integer, got NaN/],
    ['a negative duration', [1, 0, 100, -5, 0, 0, 0, null, null, null, null], /dur_ns: must be a non-negative integer, got -5/],
    ['a zero duration', [1, 0, 100, 0, 0, 0, 0, null, null, null, null], /dur_ns: must be > 0/],
    ['a duration longer than a day', [1, 0, 100, 90_000e9, 0, 0, 0, null, null, null, null], /longer than a day/],
    ['phases longer than the step', [1, 0, 100, 10e6, 8e6, 1e6, 5e6, null, null, null, null], /exceed dur_ns/],
    ['a fractional count', [1, 0, 100, 10e6, 0, 0, 0, 2.5, null, null, null], /samples: must be a non-negative integer, got 2.5/],
    ['a string where a number goes', [1, 0, 100, '10' as unknown as number, 0, 0, 0, null, null, null, null], /dur_ns: must be a non-negative integer, got string/],
    ['a row of the wrong length', [1, 0, 100], /has 3 values for 11 fields/],
    ['seq going backwards', [row({ seq: 5 }), row({ seq: 4 })], /seq: 4 does not follow 5/],
  ];

  it.each(badFrames)('closes a connection that sends %s, leaving the others working', async (_name, sendBad, code, reason) => {
    const healthy = await TestHook.connect(sidecar.ingestUrl);
    healthy.send(hello({ session: 'healthy', rank: 1, world_size: 2 }));
    await healthy.next((m) => m.type === 'welcome');

    const bad = await TestHook.connect(sidecar.ingestUrl);
    sendBad(bad);
    const closed = await bad.closed;
    expect(closed.code).toBe(code);
    expect(closed.reason).toMatch(reason);

    healthy.send(steps([row({ seq: 1 })]));
    expect((await healthy.next((m) => m.type === 'ack')).ack).toBe(1);
    const logged = await sidecar.waitForLog((line) => line.msg === 'ingest frame refused; closing connection');
    expect(logged.code).toBe(code);
    healthy.close();
  });

  it.each(badSteps)('closes a connection whose steps hold %s, and stores none of that frame', async (_name, rows, reason) => {
    const bad = await TestHook.connect(sidecar.ingestUrl);
    bad.send(hello());
    await bad.next((m) => m.type === 'welcome');
    const frameRows = Array.isArray(rows[0]) ? (rows as (number | null)[][]) : [row({ seq: 1 }), ...[rows as (number | null)[]].map((r) => [2, ...r.slice(1)])];
    bad.sendRaw(encode(steps(frameRows)));
    const closed = await bad.closed;
    expect(closed.code).toBe(1007);
    expect(closed.reason).toMatch(reason);
    const state = await sidecar.state();
    expect(state.jobs[0].steps).toBe(0);
    expect(state.ingest.rejected['1007']).toBe(1);
  });

  it('refuses an integer beyond 2^53', async () => {
    const bad = await TestHook.connect(sidecar.ingestUrl);
    bad.send(hello());
    await bad.next((m) => m.type === 'welcome');
    bad.send(steps([[1, 0, 100, 2n ** 62n, 0, 0, 0, null, null, null, null] as unknown as number[]]));
    const closed = await bad.closed;
    expect(closed.code).toBe(1007);
    expect(closed.reason).toMatch(/integer beyond 2\^53/);
  });

  it('closes a connection that sends an oversized frame with 1009', async () => {
    const bad = await TestHook.connect(sidecar.ingestUrl);
    bad.send(hello());
    await bad.next((m) => m.type === 'welcome');
    bad.sendRaw(Buffer.alloc(2 * 1024 * 1024));
    expect((await bad.closed).code).toBe(1009);
    expect((await sidecar.state()).ingest.rejected['1009']).toBe(1);
  });

});

describe('journal (--out)', () => {
  it('resumes after SIGKILL with every acknowledged record and tells the hook where to resume', async () => {
    const out = tempDir();
    const first = await startSidecar(['--out', out]);
    const hook = await TestHook.connect(first.ingestUrl);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
    for (let batch = 0; batch < 10; batch++) {
      hook.send(steps(range(batch * 100 + 1, batch * 100 + 100).map((seq) => row({ seq }))));
    }
    await hook.next((m) => m.type === 'ack' && m.ack === 1000);
    first.process.kill('SIGKILL');
    await first.exited;

    const second = await startSidecar(['--out', out]);
    const resumed = await TestHook.connect(second.ingestUrl);
    resumed.send(hello());
    expect((await resumed.next((m) => m.type === 'welcome')).ack).toBe(1000);
    resumed.send(steps(range(990, 1010).map((seq) => row({ seq }))));
    await resumed.next((m) => m.type === 'ack' && m.ack === 1010);
    const state = await second.state();
    expect(state.jobs[0].steps).toBe(1010);
    expect(state.jobs[0].ranks[0].steps).toBe(1010);
    expect(state.jobs[0].duplicates).toBe(11);
    await second.stop();
  });
});

describe('end of job', () => {
  it('--exit-on-end exits 0 once every rank has said end', async () => {
    const sidecar = await startSidecar(['--exit-on-end']);
    const hooks = await Promise.all([0, 1].map(() => TestHook.connect(sidecar.ingestUrl)));
    for (const [rank, hook] of hooks.entries()) {
      hook.send(hello({ session: `s${rank}`, rank, world_size: 2 }));
      hook.send(steps([row({ seq: 1 }), row({ seq: 2 })]));
      hook.send({ v: 1, type: 'end', reason: 'close' });
      expect(await hook.next((m) => m.type === 'ack' && m.end === true)).toEqual({ v: 1, type: 'ack', ack: 2, end: true });
    }
    const { code } = await sidecar.exited;
    expect(code).toBe(0);
    const ended = sidecar.logs.find((line) => line.msg === 'job ended')!;
    expect(ended).toMatchObject({ job: 'job-a', reason: 'all-ranks-ended', steps: 4 });
  });

  it('--exit-on-end exits after the grace period when the hooks vanish without end', async () => {
    const sidecar = await startSidecar(['--exit-on-end', '--end-grace', '0.5']);
    const hook = await TestHook.connect(sidecar.ingestUrl);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
    hook.socket.terminate();
    const { code } = await sidecar.exited;
    expect(code).toBe(0);
    expect(sidecar.logs.find((line) => line.msg === 'job ended')).toMatchObject({ reason: 'disconnected' });
  });

  it('a job still running keeps the sidecar up', async () => {
    const sidecar = await startSidecar(['--exit-on-end', '--end-grace', '0.2']);
    const hook = await TestHook.connect(sidecar.ingestUrl);
    hook.send(hello({ world_size: 2 }));
    hook.send({ v: 1, type: 'end', reason: 'close' });
    await hook.next((m) => m.type === 'ack' && m.end);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(sidecar.process.exitCode).toBeNull();
    const state = await waitFor(() => sidecar.state());
    expect(state.jobs[0].ended).toBe(false);
    hook.close();
    await sidecar.exited;
  });

  it('stops cleanly on SIGTERM', async () => {
    const sidecar = await startSidecar();
    const { code } = await sidecar.stop('SIGTERM');
    expect(code).toBe(0);
  });
});
