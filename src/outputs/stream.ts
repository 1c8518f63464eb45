import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { VerdictEvent } from '../analysis/job-analysis.js';
import type { EngineSnapshot, HistorySeries } from '../engine/snapshot.js';
import type { SidecarState } from '../protocol/state.js';
import { STREAM_VERSION, StreamCloseCode, type StreamHistory, type VerdictFrame } from '../protocol/stream.js';
import { DEFAULT_STREAM_LIMITS, StreamViewer, type FrameKind, type StreamLimits } from './stream-viewer.js';
import { encode, optedIn, RegressionEvents } from './stream-events.js';
import { DEFAULT_STREAM_RATE_HZ, streamPeriodMs } from './stream-defaults.js';
const SHUTDOWN_GRACE_MS = 1_000;

export type Subscribe<T> = (listener: (value: T) => void) => () => void;

export interface StreamOptions {
  /** The body of GET /v1/state, from the latest snapshot. */
  state: () => SidecarState;
  /** The engine's latest snapshot (its sparkline history and time). */
  snapshot: () => EngineSnapshot;
  /** Each new snapshot: its verdict and regression changes go out at once, and a state frame at most `rateHz` a second. */
  onSnapshot: Subscribe<EngineSnapshot>;
  rateHz?: number;
  limits?: Partial<StreamLimits>;
  /** The number of viewers, each time it changes: the engine ticks faster while anyone watches. */
  onViewers?: (count: number) => void;
  log: Logger;
}

export interface StreamHub {
  readonly viewers: number;
  close(): void;
}

/** The last `slices` slices of the snapshot's history (all of it when null), as a frame carries them. */
export function historyTail(history: HistorySeries, at: number, slices: number | null): StreamHistory {
  const total = Math.max(0, Math.ceil((at - history.from) / history.sliceMs));
  const skip = slices === null ? 0 : Math.max(0, total - slices);
  return {
    from: new Date(history.from + skip * history.sliceMs).toISOString(),
    slice_s: history.sliceMs / 1000,
    ranks: history.ranks.map((r) => ({ ...r, step_ms: r.step_ms.slice(skip) })),
    gpus: history.gpus.map((g) => ({ ...g, util: g.util.slice(skip), sm_clock_pct: g.sm_clock_pct.slice(skip) })),
  };
}

function verdictFrame(event: VerdictEvent): VerdictFrame {
  return {
    v: STREAM_VERSION,
    type: 'verdict',
    at: new Date(event.at).toISOString(),
    job: event.job,
    rank: event.rank,
    from: event.from,
    from_cause: event.fromCause,
    to: event.to,
    cause: event.cause,
    since: new Date(event.since).toISOString(),
    rule: event.judgement.evidence.rule,
    recommendation: event.judgement.recommendations[0]?.text ?? null,
  };
}

/**
 * `ws /v1/stream`: a snapshot on connect, then the state `rateHz` times a second and verdict changes
 * as they happen. Each tick reads the state once and encodes each kind of frame at most once, whatever
 * the number of viewers; each viewer then takes it or, if behind, is skipped (see StreamViewer).
 */
export function registerStream(app: FastifyInstance, options: StreamOptions): StreamHub {
  const rateHz = options.rateHz ?? DEFAULT_STREAM_RATE_HZ;
  const tickMs = streamPeriodMs(rateHz);
  const limits: StreamLimits = { ...DEFAULT_STREAM_LIMITS, ...options.limits };
  // An update's history covers the slices a tick can have touched since the previous one.
  const tailSlices = (history: HistorySeries) => Math.ceil(tickMs / history.sliceMs) + 2;
  const viewers = new Set<StreamViewer>();
  const regressions = new RegressionEvents();
  let seq = 0;
  /** The state read at a tick, and its frames once encoded. */
  type Tick = { at: number; state: SidecarState; history: HistorySeries; regressions: EngineSnapshot['regressions']; update: Buffer | null; snapshot: Buffer | null };
  let current: Tick | null = null;

  const snapshotOf = (tick: Tick) =>
    (tick.snapshot ??= encode({
      v: STREAM_VERSION,
      type: 'snapshot',
      seq,
      at: new Date(tick.at).toISOString(),
      rate_hz: rateHz,
      state: tick.state,
      history: historyTail(tick.history, tick.at, null),
    }));
  const updateOf = (tick: Tick) =>
    (tick.update ??= encode({
      v: STREAM_VERSION,
      type: 'update',
      seq,
      at: new Date(tick.at).toISOString(),
      state: tick.state,
      history: historyTail(tick.history, tick.at, tailSlices(tick.history)),
    }));
  const readState = (): Tick => {
    const snapshot = options.snapshot();
    return { at: snapshot.at, state: options.state(), history: snapshot.history, regressions: snapshot.regressions, update: null, snapshot: null };
  };
  const send = (viewer: StreamViewer, tick: Tick) => {
    const kind: FrameKind = viewer.needsSnapshot ? 'snapshot' : 'update';
    viewer.offer(kind === 'snapshot' ? snapshotOf(tick) : updateOf(tick), kind, tick.at);
    // After a snapshot (on connect, or once a viewer that fell behind catches up), the regressions holding.
    if (kind === 'snapshot' && !viewer.needsSnapshot) regressions.resync(viewer, tick.at, tick.regressions);
  };

  const tick = () => {
    seq += 1;
    current = null;
    if (viewers.size === 0) return;
    current = readState();
    for (const viewer of viewers) send(viewer, current);
  };
  const heartbeat = setInterval(() => viewers.forEach((viewer) => viewer.heartbeat()), limits.heartbeatMs);
  heartbeat.unref();

  // Frames go out as the engine publishes (each tick), at most `rateHz` a second: a frame shows a
  // step one engine tick after it arrived, not a tick of the stream's own later.
  let lastTickAt = Number.NEGATIVE_INFINITY;
  const unsubscribe = options.onSnapshot((snapshot) => {
    regressions.publish(snapshot);
    if (viewers.size === 0) {
      // The next viewer reads the state afresh: the one read while the last viewer was here is stale.
      current = null;
      return;
    }
    for (const event of snapshot.events) {
      const frame = encode(verdictFrame(event));
      for (const viewer of viewers) viewer.offer(frame, 'event', event.at);
    }
    if (snapshot.at - lastTickAt < tickMs * 0.9) return;
    lastTickAt = snapshot.at;
    tick();
  });

  app.get<{ Querystring: { events?: unknown } }>('/v1/stream', { websocket: true }, (socket, request) => {
    const log = options.log.child({ viewer: `${request.socket.remoteAddress}:${request.socket.remotePort}` });
    const viewer = new StreamViewer(socket, limits, log, (gone) => {
      viewers.delete(gone);
      regressions.viewers.delete(gone);
      options.onViewers?.(viewers.size);
    });
    viewers.add(viewer);
    options.onViewers?.(viewers.size);
    const events = optedIn(request.query.events);
    if (events.has('regression')) regressions.viewers.add(viewer);
    log.debug({ viewers: viewers.size, events: [...events] }, 'viewer connected');
    // Viewers that connect between two ticks share the state read for the first of them.
    current ??= readState();
    send(viewer, current);
  });

  const close = () => {
    clearInterval(heartbeat);
    unsubscribe?.();
    // A viewer that does not answer the close promptly must not hold up the sidecar's exit.
    for (const viewer of viewers) viewer.close(StreamCloseCode.goingAway, 'sidecar shutting down', SHUTDOWN_GRACE_MS);
  };
  app.addHook('preClose', (done) => {
    close();
    done();
  });

  return {
    get viewers() {
      return viewers.size;
    },
    close,
  };
}
