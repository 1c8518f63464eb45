// The real sidecar for the benchmarks (scripts/bench.mjs, scripts/accuracy.mjs): `serve` on a free
// port, resolved once it is ready.
import { spawn } from 'node:child_process';
import { SIDECAR_MALLOC_ENV, SIDECAR_NODE_FLAGS } from '../dist/ingest/node-flags.js';

/** Node's flags for the sidecar: SIDECAR_NODE_ARGS where set (empty for none), else those every start path gives it. */
const nodeArgs = process.env.SIDECAR_NODE_ARGS === undefined ? SIDECAR_NODE_FLAGS : process.env.SIDECAR_NODE_ARGS.split(' ').filter(Boolean);

/** glibc's settings for the sidecar as every start path gives them; SIDECAR_MALLOC_ENV=none for glibc's defaults. */
const mallocEnv = process.env.SIDECAR_MALLOC_ENV === 'none' ? {} : SIDECAR_MALLOC_ENV;

/**
 * Starts `node <node args> <cli> serve --port 0 … args`; resolves with the child and its port once it
 * is ready. Its environment has glibc's settings above, unless `env` sets them.
 */
export async function startSidecar(cli, args, { env = process.env, detached = false } = {}) {
  const child = spawn(process.execPath, [...nodeArgs, cli, 'serve', '--port', '0', '--log-level', 'info', ...args], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...mallocEnv, ...env }, detached });
  const port = await new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      buffered += chunk;
      const match = buffered.match(/"port":(\d+)/);
      if (match) resolve(Number(match[1]));
      // Its log goes on; only the start of it is read.
      if (buffered.length > 1 << 16) buffered = buffered.slice(-4096);
    });
    child.once('exit', (code) => reject(new Error(`the sidecar exited ${code}`)));
  });
  await untilReady(port);
  return { child, port };
}

/** Resolves once the sidecar on `port` says it is ready: it listens early and says 503 until its journal is replayed and its sources are up. `init`: fetch's, e.g. a token's header. */
export async function untilReady(port, init = {}) {
  while (!(await fetch(`http://127.0.0.1:${port}/readyz`, init).then((response) => response.ok, () => false))) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
