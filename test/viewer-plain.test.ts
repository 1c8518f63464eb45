import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { CLI, startSidecar, tempDir, waitFor } from './support/sidecar.js';
import { track } from './support/children.js';

/** `stepscope watch --plain`: one line per update, what logs and scripts read; against real sidecars and real hooks. */

const plain = findPython();

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Watcher {
  child: ChildProcess;
  lines: string[];
  stderr: () => string;
  waitForLine(predicate: (line: string) => boolean, timeoutMs?: number): Promise<string>;
}

function watch(...args: string[]): Watcher {
  const child = track(spawn(process.execPath, [CLI, 'watch', ...args], { stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
  cleanups.push(() => {
    child.kill('SIGKILL');
  });
  const lines: string[] = [];
  let stderr = '';
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    lines.push(...parts);
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return {
    child,
    lines,
    stderr: () => stderr,
    waitForLine: (predicate, timeoutMs = 20_000) =>
      waitFor(() => lines.find(predicate), timeoutMs, 50).catch((error: Error) => Promise.reject(new Error(`${error.message}; last lines:\n${lines.slice(-5).join('\n')}\nstderr: ${stderr}`))),
  };
}

/** A loop through the real hook until the test ends: `phases` as verdict_loop.py takes them. */
function loop(url: string, job: string, rank: number, worldSize: number, phases: string[]) {
  const pidFile = path.join(tempDir(), 'loop.pid');
  const run = runPython(plain.python!, fixture('verdict_loop.py'), ['--seconds', '50', ...phases, '--pid-file', pidFile], {
    STEPSCOPE_URL: url,
    STEPSCOPE_JOB: job,
    RANK: String(rank),
    LOCAL_RANK: '0',
    WORLD_SIZE: String(worldSize),
  });
  cleanups.push(async () => {
    try {
      if (existsSync(pidFile)) process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    } catch {
      // already gone
    }
    await run.catch(() => undefined);
  });
}

const STAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ /;

describe.skipIf(!plain.python)(`stepscope watch --plain${plain.python ? '' : ` (skipped: ${plain.why})`}`, () => {
  it('prints one line per update with the verdict, the step time split and the GPU, and a line per verdict change', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'sim']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const watcher = watch('--plain', `ws://127.0.0.1:${sidecar.port}`);
    await watcher.waitForLine((line) => line.includes('job=- status=waiting-for-a-job'));
    loop(sidecar.ingestUrl, 'plain', 0, 1, ['--data-ms', '9', '--compute-ms', '1']);

    const line = await watcher.waitForLine((l) => l.includes('verdict=input-bound'));
    expect(line).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ job=plain verdict=input-bound cause=\S+ steps=\d+ step_p50=\d+\.\d+ms step_p90=\d+\.\d+ms samples_s=[\d.]+ data=\d+% h2d=0% compute=\d+% other=\d+% limiters=input:\d+%:\w+ gpu0 util=95% sm=100% temp=62C power=138\/150W thr=- mem=14000\/23028MiB(?: fix=\S+)?(?: waste=\S+)?(?: cpu_others=\S+)?$/,
    );
    // The sidecar reads this machine's /proc: the busiest processes beside the job come after the GPUs.
    const withOthers = await watcher.waitForLine((l) => l.includes('job=plain') && l.includes(' cpu_others='));
    expect(withOthers).toMatch(/ cpu_others=\S*\(pid_\d+\)_\d+\.\d_cores/);
    expect(watcher.lines).toContainEqual(expect.stringMatching(/ event=verdict job=plain rank=- from=(-|warming-up) to=input-bound cause=\S+$/));
    // A line per frame, for as long as the frames come (how many a second is the stream's rate and this machine's load).
    const jobLines = () => watcher.lines.filter((l) => STAMP.test(l) && l.includes('job=plain')).length;
    const count = jobLines();
    await waitFor(() => jobLines() >= count + 3);
  });

  it('keeps going when the sidecar restarts: says it is reconnecting, then carries on with the resumed job', async () => {
    const out = tempDir();
    const first = await startSidecar(['--gpu-source', 'sim', '--out', out]);
    cleanups.push(() => first.stop('SIGKILL'));
    const watcher = watch('--plain', `ws://127.0.0.1:${first.port}`);
    loop(first.ingestUrl, 'restart', 0, 1, ['--data-ms', '1', '--compute-ms', '9']);
    await watcher.waitForLine((l) => l.includes('job=restart verdict=compute-bound'));

    await first.stop('SIGKILL');
    await watcher.waitForLine((l) => new RegExp(`source=ws://127\\.0\\.0\\.1:${first.port}/v1/stream:reconnecting source_error=\\S+ job=restart`).test(l));
    const second = await startSidecar(['--gpu-source', 'sim', '--out', out, '--port', String(first.port)]);
    cleanups.push(() => second.stop('SIGKILL'));
    // The job's line (a verdict event's line, which can come between, has no steps).
    const resumed = await watcher.waitForLine((l) => l.includes('job=restart') && l.includes(' steps=') && !l.includes('source=') && watcher.lines.indexOf(l) > watcher.lines.findIndex((x) => x.includes(':reconnecting')));
    // The journal brought the steps back, and the hook resent what the first sidecar had not acknowledged.
    expect(Number(/steps=(\d+)/.exec(resumed)![1])).toBeGreaterThan(20);
  });

  it('shows a job across two sidecars, one per node: ranks from both in one line', async () => {
    const nodeA = await startSidecar(['--gpu-source', 'sim']);
    const nodeB = await startSidecar(['--gpu-source', 'sim']);
    cleanups.push(() => nodeA.stop('SIGKILL'), () => nodeB.stop('SIGKILL'));
    loop(nodeA.ingestUrl, 'two-nodes', 0, 2, ['--data-ms', '1', '--compute-ms', '9']);
    loop(nodeB.ingestUrl, 'two-nodes', 1, 2, ['--data-ms', '9', '--compute-ms', '1']);
    const watcher = watch('--plain', `127.0.0.1:${nodeA.port}`, `ws://127.0.0.1:${nodeB.port}`);
    const line = await watcher.waitForLine((l) => /ranks=0:compute-bound,1:input-bound/.test(l) && /straggler=rank1/.test(l) && l.includes('verdict=input-bound'));
    expect(line).toContain('job=two-nodes');
    expect(line).toContain(`127.0.0.1:${nodeA.port}/gpu0 util=95%`);
    expect(line).toContain(`127.0.0.1:${nodeB.port}/gpu0 util=95%`);
  });

  it('sends the token as Authorization: Bearer, and reports a sidecar that refuses the stream', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0, verifyClient: ({ req }, done) => (seen.push(req.headers), done(false, 401)) });
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    await new Promise((resolve) => server.once('listening', resolve));
    const port = (server.address() as { port: number }).port;
    const watcher = watch('--plain', '--token', 's3cret', `ws://127.0.0.1:${port}`);
    await watcher.waitForLine((l) => l.includes(`source=ws://127.0.0.1:${port}/v1/stream:reconnecting source_error=HTTP_401_(check_--token)`));
    expect(seen[0]).toMatchObject({ authorization: 'Bearer s3cret' });
  });

  it('refuses an address that is not a sidecar address', async () => {
    const watcher = watch('--plain', 'ftp://example');
    const exit = await new Promise<number | null>((resolve) => watcher.child.once('exit', resolve));
    expect(exit).toBe(1);
    expect(watcher.stderr()).toBe('stepscope: ftp://example: not a ws:// or http:// address\n');
  });
});
