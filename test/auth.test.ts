import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { bearerMatches, isLoopback } from '../src/auth.js';
import { track } from './support/children.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, TestHook } from './support/hook-client.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { capturedLogger } from './support/logger.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { CLI, startSidecar, waitFor } from './support/sidecar.js';

const plain = findPython();
const TOKEN = 'f3a9c1d27b6e4e0a';
const cleanups = cleanupList();

/** `stepscope serve --host 0.0.0.0` as a process, which should refuse to start: its exit status and stderr. */
function serveBeyondLoopback(env: NodeJS.ProcessEnv): Promise<{ status: number | null; stderr: string }> {
  const child = track(spawn(process.execPath, [CLI, 'serve', '--host', '0.0.0.0', '--port', '0', '--gpu-source', 'none'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] }), 'serve beyond loopback');
  // Should it start after all, it is killed after the test rather than left running.
  cleanups.push(() => void child.kill('SIGKILL'));
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stderr }));
  });
}

function upgradeStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve) => {
    const socket = new WebSocket(url, { headers });
    socket.once('open', () => {
      socket.close();
      resolve(101);
    });
    // ws leaves the refused request open to whoever listens for this: abort it, or the server's close waits on it.
    socket.once('unexpected-response', (_request, response) => {
      socket.terminate();
      resolve(response.statusCode ?? 0);
    });
    socket.once('error', () => undefined);
  });
}

describe('the token rules', () => {
  it('with a token, refuses every request and upgrade without it (401, nothing done) and accepts them with it', async () => {
    const captured = capturedLogger();
    const side = await inProcess({ token: TOKEN, log: captured.log });
    cleanups.push(() => side.app.close());
    const sidecar = await listen(side);
    const bearer = { authorization: `Bearer ${TOKEN}` };
    for (const path of ['/healthz', '/readyz', '/v1/state', '/metrics']) {
      expect((await fetch(`${sidecar.http}${path}`)).status, path).toBe(401);
      expect((await fetch(`${sidecar.http}${path}`, { headers: { authorization: 'Bearer wrong' } })).status, path).toBe(401);
      // A state read waits for the tick after anything new: the test ticks while it waits.
      expect((await side.whileTicking(fetch(`${sidecar.http}${path}`, { headers: bearer }))).status, path).toBe(200);
    }
    expect(await upgradeStatus(sidecar.ingestUrl)).toBe(401);
    expect(await upgradeStatus(sidecar.streamUrl)).toBe(401);
    const hook = await TestHook.connect(sidecar.ingestUrl, bearer);
    cleanups.push(() => hook.close());
    hook.send(hello());
    expect((await hook.next((m) => m.type === 'welcome')).ack).toBe(0);
    hook.close();
    const state = (await (await side.whileTicking(fetch(`${sidecar.http}/v1/state`, { headers: bearer }))).json()) as any;
    expect(state.ingest.limited.unauthorized).toBe(10);
    expect(state.jobs).toHaveLength(1);
    // Every refusal was logged, and no line carries the token.
    expect(captured.lines.filter((line) => line.msg === 'request without the right token refused')).toHaveLength(10);
    expect(captured.lines.some((line) => JSON.stringify(line).includes(TOKEN))).toBe(false);
  });

  // On the real process: --token reaches the server, and the real hook presents STEPSCOPE_TOKEN.
  it.skipIf(!plain.python)('the hook sends STEPSCOPE_TOKEN, so its steps get in', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--token', TOKEN]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const env = { STEPSCOPE_URL: sidecar.ingestUrl, STEPSCOPE_JOB: 'with-token', STEPSCOPE_TOKEN: TOKEN };
    const run = await runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '50'], env);
    expect(run.result).toMatchObject({ steps: 50, closed: true });
    const state = await waitFor(async () => {
      const s = (await (await fetch(`${sidecar.http}/v1/state`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as any;
      return s.jobs[0]?.steps === 50 ? s : null;
    });
    expect(state.jobs[0].job).toBe('with-token');
    // Without the token, the real sidecar refuses too.
    expect((await fetch(`${sidecar.http}/v1/state`)).status).toBe(401);
    expect(sidecar.logs.some((line) => JSON.stringify(line).includes(TOKEN))).toBe(false);
    expect(await sidecar.stop()).toEqual({ code: 0, signal: null });
  });

  it('refuses at start to listen beyond loopback without a token, with a one-line error', async () => {
    const run = await serveBeyondLoopback({ STEPSCOPE_TOKEN: '' });
    expect(run.status).toBe(1);
    expect(run.stderr.trim().split('\n')).toEqual([
      'stepscope: --host 0.0.0.0 is reachable from other machines: give --token (or STEPSCOPE_TOKEN), or --insecure to run without one',
    ]);
  });

  it('reads STEPSCOPE_INSECURE as a boolean: "false" keeps the refusal, nonsense is an error', async () => {
    const serve = (value: string) => serveBeyondLoopback({ STEPSCOPE_TOKEN: '', STEPSCOPE_INSECURE: value });
    // Both at once: each is a whole CLI start, which is most of this test's time.
    const [no, nonsense] = await Promise.all([serve('false'), serve('maybe')]);
    expect(no.status).toBe(1);
    expect(no.stderr).toMatch(/reachable from other machines/);
    expect(nonsense.status).toBe(1);
    expect(nonsense.stderr.trim()).toBe('stepscope: STEPSCOPE_INSECURE=maybe is invalid: use true or false');
  });

  it('listens beyond loopback with --insecure, and says so in the log', async () => {
    const sidecar = await startSidecar(['--host', '0.0.0.0', '--insecure', '--gpu-source', 'none']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const warning = await sidecar.waitForLog((line) => line.level === 40 && /without a token/.test(line.msg));
    expect(warning.host).toBe('0.0.0.0');
    expect((await fetch(`${sidecar.http}/healthz`)).status).toBe(200);
    expect(await sidecar.stop()).toEqual({ code: 0, signal: null });
  });

  it('tells loopback from the rest, and compares tokens exactly', () => {
    for (const host of ['127.0.0.1', '127.0.0.53', 'localhost', '::1', '[::1]']) expect(isLoopback(host), host).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.7', '192.168.1.2', 'node-1', '128.0.0.1']) expect(isLoopback(host), host).toBe(false);
    expect(bearerMatches(`Bearer ${TOKEN}`, TOKEN)).toBe(true);
    expect(bearerMatches(`Bearer ${TOKEN}x`, TOKEN)).toBe(false);
    expect(bearerMatches(`bearer ${TOKEN}`, TOKEN)).toBe(false);
    expect(bearerMatches(undefined, TOKEN)).toBe(false);
  });
});
