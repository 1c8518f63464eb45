import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { VerdictEvent } from '../analysis/job-analysis.js';
import { STREAM_VERSION, StreamCloseCode, type SidecarState, type SnapshotFrame, type StreamHistory, type UpdateFrame, type VerdictFrame } from './stream-frames.js';
import { DEFAULT_STREAM_LIMITS, StreamViewer, type FrameKind, type StreamLimits } from './stream-viewer.js';

export const DEFAULT_STREAM_RATE_HZ = 4;
const HISTORY_MS = 300_000;
const SLICE_MS = 1_000;
const SHUTDOWN_GRACE_MS = 1_000;

export type Subscribe<T> = (listener: (value: T) => void) => () => void;

export interface StreamOptions {
  /** The whole state at a time: the body of GET /v1/state. */
  state: (at: number) => SidecarState;
  /** Sparkline figures over [from, to) in slices of `sliceMs`. */
  history: (from: number, to: number, sliceMs: number) => StreamHistory;
  /** Verdict changes, as the Analyst finds them. */
  verdictEvents?: Subscribe<VerdictEvent[]>;
  rateHz?: number;
  limits?: Partial<StreamLimits>;
  log: Logger;
  now?: () => number;
}

export interface StreamHub {
  readonly viewers: number;
  close(): void;
}

const encode = (frame: SnapshotFrame | UpdateFrame | VerdictFrame) => Buffer.from(JSON.stringify(frame));

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
  const now = options.now ?? Date.now;
  const rateHz = options.rateHz ?? DEFAULT_STREAM_RATE_HZ;
  const tickMs = 1000 / rateHz;
  const limits: StreamLimits = { ...DEFAULT_STREAM_LIMITS, ...options.limits };
  // An update's history covers the slices a tick can have touched since the previous one.
  const tailSlices = Math.ceil(tickMs / SLICE_MS) + 2;
  const viewers = new Set<StreamViewer>();
  let seq = 0;
  /** The state read at a tick, and its frames once encoded. */
  type Tick = { at: number; state: SidecarState; update: Buffer | null; snapshot: Buffer | null };
  let current: Tick | null = null;

  const sliceStart = (at: number) => Math.floor(at / SLICE_MS) * SLICE_MS;
  const snapshotOf = (tick: Tick) =>
    (tick.snapshot ??= encode({
      v: STREAM_VERSION,
      type: 'snapshot',
      seq,
      at: new Date(tick.at).toISOString(),
      rate_hz: rateHz,
      state: tick.state,
      history: options.history(sliceStart(tick.at) - HISTORY_MS + SLICE_MS, tick.at, SLICE_MS),
    }));
  const updateOf = (tick: Tick) =>
    (tick.update ??= encode({
      v: STREAM_VERSION,
      type: 'update',
      seq,
      at: new Date(tick.at).toISOString(),
      state: tick.state,
      history: options.history(sliceStart(tick.at) - (tailSlices - 1) * SLICE_MS, tick.at, SLICE_MS),
    }));
  const readState = (): Tick => {
    const at = now();
    return { at, state: options.state(at), update: null, snapshot: null };
  };
  const send = (viewer: StreamViewer, tick: Tick) => {
    const kind: FrameKind = viewer.needsSnapshot ? 'snapshot' : 'update';
    viewer.offer(kind === 'snapshot' ? snapshotOf(tick) : updateOf(tick), kind, tick.at);
  };

  const tick = () => {
    seq += 1;
    current = null;
    if (viewers.size === 0) return;
    current = readState();
    for (const viewer of viewers) send(viewer, current);
  };
  const ticker = setInterval(tick, tickMs);
  ticker.unref();
  const heartbeat = setInterval(() => viewers.forEach((viewer) => viewer.heartbeat()), limits.heartbeatMs);
  heartbeat.unref();

  const unsubscribe = options.verdictEvents?.((events) => {
    if (viewers.size === 0) return;
    for (const event of events) {
      const frame = encode(verdictFrame(event));
      for (const viewer of viewers) viewer.offer(frame, 'event', event.at);
    }
  });

  app.get('/v1/stream', { websocket: true }, (socket, request) => {
    const log = options.log.child({ viewer: `${request.socket.remoteAddress}:${request.socket.remotePort}` });
    const viewer = new StreamViewer(socket, limits, log, (gone) => viewers.delete(gone));
    viewers.add(viewer);
    log.debug({ viewers: viewers.size }, 'viewer connected');
    // Viewers that connect between two ticks share the state read for the first of them.
    current ??= readState();
    send(viewer, current);
  });

  const close = () => {
    clearInterval(ticker);
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
