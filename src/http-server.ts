import websocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyServerFactory } from 'fastify';
import type { Logger } from 'pino';
import { ConnectionSlots, HookConnection } from './ingest/connection.js';
import { Flow } from './ingest/flow.js';
import type { SourceStatus } from './counters/status.js';
import type { EngineSnapshot } from './engine/snapshot.js';
import type { Ingest } from './ingest/ingest.js';
import type { JournalHealth } from './protocol/state.js';
import { CloseCode } from './protocol/messages.js';
import { registerMetrics } from './outputs/metrics.js';
import { registerStream, type StreamOptions } from './outputs/stream.js';
import { sidecarState } from './outputs/state.js';
import { bearerMatches } from './auth.js';
import { VERSION } from './version.js';
import { sidecarNow } from './model/clock.js';

export interface ServerOptions {
  ingest: Ingest;
  /** The engine's latest snapshot: everything served is read from it. */
  snapshot: () => EngineSnapshot;
  /** A snapshot that shows everything applied before the call (waits for the next tick if need be). */
  fresh: () => Promise<EngineSnapshot>;
  /** Called with each new snapshot. */
  onSnapshot: StreamOptions['onSnapshot'];
  journal: () => JournalHealth | null;
  log: Logger;
  maxFrameBytes: number;
  windowMs: number;
  sources: () => SourceStatus;
  now?: () => number;
  /** How far the host's wall clock has stepped under `now`, ms, for /metrics (absent: 0). */
  hostStepMs?: () => number;
  stream?: Pick<StreamOptions, 'rateHz' | 'limits' | 'onViewers'>;
  /** Whether the sidecar is ready for hooks once listening (its GPU counter source chosen, its journal writing, not stopping). */
  ready?: () => { ready: boolean; reason: string | null };
  /** What works less than configured, in words, for /readyz's `detail` (not a reason to be unready). */
  detail?: () => string[];
  /** When set, every request and websocket upgrade must carry `Authorization: Bearer <token>`. */
  token?: string;
  /** The server to serve on (one listening already: early-server.ts); default a new one, for app.listen. */
  serverFactory?: FastifyServerFactory;
}


/** A URL as logged: its query is dropped, since a careless client may put a token there (`?token=`). */
export function withoutQuery(url: string): string {
  const at = url.indexOf('?');
  return at === -1 ? url : `${url.slice(0, at)}?[redacted]`;
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const { ingest, log } = options;
  const now = options.now ?? sidecarNow;
  const startedAt = now();
  const hooks = new Set<HookConnection>();
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    ...(options.serverFactory ? { serverFactory: options.serverFactory } : {}),
  });
  await app.register(websocket, {
    options: { maxPayload: options.maxFrameBytes },
    // The default closes with 1001 too, but then waits on every socket; shut down promptly instead.
    preClose: (done) => {
      for (const hook of hooks) hook.close(CloseCode.goingAway, 'sidecar shutting down');
      done();
    },
  });

  const token = options.token;
  if (token) {
    // onRequest runs before routing and before a websocket upgrade: nothing is done for a stranger.
    // Added after the websocket plugin, whose own onRequest hook marks upgrades so that it closes
    // a refused upgrade's socket once the 401 is sent.
    app.addHook('onRequest', async (request, reply) => {
      if (bearerMatches(request.headers.authorization, token)) return;
      ingest.limited('unauthorized');
      log.warn({ remote: request.socket.remoteAddress, url: withoutQuery(request.url) }, 'request without the right token refused');
      await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthorized: send Authorization: Bearer <token>' });
    });
  }
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    // Not ready while the journal cannot write: hooks would only be refused, so traffic goes elsewhere.
    const own = options.ready?.() ?? { ready: true, reason: null };
    const journal = options.journal();
    const reason = !own.ready ? own.reason : journal && !journal.ok ? journal.reason : app.server.listening ? null : 'not listening yet';
    // What works less than configured without making the sidecar unready (an unusable GPU source).
    const detail = options.detail?.() ?? [];
    const extra = detail.length > 0 ? { detail } : {};
    return reply.code(reason === null ? 200 : 503).send(reason === null ? { status: 'ready', ...extra } : { status: 'not ready', reason, ...extra });
  });

  const state = (snapshot = options.snapshot()) =>
    sidecarState({
      snapshot,
      ingest: ingest.stats,
      sources: options.sources(),
      journal: options.journal(),
      version: VERSION,
      startedAt,
      windowMs: options.windowMs,
    });
  // Read-your-writes: a client that was acknowledged sees its steps in the state it asks for next.
  app.get('/v1/state', async () => state(await options.fresh()));
  // Hooks batch less often while no viewer watches (issue 24, target 5): each is told when that changes.
  let watched = false;
  const onViewers = (count: number) => {
    options.stream?.onViewers?.(count);
    watched = count > 0;
    for (const hook of hooks) hook.watchChanged();
  };
  const stream = registerStream(app, { ...options.stream, onViewers, state, snapshot: options.snapshot, onSnapshot: options.onSnapshot, log });
  registerMetrics(app, {
    snapshot: options.snapshot,
    ingest: ingest.stats,
    sources: options.sources,
    journal: options.journal,
    version: VERSION,
    viewers: () => stream.viewers,
    hostStepMs: options.hostStepMs ?? (() => 0),
  });

  const slots = new ConnectionSlots(ingest.limits.maxPending);
  const flow = new Flow(ingest.limits);
  app.get('/v1/ingest', { websocket: true }, (socket, request) => {
    const hook = new HookConnection(socket, ingest, log, `${request.socket.remoteAddress}:${request.socket.remotePort}`, slots, flow, () => watched);
    hooks.add(hook);
    socket.once('close', () => hooks.delete(hook));
  });

  return app;
}
