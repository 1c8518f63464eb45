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

/**
 * The stream's route on a bare server, with a state getter that counts its calls: what each frame
 * holds, and that the state is read once per tick however many viewers there are.
 */

const STATE = { version: 'test', now: '', jobs: [], counters: { gpus: [] } } as unknown as SidecarState;

interface Harness {
  app: FastifyInstance;
  hub: StreamHub;
  url: string;
  stateCalls: number[];
  emit(events: VerdictEvent[]): void;
}

const cleanups = cleanupList();

async function harness(rateHz: number): Promise<Harness> {
  const app = Fastify();
  cleanups.push(() => app.close());
  // As in server.ts: the plugin's own preClose would close every socket without a code.
  await app.register(websocket, { preClose: (done) => done() });
  const stateCalls: number[] = [];
  let listener: ((snapshot: EngineSnapshot) => void) | null = null;
  // A snapshot as the engine publishes it, taken now, with its 5 minutes of 1 s history slices.
  const snapshot = () => {
    const at = Date.now();
    return { at, events: [], history: { from: Math.floor(at / 1000) * 1000 - 299_000, sliceMs: 1000, ranks: [], gpus: [] } } as unknown as EngineSnapshot;
  };
  const hub = registerStream(app, {
    state: () => {
      const at = Date.now();
      stateCalls.push(at);
      return { ...STATE, now: new Date(at).toISOString() };
    },
    snapshot,
    onSnapshot: (l) => ((listener = l), () => (listener = null)),
    rateHz,
    log: pino({ level: 'silent' }),
  });
  // The engine publishing a snapshot at the stream's rate.
  const engineTicks = setInterval(() => listener?.(snapshot()), 1000 / rateHz);
  app.addHook('onClose', async () => clearInterval(engineTicks));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { app, hub, url: `ws://127.0.0.1:${port}/v1/stream`, stateCalls, emit: (events) => listener?.({ ...snapshot(), events }) };
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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
    const callsBefore = h.stateCalls.length;
    await sleep(1050);
    const calls = h.stateCalls.length - callsBefore;
    // About 10 ticks in a second, whatever the 20 viewers; a tick with no viewer reads nothing.
    expect(calls).toBeGreaterThanOrEqual(6);
    expect(calls).toBeLessThanOrEqual(12);
    expect(h.hub.viewers).toBe(20);
    for (const v of viewers) {
      expect(v.frames[0]).toMatchObject({ v: 1, type: 'snapshot', rate_hz: 10, state: { version: 'test' } });
      const updates = v.frames.slice(1);
      expect(updates.length).toBeGreaterThanOrEqual(6);
      expect(updates.every((f) => f.type === 'update')).toBe(true);
      updates.forEach((f, i) => expect(f.seq).toBe(v.frames[0].seq + i + 1));
    }
    // Every viewer got the same frame for the same tick.
    const seq = viewers[0]!.frames[3].seq;
    const ats = new Set(viewers.map((v) => v.frames.find((f) => f.seq === seq)?.at));
    expect(ats.size).toBe(1);
  });

  it('sends the last 5 minutes of history in a snapshot and only the newest slices in an update', async () => {
    const h = await harness(4);
    const v = await viewer(h.url);
    await sleep(600);
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
    await sleep(100);
    const at = Date.now();
    h.emit([verdictEvent(at), { ...verdictEvent(at), rank: 0 }]);
    await sleep(100);
    const verdicts = v.frames.filter((f) => f.type === 'verdict');
    expect(verdicts).toEqual([
      { v: 1, type: 'verdict', at: new Date(at).toISOString(), job: 'j', rank: null, from: 'compute-bound', from_cause: null, to: 'input-bound', cause: 'few-workers', since: new Date(at - 2000).toISOString(), rule: 'data waits', recommendation: 'Raise num_workers.' },
      expect.objectContaining({ rank: 0 }),
    ]);
    // Well before the next 1 s tick: events are not held for it.
    expect(Date.now() - at).toBeLessThan(900);
    await h.app.close();
    expect(await v.closed).toEqual({ code: 1001, reason: 'sidecar shutting down' });
  });
});
