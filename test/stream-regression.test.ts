import websocket from '@fastify/websocket';
import Fastify from 'fastify';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { VerdictEvent } from '../src/analysis/job-analysis.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import type { RegressionChange } from '../src/engine/runs.js';
import { optedIn } from '../src/outputs/stream-events.js';
import type { Socket } from 'node:net';
import { registerStream } from '../src/outputs/stream.js';
import type { StreamLimits } from '../src/outputs/stream-viewer.js';
import { parseInput } from '../src/protocol/parse.js';
import type { SidecarState } from '../src/protocol/state.js';
import { RegressionFrameSchema, type RegressionFrame } from '../src/protocol/stream.js';
import { cleanupList } from './support/cleanup-list.js';

/**
 * The `regression` frame of ws /v1/stream: a regression as the engine begins and ends it
 * (src/engine/runs.ts puts them in the snapshot), to the viewers that ask for it with
 * `?events=regression` and to no other; one held when a viewer connects comes to it as `ongoing`.
 * The stream's route on a bare server; the test publishes the snapshots, so nothing waits on a clock.
 */

const STATE = { version: 'test', now: '', jobs: [], counters: { gpus: [] } } as unknown as SidecarState;
const T = Date.parse('2026-12-01T12:00:00Z');

const cleanups = cleanupList();

type Regressions = NonNullable<EngineSnapshot['regressions']>;

/** `pad`: characters added to every state frame, so that a paused viewer falls behind within a few frames. */
async function harness(options: { pad?: number; limits?: Partial<StreamLimits> } = {}) {
  const app = Fastify();
  cleanups.push(() => app.close());
  await app.register(websocket, { preClose: (done) => done() });
  const logs: string[] = [];
  const state = { ...STATE, version: 'x'.repeat(options.pad ?? 4) };
  let listener: ((snapshot: EngineSnapshot) => void) | null = null;
  let latest: EngineSnapshot;
  const snapshotAt = (at: number, regressions: Regressions, changes: RegressionChange[] = [], events: VerdictEvent[] = []): EngineSnapshot =>
    ({ at, events, regressions, regressionChanges: changes, history: { from: at - 10_000, sliceMs: 1000, ranks: [], gpus: [] } }) as unknown as EngineSnapshot;
  latest = snapshotAt(T, []);
  registerStream(app, {
    state: () => state,
    snapshot: () => latest,
    onSnapshot: (l) => ((listener = l), () => (listener = null)),
    rateHz: 4,
    ...(options.limits ? { limits: options.limits } : {}),
    log: pino({ level: 'info' }, { write: (line: string) => void logs.push((JSON.parse(line) as { msg: string }).msg) }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `ws://127.0.0.1:${port}/v1/stream`,
    logs,
    /** The engine publishing a snapshot, as serve-command.ts does after decorating it. */
    publish(at: number, regressions: Regressions, changes: RegressionChange[] = [], events: VerdictEvent[] = []) {
      latest = snapshotAt(at, regressions, changes, events);
      listener?.(latest);
    },
  };
}

interface Viewer {
  socket: WebSocket;
  frames: Array<{ type: string } & Record<string, unknown>>;
  /** Resolves once a frame that `match` takes has come. */
  next(match: (frame: { type: string } & Record<string, unknown>) => boolean): Promise<void>;
}

function viewer(url: string): Promise<Viewer> {
  const socket = new WebSocket(url);
  const frames: Viewer['frames'] = [];
  const waiting: Array<{ match: (frame: Viewer['frames'][number]) => boolean; resolve: () => void }> = [];
  socket.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as Viewer['frames'][number];
    frames.push(frame);
    for (const w of waiting.splice(0)) (w.match(frame) ? w.resolve() : waiting.push(w));
  });
  const next: Viewer['next'] = (match) => (frames.some(match) ? Promise.resolve() : new Promise((resolve) => waiting.push({ match, resolve })));
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve({ socket, frames, next }));
    socket.once('error', reject);
  });
}

const change = (over: Partial<RegressionChange>): RegressionChange => ({
  job: 'train',
  run: 3,
  at: T + 35_000,
  regressed: true,
  changePct: 14,
  text: '14% slower per sample than the median of the last 2 runs: 11 of 14 points from data wait',
  startedAt: T + 5_000,
  endedAt: null,
  reference: { kind: 'history', label: 'the median of the last 2 runs (newest 2026-11-30)' },
  thresholdPct: 10,
  ...over,
});

/** A job's regression holding, as the snapshot carries it. */
const holding = (began: RegressionChange, changePct: number) => ({ job: began.job, run: began.run, regressed: true, change_pct: changePct, began });

/** A verdict change: every viewer gets it, after whatever was sent to it before. */
const marker = (at: number): VerdictEvent =>
  ({
    job: 'train',
    rank: null,
    since: at,
    at,
    from: null,
    fromCause: null,
    to: 'input-bound',
    cause: 'few-workers',
    judgement: { verdict: 'input-bound', cause: 'few-workers', evidence: { rule: 'data waits', lost: {}, figures: {} }, recommendations: [] },
  }) as unknown as VerdictEvent;

const regressionFrames = (v: Viewer) => v.frames.filter((f) => f.type === 'regression').map((f) => parseInput(RegressionFrameSchema, f, 'regression frame'));

describe('the regression frame', () => {
  it('goes to viewers that ask for it as the regression begins and ends, validated by its schema, and to no other viewer', async () => {
    const h = await harness();
    const asked = await viewer(`${h.url}?events=regression`);
    const plain = await viewer(h.url);
    await Promise.all([asked.next((f) => f.type === 'snapshot'), plain.next((f) => f.type === 'snapshot')]);

    h.publish(T + 35_000, [holding(change({}), 14)], [change({})], [marker(T + 35_000)]);
    const ended = change({ at: T + 70_000, regressed: false, changePct: 1, endedAt: T + 40_000 });
    h.publish(T + 70_000, [{ job: 'train', run: 3, regressed: false, change_pct: 1, began: null }], [ended], [marker(T + 70_000)]);
    await asked.next((f) => f.type === 'verdict' && f.at === new Date(T + 70_000).toISOString());
    await plain.next((f) => f.type === 'verdict' && f.at === new Date(T + 70_000).toISOString());

    const frames: RegressionFrame[] = regressionFrames(asked);
    expect(frames).toEqual([
      {
        v: 1,
        type: 'regression',
        at: '2026-12-01T12:00:35.000Z',
        job: 'train',
        run: 3,
        status: 'started',
        change_pct: 14,
        threshold_pct: 10,
        started_at: '2026-12-01T12:00:05.000Z',
        ended_at: null,
        reference: { kind: 'history', label: 'the median of the last 2 runs (newest 2026-11-30)' },
        text: '14% slower per sample than the median of the last 2 runs: 11 of 14 points from data wait',
      },
      expect.objectContaining({ status: 'ended', at: '2026-12-01T12:01:10.000Z', change_pct: 1, started_at: '2026-12-01T12:00:05.000Z', ended_at: '2026-12-01T12:00:40.000Z' }),
    ]);
    // Each before the verdict change published with it: sent at once, not held for a tick.
    const order = asked.frames.map((f) => f.type).filter((t) => t !== 'update');
    expect(order).toEqual(['snapshot', 'regression', 'verdict', 'regression', 'verdict']);
    // A viewer of an older build refuses frame types it does not know: it gets none it did not ask for.
    expect(plain.frames.filter((f) => f.type === 'regression')).toEqual([]);
    expect(plain.frames.filter((f) => f.type === 'verdict')).toHaveLength(2);
  });

  it('comes as `ongoing`, with the latest figure, to a viewer that connects during a regression; not once it is over or its run ended', async () => {
    const h = await harness();
    h.publish(T + 35_000, [holding(change({}), 14)], [change({})]);
    h.publish(T + 50_000, [holding(change({}), 17)]);
    const late = await viewer(`${h.url}?events=regression`);
    await late.next((f) => f.type === 'regression');
    expect(regressionFrames(late)).toEqual([expect.objectContaining({ status: 'ongoing', at: '2026-12-01T12:00:50.000Z', change_pct: 17, started_at: '2026-12-01T12:00:05.000Z', ended_at: null })]);
    expect(late.frames[0]!.type).toBe('snapshot');

    // The run ended while regressed: the job is compared no more, and a later viewer hears nothing of it.
    h.publish(T + 60_000, [], [], [marker(T + 60_000)]);
    const after = await viewer(`${h.url}?events=regression,verdicts-to-come`);
    await after.next((f) => f.type === 'snapshot');
    h.publish(T + 61_000, [], [], [marker(T + 61_000)]);
    await after.next((f) => f.type === 'verdict');
    expect(regressionFrames(after)).toEqual([]);
  });

  it('starts over at a snapshot: a viewer that fell behind gets, after the newest state, the regressions holding as `ongoing`', async () => {
    // No stall limit: the test's clock runs on with every snapshot, not the viewer's reading.
    const h = await harness({ pad: 64 * 1024, limits: { highWaterBytes: 256 * 1024, maxBufferedBytes: 1 << 30, maxStallMs: 1e12 } });
    h.publish(T + 35_000, [holding(change({}), 14)], [change({})]);
    const lagging = await viewer(`${h.url}?events=regression`);
    await lagging.next((f) => f.type === 'regression');
    const tcp = (lagging.socket as unknown as { _socket: Socket })._socket;
    tcp.pause();
    let at = T + 36_000;
    const regressions: Regressions = [holding(change({ job: 'other', run: 1, at, changePct: 25, startedAt: at - 30_000 }), 25)];
    for (let i = 0; i < 5_000 && !h.logs.includes('viewer behind; sending it the newest state once it catches up'); i++) {
      h.publish((at += 250), [holding(change({}), 14)]);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(h.logs).toContain('viewer behind; sending it the newest state once it catches up');
    // While it is behind: train's regression ends, other's begins; it is sent neither.
    h.publish((at += 250), regressions, [change({ at, regressed: false, changePct: 2, endedAt: at - 30_000 }), change({ job: 'other', run: 1, at, changePct: 25, startedAt: at - 30_000 })]);
    tcp.resume();
    for (let i = 0; i < 5_000 && lagging.frames.filter((f) => f.type === 'snapshot').length < 2; i++) {
      h.publish((at += 250), regressions);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const second = lagging.frames.findIndex((f, i) => i > 0 && f.type === 'snapshot');
    expect(second).toBeGreaterThan(0);
    const before = lagging.frames.slice(0, second).filter((f) => f.type === 'regression');
    const after = lagging.frames.slice(second + 1).filter((f) => f.type === 'regression');
    expect(before.map((f) => [f.job, f.status])).toEqual([['train', 'ongoing']]);
    expect(after.map((f) => [f.job, f.status, f.change_pct])).toEqual([['other', 'ongoing', 25]]);
    expect(lagging.frames[second + 1]!.type).toBe('regression');
  });

  it('is asked for by name in ?events=, names this sidecar does not know left out', () => {
    expect([...optedIn('regression')]).toEqual(['regression']);
    expect([...optedIn('future, regression')]).toEqual(['regression']);
    expect([...optedIn(['future', 'regression'])]).toEqual(['regression']);
    expect([...optedIn('regressions')]).toEqual([]);
    expect([...optedIn(undefined)]).toEqual([]);
  });
});
