import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { decode, encode } from '../src/protocol/codec.js';
import type { StreamOptions } from '../src/outputs/stream.js';
import { cleanupList } from './support/cleanup-list.js';
import { startFakeProc } from './support/fake-proc.js';
import { hello, row, STEP_FIELDS, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { capturedLogger } from './support/logger.js';
import { startSidecar, waitFor, type LogLine } from './support/sidecar.js';

/**
 * ws /v1/stream: many viewers at once, a viewer that stops reading, a viewer that never answers a
 * ping, while hooks keep sending steps and counting how fast they are acknowledged. The route is
 * tested on the sidecar assembled in this process (./support/in-process.ts), listening on a free
 * port; one test runs the real sidecar, for the flags that set the stream and its verdict events.
 */

const cleanups = cleanupList();

/** A hook speaking the wire protocol that sends one step every `everyMs`, and times each acknowledgement. */
class StepDriver {
  readonly sentAt = new Map<number, number>();
  readonly ackedAt = new Map<number, number>();
  private seq = 0;
  private timer: NodeJS.Timeout | null = null;

  private constructor(private readonly socket: WebSocket, private readonly helloAt: number) {
    socket.on('message', (data: Buffer) => {
      const message = decode(data) as { type: string; ack?: number };
      if (message.type !== 'ack') return;
      const now = Date.now();
      for (const [seq] of this.sentAt) if (seq <= message.ack! && !this.ackedAt.has(seq)) this.ackedAt.set(seq, now);
    });
  }

  static async start(ingestUrl: string, job: string, rank: number, worldSize: number, everyMs = 20, env: Record<string, string> = {}): Promise<StepDriver> {
    const socket = new WebSocket(ingestUrl);
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    const helloAt = Date.now();
    socket.send(
      encode({ v: 1, type: 'hello', job, rank, local_rank: rank, world_size: worldSize, session: `${job}-${rank}-${helloAt}`, pid: 1000 + rank, host: 'node-1', clock: { wall_ns: BigInt(helloAt) * 1_000_000n, mono_ns: 0 }, env }),
    );
    const driver = new StepDriver(socket, helloAt);
    driver.timer = setInterval(() => driver.send(everyMs), everyMs);
    return driver;
  }

  private send(durMs: number): void {
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.seq += 1;
    const now = Date.now();
    const ns = (ms: number) => Math.round(ms * 1e6);
    const row = [this.seq, this.seq - 1, ns(now - this.helloAt), ns(durMs), ns(durMs * 0.3), ns(durMs * 0.05), ns(durMs * 0.6), 32, null, null, null];
    this.sentAt.set(this.seq, now);
    this.socket.send(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows: [row], dropped: 0 }));
  }

  /** How many steps were acknowledged in [from, to). */
  ackedBetween(from: number, to: number): number {
    return [...this.ackedAt.values()].filter((at) => at >= from && at < to).length;
  }

  /** Acknowledgement delays (ms) of the steps sent in [from, to). */
  ackDelays(from: number, to: number): { sent: number; acked: number; delays: number[] } {
    const sent = [...this.sentAt].filter(([, at]) => at >= from && at < to);
    const delays = sent.filter(([seq]) => this.ackedAt.has(seq)).map(([seq, at]) => this.ackedAt.get(seq)! - at);
    return { sent: sent.length, acked: delays.length, delays };
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.socket.terminate();
  }
}

interface Viewer {
  socket: WebSocket;
  frames: Array<{ at: number; bytes: number; frame: any }>;
  closed: Promise<{ code: number; reason: string; at: number }>;
}

async function connectViewer(streamUrl: string, options: { autoPong?: boolean; onFirst?: (socket: WebSocket) => void } = {}): Promise<Viewer> {
  const socket = new WebSocket(streamUrl, { autoPong: options.autoPong ?? true });
  const frames: Viewer['frames'] = [];
  socket.on('message', (data: Buffer) => {
    frames.push({ at: Date.now(), bytes: data.length, frame: JSON.parse(data.toString()) });
    if (frames.length === 1) options.onFirst?.(socket);
  });
  const closed = new Promise<Viewer['closed'] extends Promise<infer T> ? T : never>((resolve) =>
    socket.once('close', (code, reason) => resolve({ code, reason: reason.toString(), at: Date.now() })),
  );
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  cleanups.push(() => socket.terminate());
  return { socket, frames, closed };
}

/** The underlying TCP socket, to stop reading from it as a stuck viewer does. */
const tcp = (socket: WebSocket) => (socket as unknown as { _socket: import('node:net').Socket })._socket;

interface StreamingSidecar {
  side: InProcess;
  streamUrl: string;
  ingestUrl: string;
  logs: LogLine[];
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
}

/**
 * The sidecar in this process on the real clock, with stream options the CLI does not offer (short
 * limits), ticking every `tickMs` as serve()'s timer does.
 */
async function streamingSidecar(stream: Pick<StreamOptions, 'rateHz' | 'limits'>, tickMs = 250): Promise<StreamingSidecar> {
  const captured = capturedLogger();
  const side = await inProcess({ now: Date.now, log: captured.log, stream });
  const { ingestUrl, streamUrl } = await listen(side);
  cleanups.push(() => side.app.close());
  const timer = setInterval(() => void side.tick(), tickMs);
  cleanups.push(() => clearInterval(timer));
  const waitForLog = (predicate: (line: LogLine) => boolean, timeoutMs = 20_000) => waitFor(() => captured.lines.find(predicate), timeoutMs, 20);
  return { side, streamUrl, ingestUrl, logs: captured.lines, waitForLog };
}

const contiguous = (seqs: number[]) => seqs.every((seq, i) => i === 0 || seq === seqs[i - 1]! + 1);
/** Snapshots and updates, leaving out verdict events (which carry no seq). */
const stateFrames = <T extends { frame: any }>(frames: T[]) => frames.filter((f) => f.frame.type !== 'verdict');

describe('ws /v1/stream', () => {
  it('serves 50 viewers at once: a snapshot each, then every update at the steady rate, the same bytes for all', async () => {
    // On the simulated clock: 3 s of engine ticks every 50 ms, whatever else the machine is doing.
    const side = await inProcess({ at: Date.now(), stream: { rateHz: 4 } });
    cleanups.push(() => side.app.close());
    const { ingestUrl, streamUrl } = await listen(side);
    const hook = await TestHook.connect(ingestUrl);
    cleanups.push(() => hook.close());
    hook.send(hello({ job: 'fifty', session: 'fifty' }));
    let sent = 0;
    const sendSteps = async (n: number) => {
      hook.send(steps(Array.from({ length: n }, () => row({ seq: ++sent }))));
      await hook.next((m) => m.type === 'ack' && m.ack === sent);
    };
    await sendSteps(21);
    await side.tick();
    const viewers = await Promise.all(Array.from({ length: 50 }, () => connectViewer(streamUrl)));
    await waitFor(() => viewers.every((v) => v.frames.length > 0));
    const start = side.now();
    for (let ms = 50; ms <= 3_000; ms += 50) {
      side.setTime(start + ms);
      if (ms % 250 === 0) await sendSteps(5);
      await side.tick();
    }
    // 3 s at 4 a second: a frame at the first tick, then one each 250 ms (at +50 ms, +300 ms, ... +2800 ms).
    await waitFor(() => viewers.every((v) => stateFrames(v.frames).length >= 13));
    for (const viewer of viewers) {
      const frames = stateFrames(viewer.frames);
      expect(frames[0]!.frame).toMatchObject({ v: 1, type: 'snapshot', rate_hz: 4, state: { jobs: [{ job: 'fifty' }] } });
      expect(frames[0]!.frame.history.ranks).toEqual([expect.objectContaining({ job: 'fifty', rank: 0 })]);
      const updates = frames.slice(1).map((f) => f.frame);
      expect(updates.every((f) => f.type === 'update')).toBe(true);
      expect(updates.map((f) => Date.parse(f.at) - start)).toEqual(Array.from({ length: 12 }, (_, i) => 50 + 250 * i));
      expect(contiguous(frames.map((f) => f.frame.seq))).toBe(true);
      expect(updates.at(-1)!.state.jobs[0].steps).toBeGreaterThan(frames[0]!.frame.state.jobs[0].steps);
    }
    // One encoding per tick, sent to all: for a tick every viewer got, the same bytes (when they arrive is load's).
    const seq = stateFrames(viewers[0]!.frames)[4]!.frame.seq;
    const copies = viewers.map((v) => v.frames.find((f) => f.frame.seq === seq)!);
    expect(new Set(copies.map((c) => JSON.stringify(c.frame))).size).toBe(1);
  });

  // On the real sidecar: --stream-rate reaches the stream, and the events come from its own ticks and judgement.
  it('sends verdict changes the moment the sidecar decides them', async () => {
    // A scripted, idle host: the cause stays "unknown" whatever else this machine runs.
    const proc = startFakeProc({ cpuPct: 10 });
    cleanups.push(() => proc.stop());
    const sidecar = await startSidecar(['--gpu-source', 'sim', '--stream-rate', '1', '--hold', '0', '--proc-root', proc.root]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const viewer = await connectViewer(`ws://127.0.0.1:${sidecar.port}/v1/stream`);
    const driver = await StepDriver.start(sidecar.ingestUrl, 'events', 0, 1);
    cleanups.push(() => driver.stop());
    const logged = await sidecar.waitForLog((line) => line.msg === 'job verdict changed' && line.to === 'input-bound', 15_000);
    const event = await waitFor(() => viewer.frames.find((f) => f.frame.type === 'verdict' && f.frame.rank === null && f.frame.to === 'input-bound'));
    expect(stateFrames(viewer.frames)[0]!.frame).toMatchObject({ type: 'snapshot', rate_hz: 1 });
    expect(event.frame).toMatchObject({ v: 1, job: 'events', rank: null, cause: 'unknown', rule: logged.rule, since: logged.since });
    expect(event.frame.recommendation).toMatch(/num_workers/);
    // At one state frame a second, the event did not wait for one: none of a later tick came before it.
    const eventIndex = viewer.frames.indexOf(event);
    expect(viewer.frames.slice(0, eventIndex).filter((f) => f.frame.type !== 'verdict' && Date.parse(f.frame.at) > Date.parse(event.frame.at))).toEqual([]);
    // The first verdict is warming-up, unless 20 steps were in before the sidecar's first judgement.
    const changes = (rank: number | null) => viewer.frames.filter((f) => f.frame.type === 'verdict' && f.frame.rank === rank).map((f) => [f.frame.from, f.frame.to]);
    for (const rank of [0, null]) {
      expect([
        [[null, 'warming-up'], ['warming-up', 'input-bound']],
        [[null, 'input-bound']],
      ]).toContainEqual(changes(rank));
    }
  });
});

describe('ws /v1/stream with a viewer that stops reading', () => {
  // 50 frames a second from 8 ranks, each with 12 KB of env in the state (about 120 KB a frame), fill
  // the kernel's socket buffers (a few MiB) within a second; then a couple of frames reach the high
  // water, so the viewer is behind within a few ticks of taking nothing.
  const RANKS = 8;
  const ENV = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`pad${i}`, 'x'.repeat(1000)]));
  const limits = { highWaterBytes: 256 * 1024, maxBufferedBytes: 8 * 1024 * 1024, maxStallMs: 3_000, heartbeatMs: 60_000, closeGraceMs: 10_000 };

  async function busyJob(sidecar: StreamingSidecar): Promise<StepDriver[]> {
    const drivers = await Promise.all(Array.from({ length: RANKS }, (_, rank) => StepDriver.start(sidecar.ingestUrl, 'busy', rank, RANKS, 20, ENV)));
    cleanups.push(() => drivers.forEach((d) => d.stop()));
    await waitFor(() => drivers.every((d) => d.ackedAt.size > 20), 10_000);
    return drivers;
  }

  it('keeps acknowledging steps and other viewers updated, coalesces the stuck viewer, then closes it with 4008', async () => {
    const sidecar = await streamingSidecar({ rateHz: 50, limits }, 20);
    const drivers = await busyJob(sidecar);
    const healthy = await connectViewer(sidecar.streamUrl);
    let pausedAt = 0;
    const stuck = await connectViewer(sidecar.streamUrl, { onFirst: (socket) => (tcp(socket).pause(), (pausedAt = Date.now())) });
    await waitFor(() => pausedAt > 0);

    const behind = await sidecar.waitForLog((line) => line.msg === 'viewer behind; sending it the newest state once it catches up', 30_000);
    const closing = await sidecar.waitForLog((line) => line.msg === 'closing viewer', 15_000);
    const closedAt = closing.time as number;
    // Closed past its 3 s stall limit: how far past is the machine's (a late tick reads 5 s or more).
    expect(closing).toMatchObject({ code: 4008, reason: expect.stringMatching(/^viewer too slow: nothing taken for \d+ s$/) });
    expect(Number(/for (\d+) s$/.exec(closing.reason as string)![1])).toBeGreaterThanOrEqual(3);
    const coalesced = closing.coalesced as number;
    expect(coalesced).toBeGreaterThan(0);
    expect(closedAt - (behind.time as number)).toBeGreaterThanOrEqual(2_500);

    // Ingest did not notice: acknowledgements kept coming to every rank through the 2.5 s or more the
    // viewer was behind, and every step sent while it was stuck was acknowledged. (Rates and delays
    // are load's to change, so they are not asserted here.)
    const behindAt = behind.time as number;
    for (const driver of drivers) {
      expect(driver.ackedBetween(behindAt, closedAt)).toBeGreaterThan(0);
      await waitFor(() => {
        const { sent, acked } = driver.ackDelays(pausedAt, closedAt);
        return sent > 0 && acked === sent;
      }, 15_000);
    }
    // Nor did the other viewer: every tick, in order, while the stuck one fell behind and was closed.
    const during = stateFrames(healthy.frames).filter((f) => f.at >= pausedAt && f.at < closedAt);
    expect(contiguous(during.map((f) => f.frame.seq))).toBe(true);
    expect(during.filter((f) => f.at >= behindAt).length).toBeGreaterThan(0);

    // Reading again, the stuck viewer finds what was queued before it fell behind, then the close.
    const received = stuck.frames.length;
    tcp(stuck.socket).resume();
    const closed = await stuck.closed;
    expect(closed).toMatchObject({ code: 4008, reason: closing.reason });
    const seqs = stateFrames(stuck.frames).map((f) => f.frame.seq);
    expect(stuck.frames.length).toBeGreaterThan(received);
    // The ticks it missed are the ones coalesced, all before the close: the other viewer got each of them.
    const lastMissed = await waitFor(() => stateFrames(healthy.frames).find((f) => f.frame.seq === seqs.at(-1)! + coalesced));
    expect(Date.parse(lastMissed.frame.at)).toBeLessThanOrEqual(closedAt);
    expect(healthy.socket.readyState).toBe(WebSocket.OPEN);
  });

  it('sends a viewer that fell behind and caught up the newest state whole, not the updates it missed', async () => {
    const sidecar = await streamingSidecar({ rateHz: 50, limits }, 20);
    await busyJob(sidecar);
    const lagging = await connectViewer(sidecar.streamUrl, { onFirst: (socket) => tcp(socket).pause() });
    await sidecar.waitForLog((line) => line.msg === 'viewer behind; sending it the newest state once it catches up', 30_000);
    tcp(lagging.socket).resume();
    const caughtUp = await sidecar.waitForLog((line) => line.msg === 'viewer caught up', 10_000);
    expect(caughtUp.coalesced as number).toBeGreaterThan(0);
    const secondSnapshot = (frames: any[]) => frames.findIndex((f, i) => i > 0 && f.type === 'snapshot');
    // The newest state whole, then half a second of updates (25 at 50 a second).
    await waitFor(() => {
      const frames = stateFrames(lagging.frames).map((f) => f.frame);
      const second = secondSnapshot(frames);
      return second > 0 && frames.length - second - 1 >= 25;
    });
    const frames = stateFrames(lagging.frames).map((f) => f.frame);
    const second = secondSnapshot(frames);
    // Up to the gap, the updates it had been sent; then the newest state whole; then updates again, in order.
    expect(frames.slice(1, second).every((f) => f.type === 'update')).toBe(true);
    expect(contiguous(frames.slice(0, second).map((f) => f.seq))).toBe(true);
    expect(frames[second].seq - frames[second - 1].seq).toBeGreaterThan(1);
    expect(frames[second].history.ranks).toHaveLength(RANKS);
    expect(frames.slice(second + 1).length).toBeGreaterThanOrEqual(25);
    expect(contiguous(frames.slice(second).map((f) => f.seq))).toBe(true);
    expect(lagging.socket.readyState).toBe(WebSocket.OPEN);
  });

  it('drops a viewer that answers no ping', async () => {
    const sidecar = await streamingSidecar({ rateHz: 4, limits: { heartbeatMs: 500 } });
    const silent = await connectViewer(sidecar.streamUrl, { autoPong: false });
    const answering = await connectViewer(sidecar.streamUrl);
    const pings: number[] = [];
    answering.socket.on('ping', () => pings.push(Date.now()));
    const closed = await silent.closed;
    expect(closed.code).toBe(1006);
    expect(sidecar.logs.some((line) => line.msg === 'viewer gone: no pong; dropping it')).toBe(true);
    // Two more heartbeats after the one that dropped the silent viewer: each pings only a viewer that answered the one before.
    await waitFor(() => pings.filter((at) => at >= closed.at).length >= 3);
    expect(answering.socket.readyState).toBe(WebSocket.OPEN);
  });
});
