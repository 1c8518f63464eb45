import websocket from '@fastify/websocket';
import Fastify, { type FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { VerdictEvent } from '../src/analysis/job-analysis.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { registerStream, type StreamHub } from '../src/outputs/stream.js';
import type { SidecarState } from '../src/protocol/state.js';
import { cleanupList } from './support/cleanup-list.js';
import { waitFor } from './support/sidecar.js';

/**
 * The stream's route on a bare server, with a state getter that counts its calls: what each frame
 * holds, and that the state is read once per tick however many viewers there are. The test publishes
 * the engine's snapshots on a simulated clock: what is sent depends on the ticks, never on how fast
 * this machine gets through them.
 */

const STATE = { version: 'test', now: '', jobs: [], counters: { gpus: [] } } as unknown as SidecarState;
/** Not on a second: an update's history then ends part-way into its slice. */
const T = Date.parse('2026-12-01T12:00:00.123Z');

interface Harness {
  app: FastifyInstance;
  hub: StreamHub;
  url: string;
  stateCalls: number[];
  /** The engine publishing `n` snapshots, one a stream tick apart. */
  tick(n?: number): void;
  /** A snapshot with these verdict changes, at the time of the last one (no new tick). */
  emit(events: VerdictEvent[]): void;
  now(): number;
}

const cleanups = cleanupList();

async function harness(rateHz: number): Promise<Harness> {
  const app = Fastify();
  cleanups.push(() => app.close());
  // As in http-server.ts: the plugin's own preClose would close every socket without a code.
  await app.register(websocket, { preClose: (done) => done() });
  const stateCalls: number[] = [];
  let listener: ((snapshot: EngineSnapshot) => void) | null = null;
  let now = T;
  // A snapshot as the engine publishes it, with its 5 minutes of 1 s history slices.
  const snapshot = () => ({ at: now, events: [], regressions: [], regressionChanges: [], history: { from: Math.floor(now / 1000) * 1000 - 299_000, sliceMs: 1000, ranks: [], gpus: [] } }) as unknown as EngineSnapshot;
  const hub = registerStream(app, {
    state: () => {
      stateCalls.push(now);
      return { ...STATE, now: new Date(now).toISOString() };
    },
    snapshot,
    onSnapshot: (l) => ((listener = l), () => (listener = null)),
    rateHz,
    log: pino({ level: 'silent' }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    app,
    hub,
    url: `ws://127.0.0.1:${port}/v1/stream`,
    stateCalls,
    tick: (n = 1) => {
      for (let i = 0; i < n; i++) {
        now += 1000 / rateHz;
        listener?.(snapshot());
      }
    },
    emit: (events) => listener?.({ ...snapshot(), events }),
    now: () => now,
  };
}

function viewer(url: string): Promise<{ socket: WebSocket; frames: any[]; closed: Promise<{ code: number; reason: string }> }> {
  const socket = new WebSocket(url);
  const frames: any[] = [];
  socket.on('message', (data) => frames.push(JSON.parse(data.toString())));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve({ socket, frames, closed }));
    socket.once('error', reject);
  });
}

/** Resolves once `v` holds `n` frames. */
const frames = (v: { frames: unknown[] }, n: number) => waitFor(() => v.frames.length >= n);

function verdictEvent(at: number): VerdictEvent {
  return {
    job: 'j',
    rank: null,
    since: at - 2000,
    at,
    from: 'compute-bound',
    fromCause: null,
    to: 'input-bound',
    cause: 'few-workers',
    judgement: { verdict: 'input-bound', cause: 'few-workers', evidence: { rule: 'data waits', lost: {}, figures: {} }, recommendations: [{ id: 'raise-num-workers', text: 'Raise num_workers.' }], limiters: [], causes: [] },
  };
}

describe('ws /v1/stream on its own', () => {
  it('reads the state once per tick for all viewers, sends each a snapshot then updates in order', async () => {
    const h = await harness(10);
    const viewers = await Promise.all(Array.from({ length: 20 }, () => viewer(h.url)));
    await Promise.all(viewers.map((v) => frames(v, 1)));
    const callsBefore = h.stateCalls.length;
    h.tick(10);
    await Promise.all(viewers.map((v) => frames(v, 11)));
    // Once a tick, whatever the 20 viewers.
    expect(h.stateCalls.length - callsBefore).toBe(10);
    expect(h.hub.viewers).toBe(20);
    for (const v of viewers) {
      expect(v.frames[0]).toMatchObject({ v: 1, type: 'snapshot', rate_hz: 10, state: { version: 'test' } });
      const updates = v.frames.slice(1);
      expect(updates).toHaveLength(10);
      expect(updates.every((f) => f.type === 'update')).toBe(true);
      updates.forEach((f, i) => expect(f.seq).toBe(v.frames[0].seq + i + 1));
    }
    // Every viewer got the same frame for the same tick.
    const seq = viewers[0]!.frames[3].seq;
    const ats = new Set(viewers.map((v) => v.frames.find((f) => f.seq === seq)?.at));
    expect(ats.size).toBe(1);
  });

  it('reads nothing at a tick with no viewer', async () => {
    const h = await harness(4);
    h.tick(4);
    expect(h.stateCalls).toEqual([]);
  });

  it('sends the last 5 minutes of history in a snapshot and only the newest slices in an update', async () => {
    const h = await harness(4);
    const v = await viewer(h.url);
    await frames(v, 1);
    h.tick();
    await frames(v, 2);
    const [snapshot, update] = v.frames;
    expect(snapshot.type).toBe('snapshot');
    expect(update.type).toBe('update');
    const span = (f: any) => Date.parse(f.at) - Date.parse(f.history.from);
    expect(span(snapshot)).toBeGreaterThan(299_000);
    expect(span(snapshot)).toBeLessThanOrEqual(300_000);
    // A 250 ms tick touches at most two 1 s slices; the update carries three.
    expect(span(update)).toBeGreaterThan(2_000);
    expect(span(update)).toBeLessThanOrEqual(3_000);
    expect(Date.parse(snapshot.history.from) % 1000).toBe(0);
  });

  it('passes verdict changes on as they happen, and closes viewers with 1001 when the server closes', async () => {
    const h = await harness(1);
    const v = await viewer(h.url);
    await frames(v, 1);
    h.tick();
    await frames(v, 2);
    const at = h.now();
    h.emit([verdictEvent(at), { ...verdictEvent(at), rank: 0 }]);
    await frames(v, 4);
    expect(v.frames.slice(2)).toEqual([
      { v: 1, type: 'verdict', at: new Date(at).toISOString(), job: 'j', rank: null, from: 'compute-bound', from_cause: null, to: 'input-bound', cause: 'few-workers', since: new Date(at - 2000).toISOString(), rule: 'data waits', recommendation: 'Raise num_workers.' },
      expect.objectContaining({ type: 'verdict', rank: 0 }),
    ]);
    // Sent with no tick after the one before them: events are not held for the next.
    expect(v.frames.map((f) => f.type)).toEqual(['snapshot', 'update', 'verdict', 'verdict']);
    await h.app.close();
    expect(await v.closed).toEqual({ code: 1001, reason: 'sidecar shutting down' });
  });
});
