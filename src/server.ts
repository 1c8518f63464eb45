import websocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { HookConnection } from './ingest/connection.js';
import type { Analyst } from './analyst.js';
import type { Ingest } from './ingest/ingest.js';
import { CloseCode } from './protocol/messages.js';
import { sidecarState, type SourceStatus } from './state.js';

export interface ServerOptions {
  ingest: Ingest;
  analyst: Analyst;
  log: Logger;
  maxFrameBytes: number;
  windowMs: number;
  sources: () => SourceStatus;
  now?: () => number;
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

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/v1/state', async () =>
    sidecarState({
      world: ingest.world,
      analyst: options.analyst,
      ingest: ingest.stats,
      sources: options.sources(),
      version: VERSION,
      startedAt,
      at: now(),
      windowMs: options.windowMs,
    }),
  );

  app.get('/v1/ingest', { websocket: true }, (socket, request) => {
    const hook = new HookConnection(socket, ingest, log, `${request.socket.remoteAddress}:${request.socket.remotePort}`);
    hooks.add(hook);
    socket.once('close', () => hooks.delete(hook));
  });

  return app;
}
