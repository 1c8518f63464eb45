import http from 'node:http';
import type { Duplex } from 'node:stream';
import { bearerMatches } from './auth.js';

/**
 * The sidecar's port from its first moment, while it replays its journal (which can take a while)
 * and chooses its GPU source: `/healthz` 200 (the process is alive), `/readyz` and everything else
 * 503 with why, hooks' websocket upgrades 503 (they buffer and reconnect with backoff), as
 * Prometheus answers while it replays its WAL. Then the real server takes the same socket over.
 */

export interface EarlyServer {
  server: http.Server;
  port: number;
  /** What the early answers say the sidecar is doing (`recovering: replaying the journal`, …). */
  doing: string;
  /** Hands requests to `handler` from now on; upgrades go to whoever listens for them after this (the websocket plugin). */
  handOver(handler: http.RequestListener): void;
  close(): Promise<void>;
}

const json = (response: http.ServerResponse, code: number, body: unknown, headers: http.OutgoingHttpHeaders = {}) => {
  response.writeHead(code, { 'content-type': 'application/json; charset=utf-8', ...headers });
  response.end(JSON.stringify(body));
};

export async function listenEarly(host: string, port: number, token: string | undefined): Promise<EarlyServer> {
  const server = http.createServer();
  const early: EarlyServer = {
    server,
    port,
    doing: 'recovering: replaying the journal',
    handOver(handler) {
      server.off('request', answer);
      server.off('upgrade', refuseUpgrade);
      server.on('request', handler);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const answer = (request: http.IncomingMessage, response: http.ServerResponse) => {
    if (token && !bearerMatches(request.headers.authorization, token)) {
      json(response, 401, { error: 'unauthorized: send Authorization: Bearer <token>' }, { 'www-authenticate': 'Bearer' });
      return;
    }
    const route = (request.url ?? '').split('?')[0];
    if (route === '/healthz') json(response, 200, { status: 'ok' });
    else if (route === '/readyz') json(response, 503, { status: 'not ready', reason: early.doing });
    else json(response, 503, { error: `${early.doing}; try again shortly` }, { 'retry-after': '1' });
  };
  const refuseUpgrade = (_request: http.IncomingMessage, socket: Duplex) => {
    socket.on('error', () => undefined);
    socket.end(`HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };
  server.on('request', answer);
  server.on('upgrade', refuseUpgrade);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => (server.off('error', reject), resolve()));
  });
  const address = server.address();
  early.port = typeof address === 'object' && address ? address.port : port;
  return early;
}
