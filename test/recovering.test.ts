import { spawn } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { encodeLine, segmentName } from '../src/journal/wal-files.js';
import { track } from './support/children.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, T0 } from './support/entries.js';
import { CLI, tempDir, waitFor } from './support/sidecar.js';

/**
 * `serve` listens from its first moment, while it replays its journal and starts: `/healthz` 200,
 * `/readyz` 503 with what it is doing, hooks' upgrades 503 (they buffer and reconnect), and once
 * it is ready the same port serves everything. Held in its start-up by an nvidia-smi that answers
 * only when the test says so, so that what it answers meanwhile is seen without a race.
 */

const cleanups = cleanupList();

interface Line {
  msg?: string;
  port?: number;
}

describe('serve while it recovers', () => {
  it('answers /healthz 200 and /readyz 503 from the start, refuses hooks with 503 until ready, then serves the replayed state', async () => {
    const out = tempDir();
    writeFileSync(path.join(out, segmentName(1)), encodeLine({ ...hello('a'), hello: { ...(hello('a') as { hello: object }).hello, job: 'before-restart' }, at: T0 }));
    const held = path.join(tempDir(), 'nvidia-smi');
    writeFileSync(held, `#!/bin/sh\nwhile [ ! -e "$0.release" ]; do sleep 0.02; done\nexit 1\n`);
    chmodSync(held, 0o755);
    const sidecar = track(spawn(process.execPath, [CLI, 'serve', '--port', '0', '--out', out, '--gpu-source', 'none', '--nvidia-smi', held, '--log-level', 'info'], { stdio: ['ignore', 'pipe', 'pipe'] }), 'sidecar');
    cleanups.push(() => void sidecar.kill('SIGKILL'));
    const lines: Line[] = [];
    let buffered = '';
    sidecar.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const part of parts) lines.push(JSON.parse(part) as Line);
    });
    const early = await waitFor(() => lines.find((line) => line.msg?.startsWith('recovering')), 15_000);
    const base = `http://127.0.0.1:${early.port}`;

    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const readyz = await fetch(`${base}/readyz`);
    expect(readyz.status).toBe(503);
    expect(((await readyz.json()) as { reason: string }).reason).toMatch(/^(recovering|starting): /);
    expect((await fetch(`${base}/v1/state`)).status).toBe(503);
    const upgrade = await new Promise<number>((resolve, reject) => {
      const socket = new WebSocket(`ws://127.0.0.1:${early.port}/v1/ingest`);
      socket.once('unexpected-response', (_request, response) => (resolve(response.statusCode ?? 0), socket.terminate()));
      socket.once('open', () => reject(new Error('a hook was let in before the sidecar was ready')));
      socket.once('error', () => undefined);
    });
    expect(upgrade).toBe(503);
    expect(lines.some((line) => line.msg === 'listening')).toBe(false);

    writeFileSync(`${held}.release`, '');
    const ready = await waitFor(() => lines.find((line) => line.msg === 'listening'), 15_000);
    expect(ready.port).toBe(early.port);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const state = (await (await fetch(`${base}/v1/state`)).json()) as { jobs: Array<{ job: string }> };
    expect(state.jobs.map((job) => job.job)).toEqual(['before-restart']);
  });
});
