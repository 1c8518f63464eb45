import { createServer } from 'node:net';
import type { InProcess } from './in-process.js';

export interface Listening {
  port: number;
  http: string;
  ingestUrl: string;
  streamUrl: string;
}

/**
 * Has the in-process sidecar listen on a free loopback port, so real websockets (a TestHook, a
 * viewer, a Python hook) can reach it. The caller closes it (`side.app.close()`).
 */
export async function listen(side: Pick<InProcess, 'app'>): Promise<Listening> {
  await side.app.listen({ host: '127.0.0.1', port: 0 });
  const address = side.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { port, http: `http://127.0.0.1:${port}`, ingestUrl: `ws://127.0.0.1:${port}/v1/ingest`, streamUrl: `ws://127.0.0.1:${port}/v1/stream` };
}

/** A loopback port free now, for a process the test starts to listen on (torch.distributed's MASTER_PORT). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
