import { readFileSync } from 'node:fs';
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

/**
 * A port free now on every address, for a process the test starts to listen on (torch.distributed's
 * MASTER_PORT, which binds 0.0.0.0 and ::). Drawn below the kernel's ephemeral range: a port the
 * kernel hands out (listen(0), or the local end of any outgoing connection, of which parallel tests
 * make many) could be taken again between this check and the process's bind, and CI once saw gloo's
 * store fail so with "Address already in use".
 */
export async function freePort(): Promise<number> {
  const [low, high] = ephemeralRange();
  // The larger stretch outside the ephemeral range, past the well-known and registered-by-habit ports.
  const [from, to] = low - 20_000 >= 65_535 - high ? [20_000, low - 1] : [high + 1, 65_535];
  if (to < from) throw new Error(`the ephemeral range ${low}-${high} leaves no port above 20000`);
  for (let tries = 0; tries < 200; tries++) {
    const port = from + Math.floor(Math.random() * (to - from + 1));
    if (handedOut.has(port)) continue;
    if (await bindable(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free port in ${from}-${to} after 200 tries`);
}

/** Ports this test process has given out already: two tests in one file never share one. */
const handedOut = new Set<number>();

/** The kernel's ephemeral port range (Linux's default where it cannot be read). */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high)) return [low!, high!];
  } catch {
    // not Linux: its default below
  }
  return [32_768, 60_999];
}

/** Whether `port` can be listened on at every IPv4 address now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '0.0.0.0', () => server.close(() => resolve(true)));
  });
}
