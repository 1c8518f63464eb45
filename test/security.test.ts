import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { IngestLimits } from '../src/ingest/limits.js';
import { fileSafeName } from '../src/model/names.js';
import { summaryBase } from '../src/outputs/summary-files.js';
import { serve } from '../src/serve-command.js';
import { withoutQuery } from '../src/http-server.js';
import { replayJournal } from '../src/journal/replay.js';
import { runReplay } from '../src/replay-command.js';
import { encode } from '../src/protocol/codec.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Issue 11's broken cases, each as a regression test: what a client sends cannot crash, blind,
 * bloat or take over the sidecar. docs/security.md lists these beside the cases that already held.
 */

const cleanups = cleanupList();

async function sidecar(limits: Partial<IngestLimits> = {}): Promise<InProcess & { url: string }> {
  const side = await inProcess({ limits });
  await side.app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(() => side.app.close());
  const address = side.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { ...side, url: `ws://127.0.0.1:${port}/v1/ingest` };
}

async function connect(url: string): Promise<TestHook> {
  const hook = await TestHook.connect(url);
  cleanups.push(async () => hook.close());
  return hook;
}

const state = async (side: InProcess) => {
  const reply = await side.readState();
  expect(reply.statusCode).toBe(200);
  return { body: reply.json(), bytes: reply.body.length };
};

describe('values a client sends stay bounded and representable', () => {
  it('keeps an integer beyond 2^53 in env as its decimal text: state, metrics and the summary still serialise', async () => {
    const side = await sidecar();
    const hook = await connect(side.url);
    hook.send(hello({ env: { seed: 2n ** 63n - 1n, loader: { big: 2n ** 60n } } }));
    await hook.next((m) => m.type === 'welcome');
    hook.send(steps(range(1, 5).map((seq) => row({ seq }))));
    await hook.next((m) => m.type === 'ack' && m.ack === 5);
    const { body } = await state(side);
    expect(body.jobs[0].ranks[0].env).toMatchObject({ seed: '9223372036854775807', loader: { big: '1152921504606846976' } });
    expect((await side.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(200);
    const summary = side.engine.runSummary('job-a', side.now());
    expect(() => JSON.stringify(summary)).not.toThrow();
  });

  it('refuses env values JSON cannot carry or a terminal would obey, naming where', async () => {
    const side = await sidecar();
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ bad: Number.NaN }, /hello\.env/],
      [{ bad: new Uint8Array([1, 2]) }, /hello\.env/],
      [{ bad: '\u001b]0;owned\u0007' }, /hello\.env/],
      [{ deep: { a: { b: { c: 1 } } } }, /hello\.env/],
      [{ big: 'x'.repeat(1024 * 20) }, /hello\.env/],
    ];
    for (const [env, reason] of cases) {
      const hook = await connect(side.url);
      hook.send(hello({ env }));
      const closed = await hook.closed;
      expect(closed.code).toBe(1007);
      expect(closed.reason).toMatch(reason);
    }
    const terminal = await connect(side.url);
    terminal.send(hello({ job: 'job\u001b[2J' }));
    expect((await terminal.closed).reason).toMatch(/hello\.job/);
  });

  it('does not let repeated hellos or env updates grow a rank past its bound (16 KiB)', async () => {
    const side = await sidecar();
    const wide = (round: number) => Object.fromEntries(range(1, 60).map((i) => [`k${round}-${i}`, 'v'.repeat(200)]));
    for (let round = 0; round < 40; round++) {
      const hook = await connect(side.url);
      hook.send(hello({ env: wide(round) }));
      await hook.next((m) => m.type === 'welcome');
      hook.close();
      await hook.closed;
    }
    const afterHellos = await state(side);
    expect(Object.keys(afterHellos.body.jobs[0].ranks[0].env)).toHaveLength(60);
    const hook = await connect(side.url);
    hook.send(hello({ env: {} }));
    await hook.next((m) => m.type === 'welcome');
    for (let round = 0; round < 200; round++) hook.send({ v: 1, type: 'env', env: { [`u${round}`]: 'v'.repeat(1000) } });
    const closed = await hook.closed;
    expect(closed.code).toBe(1007);
    expect(closed.reason).toMatch(/env: the rank's env would pass/);
    const after = await state(side);
    expect(JSON.stringify(after.body.jobs[0].ranks[0].env).length).toBeLessThanOrEqual(16 * 1024);
    expect(after.bytes).toBeLessThan(64 * 1024);
  });
});

describe('connection hygiene', () => {
  it('closes a socket that does not say hello in time', async () => {
    const side = await sidecar({ helloTimeoutMs: 200 });
    const hook = await connect(side.url);
    const closed = await hook.closed;
    expect(closed).toEqual({ code: 1008, reason: 'no hello within 200 ms' });
    expect(side.ingest.stats.limited['hello-timeout']).toBe(1);
  });

  it('never lets sockets that stay silent keep a real rank out', async () => {
    const side = await sidecar({ maxPending: 4, helloTimeoutMs: 60_000 });
    const silent = await Promise.all(range(1, 40).map(() => connect(side.url)));
    const rank = await connect(side.url);
    rank.send(hello());
    expect((await rank.next((m) => m.type === 'welcome')).ack).toBe(0);
    const reasons = await Promise.all(silent.slice(0, 36).map(async (hook) => (await hook.closed).reason));
    expect(new Set(reasons)).toEqual(new Set(['no hello yet, and newer connections are waiting: send hello first']));
    expect(side.ingest.stats.connections).toBeLessThanOrEqual(5);
  });

  it('closes a session from which nothing is heard, and keeps one that answers pings', async () => {
    const side = await sidecar({ idleTimeoutMs: 300 });
    const mute = new WebSocket(side.url, { autoPong: false });
    cleanups.push(async () => mute.terminate());
    await new Promise((resolve) => mute.once('open', resolve));
    const muteClosed = new Promise<{ code: number; reason: string }>((resolve) => mute.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    mute.send(encode({ ...hello({ session: 'mute' }) }));
    const alive = await connect(side.url);
    alive.send(hello({ session: 'alive', rank: 1, world_size: 2 }));
    await alive.next((m) => m.type === 'welcome');
    const closed = await muteClosed;
    expect(closed.code).toBe(1001);
    expect(closed.reason).toMatch(/nothing heard for/);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(alive.socket.readyState).toBe(WebSocket.OPEN);
  });
});

describe('sessions are bound to their job, rank and secret', () => {
  it('refuses another job, another rank or a hello without the secret; a seq out of range; and the real rank counts exactly', async () => {
    const side = await sidecar();
    const real = await connect(side.url);
    real.send(hello({ session: 'victim' }));
    const welcome = await real.next((m) => m.type === 'welcome');
    expect(welcome.resume).toMatch(/^[0-9a-f]{32}$/);
    real.send(steps(range(1, 100).map((seq) => row({ seq }))));
    await real.next((m) => m.type === 'ack' && m.ack === 100);

    const attempts: Array<[Record<string, unknown>, RegExp]> = [
      [hello({ session: 'victim', job: 'other', resume: null }), /belongs to another job or rank/],
      [hello({ session: 'victim', rank: 1, world_size: 2, resume: null }), /belongs to another job or rank/],
      [hello({ session: 'victim', resume: null }), /already held/],
      [hello({ session: 'victim', resume: '0'.repeat(32) }), /already held/],
    ];
    for (const [frame, reason] of attempts) {
      const attacker = await connect(side.url);
      attacker.send(frame);
      const closed = await attacker.closed;
      expect(closed.code).toBe(1008);
      expect(closed.reason).toMatch(reason);
    }
    const jumper = await connect(side.url);
    jumper.send(hello({ session: 'jumper', job: 'other' }));
    await jumper.next((m) => m.type === 'welcome');
    const far = Number.MAX_SAFE_INTEGER;
    jumper.send(steps([[far, far - 1, 1e9, 1e7, 2e6, 1e6, 6e6, 32, null, null, null]]));
    expect((await jumper.closed).reason).toMatch(/seq 9007199254740991 is beyond what this session can have sent/);

    real.send(steps(range(101, 1500).map((seq) => row({ seq }))));
    await real.next((m) => m.type === 'ack' && m.ack === 1500);
    const { body } = await state(side);
    expect(body.jobs.find((job: { job: string }) => job.job === 'job-a').steps).toBe(1500);
  });

  it('resumes a session for the hook that holds its secret, and lets a seq jump as far as the records it says it dropped', async () => {
    const side = await sidecar();
    const first = await connect(side.url);
    first.send(hello({ session: 's' }));
    const { resume } = await first.next((m) => m.type === 'welcome');
    first.send(steps(range(1, 10).map((seq) => row({ seq }))));
    await first.next((m) => m.type === 'ack' && m.ack === 10);
    first.close();
    await first.closed;
    const again = await connect(side.url);
    again.send(hello({ session: 's', resume }));
    expect((await again.next((m) => m.type === 'welcome')).ack).toBe(10);
    again.send(steps(range(111, 120).map((seq) => row({ seq })), 100));
    await again.next((m) => m.type === 'ack' && m.ack === 120);
  });
});

describe('clock sanity', () => {
  it('leaves out and acknowledges records that end 100 days ahead, and the rank is judged on the rest', async () => {
    const side = await sidecar();
    const hook = await connect(side.url);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
    const ahead = 100 * 86_400 * 1e9;
    const rows = range(1, 300).map((seq) => row({ seq, durMs: 10, dataMs: 0.5, h2dMs: 0.5, computeMs: 8 }));
    rows[150]![2] = ahead;
    rows[299]![2] = ahead;
    hook.send(steps(rows));
    expect((await hook.next((m) => m.type === 'ack')).ack).toBe(300);
    side.setTime(side.now() + 3_000);
    await side.tick();
    const { body } = await state(side);
    expect(body.ingest.implausible).toEqual({ steps: 2 });
    const [rank] = body.jobs[0].ranks;
    expect(rank.steps).toBe(298);
    expect(rank.verdict?.verdict).toBe('compute-bound');
  });
});

describe('names, secrets, addresses and files', () => {
  it('encodes job names into file names that cannot collide or escape', () => {
    const names = ['a/b', 'a_b', 'a%2Fb', '../etc', 'x.2', 'x', 'é', '%C3%A9', 'a b', 'a'.repeat(128), 'a'.repeat(127) + 'b', '€'.repeat(128)];
    const bases = [summaryBase('x', 2), ...names.map((name) => summaryBase(name, 1))];
    expect(new Set(bases).size).toBe(bases.length);
    for (const name of names) {
      expect(fileSafeName(name)).toMatch(/^[A-Za-z0-9_%~-]+$/);
      expect(Buffer.byteLength(summaryBase(name, 99) + '.json.partial')).toBeLessThan(200);
    }
    expect(fileSafeName('train-7b_v2')).toBe('train-7b_v2');
  });

  it('never logs a query string, where a careless client may have put its token', () => {
    expect(withoutQuery('/v1/stream?token=s3cret&x=1')).toBe('/v1/stream?[redacted]');
    expect(withoutQuery('/v1/state')).toBe('/v1/state');
  });

  it('listens on IPv6 loopback given as [::1], and takes a hook there', async () => {
    const side = await serve({
      host: '[::1]',
      port: 0,
      exitOnEnd: false,
      endGraceS: 30,
      logLevel: 'silent',
      maxFrameBytes: 1 << 20,
      gpuSource: 'none',
      nvidiaSmi: 'nvidia-smi',
      gpuIntervalMs: 1000,
      hostIntervalMs: 1000,
      procRoot: '/proc',
      windowS: 10,
      holdS: 2,
    });
    cleanups.push(() => side.sidecar.stop('test'));
    expect(side.url).toMatch(/^ws:\/\/\[::1\]:\d+$/);
    const hook = await connect(`${side.url}/v1/ingest`);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
  });

  const tempDir = useTempDirs('stepscope-security-');
  it('never hangs on a FIFO in the journal folder or given as the journal, and says what it is', async () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, 'wal-00000001.log'), '');
    execFileSync('mkfifo', [path.join(dir, 'wal-00000002.log')]);
    const { report } = await replayJournal(dir);
    expect(report.examples.map((example) => example.reason).join('\n')).toMatch(/not a regular file/);
    const fifo = path.join(dir, 'wal-00000002.log');
    let err = '';
    const code = await runReplay(fifo, { format: 'text', out: { write: () => true } as unknown as NodeJS.WritableStream, err: { write: (text: string) => ((err += text), true) } as unknown as NodeJS.WritableStream });
    expect(code).toBe(1);
    expect(err).toMatch(/not a folder or a regular file/);
  });
});
