import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { StallWatch } from '../src/ingest/stall-watch.js';
import { decode, encode } from '../src/protocol/codec.js';
import { hello, row, stackFrame, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { waitFor } from './support/sidecar.js';

/**
 * The sidecar's side of a rank that stops, over real in-process sockets: what `welcome` offers a hook
 * that offers heartbeats and captures, heartbeats and `stack` frames taken and journaled (and a bad one
 * refused), the stall watch asking a stalled rank's hook where it is, and a connection closed for its
 * silence journaled as such.
 */

const STALL = { windowMs: 4_000, holdMs: 0, endGraceMs: 60_000, stallSteps: 1, stallFloorMs: 1_000 };

describe('a hook of a rank that stops, at the ingest', () => {
  let side: InProcess;
  let url: string;
  let timer: NodeJS.Timeout;
  const reads: number[] = [];
  beforeEach(async () => {
    side = await inProcess({ now: Date.now, config: STALL, limits: { idleTimeoutMs: 600 } });
    const watch = new StallWatch(side.ingest, side.engine.world.jobs, { now: Date.now, readProcess: async (rank) => (reads.push(rank.pid), { visible: false, state: null, wchan: null, cpu_s: null, why: 'not in this test' }) });
    await side.app.listen({ host: '127.0.0.1', port: 0 });
    const address = side.app.server.address();
    url = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`;
    // Ticks as the sidecar's timer makes them, each snapshot shown to the stall watch.
    timer = setInterval(() => void side.tick().then((snapshot) => watch.onSnapshot(snapshot)), 100);
  });
  afterEach(async () => {
    clearInterval(timer);
    await side.app.close();
  });

  it('offers heartbeats and captures only to a hook that offered them', async () => {
    const older = await TestHook.connect(url);
    older.send(hello({ session: 'older' }));
    const plain = await older.next((m) => m.type === 'welcome');
    expect(plain).not.toHaveProperty('heartbeat_ms');
    expect(plain).not.toHaveProperty('capture');
    const newer = await TestHook.connect(url);
    newer.send(hello({ session: 'newer', rank: 0, job: 'job-b', heartbeat_ms: 1000, capture: true, proc_start: 4242 }));
    expect(await newer.next((m) => m.type === 'welcome')).toMatchObject({ heartbeat_ms: 1000, capture: { deep: false } });
    older.close();
    newer.close();
  });

  it('journals heartbeats, asks a stalled rank where it is, and keeps its answer', async () => {
    const hook = await TestHook.connect(url);
    // The hook's monotonic clock reads 0 at `helloAt` on the wall clock.
    const helloAt = Date.now();
    hook.send(hello({ heartbeat_ms: 1000, capture: true, clock: { wall_ns: BigInt(helloAt) * 1_000_000n, mono_ns: 0 } }));
    await hook.next((m) => m.type === 'welcome');
    const t0 = Date.now();
    hook.send(steps([1, 2, 3, 4, 5].map((seq) => row({ seq, durMs: 10 }))));
    await hook.next((m) => m.type === 'ack');
    // No step after that, heartbeats on: stalled after its floor, and asked for its stack.
    const beats = setInterval(() => hook.send({ v: 1, type: 'heartbeat' }), 200);
    try {
      const request = await hook.next((m) => m.type === 'capture', 10_000);
      expect(request).toEqual({ v: 1, type: 'capture', id: expect.any(Number) });
      const heard = side.engine.world.history.views('job-a')[0]!.liveness().heardAt!;
      expect(heard).toBeGreaterThan(t0 + 500);
      const sentAt = Date.now();
      hook.send(stackFrame(request.id, (sentAt - helloAt) * 1e6));
      const stalled = await waitFor(() => {
        const rank = side.engine.snapshot().jobs[0]?.ranks[0];
        return rank?.stall?.capture ? rank : null;
      });
      expect(stalled.stall!.where.map((f) => f.function)).toEqual(['wait_for_it']);
      expect(stalled.verdict).toMatchObject({ verdict: 'stalled', cause: 'code' });
      expect(stalled.stall!.capture!.workers).toEqual([{ pid: 7, name: 'pt_data_worker', state: 'S', wchan: null, cpu_s: 0.5, frames: null, stack_error: null }]);
      // Placed on the sidecar's clock through the hello's clock pair: when it was taken, however late it is read.
      expect(Math.abs(stalled.stall!.capture!.at - sentAt)).toBeLessThan(1_000);
    } finally {
      clearInterval(beats);
      hook.close();
    }
  });

  it('refuses a stack frame that is not one, naming the field', async () => {
    const hook = await TestHook.connect(url);
    hook.send(hello({ heartbeat_ms: 1000, capture: true }));
    await hook.next((m) => m.type === 'welcome');
    hook.send({ ...stackFrame(1, 0), threads: 'everything' });
    const closed = await hook.closed;
    expect(closed.code).toBe(1007);
    expect(closed.reason).toMatch(/^stack\.threads: /);
  });

  it('journals a connection it closed for silence as such, and reads the silent rank\'s process', async () => {
    const socket = new WebSocket(url, { autoPong: false });
    await new Promise((resolve, reject) => (socket.once('open', resolve), socket.once('error', reject)));
    socket.send(encode(hello({ session: 'quiet', heartbeat_ms: 1000, capture: true, pid: 31337 })));
    await new Promise<void>((resolve) => socket.on('message', (data: Buffer) => ((decode(data) as { type: string }).type === 'welcome' ? resolve() : undefined)));
    socket.send(encode(steps([1, 2, 3].map((seq) => row({ seq, durMs: 10 })))));
    const closed = await new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
    expect(closed).toBe(1001);
    const liveness = await waitFor(() => {
      const live = side.engine.world.history.views('job-a')[0]?.liveness();
      return live?.disconnectReason === 'silent' ? live : null;
    });
    expect(liveness.connected).toBe(false);
    // Not connected, not ended: the watch reads its process while it waits to be judged gone.
    await waitFor(() => reads.includes(31337));
  });
});
