import websocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { HookConnection } from './ingest/connection.js';
import type { Analyst } from './analyst.js';
import type { Ingest } from './ingest/ingest.js';
import { CloseCode } from './protocol/messages.js';
import { registerMetrics, type StepDurationHistogram } from './outputs/metrics.js';
import { registerStream, type StreamOptions } from './outputs/stream.js';
import { streamHistory } from './outputs/stream-history.js';
import { sidecarState, type SourceStatus } from './state.js';
import { bearerMatches } from './auth.js';

export interface ServerOptions {
  ingest: Ingest;
  analyst: Analyst;
  log: Logger;
  maxFrameBytes: number;
  windowMs: number;
  sources: () => SourceStatus;
  now?: () => number;
  stream?: Pick<StreamOptions, 'rateHz' | 'limits' | 'verdictEvents'>;
  /** Fed with every step by the StepTimedJobStore of `ingest.world`; exposed on GET /metrics. */
  stepDurations: StepDurationHistogram;
  /** Whether the sidecar is ready for hooks once listening (its GPU counter source chosen, not stopping). */
  ready?: () => boolean;
  /** When set, every request and websocket upgrade must carry `Authorization: Bearer <token>`. */
  token?: string;
}

export const VERSION = '0.1.0';

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const { ingest, log } = options;
  const now = options.now ?? Date.now;
  const startedAt = now();
  const hooks = new Set<HookConnection>();
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
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
      log.warn({ remote: request.socket.remoteAddress, url: request.url }, 'request without the right token refused');
      await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthorized: send Authorization: Bearer <token>' });
    });
  }
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const ready = app.server.listening && (options.ready?.() ?? true);
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' });
  });

  const stateAt = (at: number) =>
    sidecarState({
      world: ingest.world,
      analyst: options.analyst,
      ingest: ingest.stats,
      sources: options.sources(),
      version: VERSION,
      startedAt,
      at,
      windowMs: options.windowMs,
    });
  app.get('/v1/state', async () => stateAt(now()));
  const stream = registerStream(app, { ...options.stream, state: stateAt, history: (from, to, sliceMs) => streamHistory(ingest.world, from, to, sliceMs), log, now });
  registerMetrics(app, {
    world: ingest.world,
    analyst: options.analyst,
    ingest: ingest.stats,
    sources: options.sources,
    stepDurations: options.stepDurations,
    windowMs: options.windowMs,
    version: VERSION,
    viewers: () => stream.viewers,
    now,
  });

  app.get('/v1/ingest', { websocket: true }, (socket, request) => {
    const hook = new HookConnection(socket, ingest, log, `${request.socket.remoteAddress}:${request.socket.remotePort}`);
    hooks.add(hook);
    socket.once('close', () => hooks.delete(hook));
  });

  return app;
}
