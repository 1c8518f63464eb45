import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { emptyGpuSample } from '../src/counters/types.js';
import { Engine } from '../src/engine/engine.js';
import { mdProse, mdText } from '../src/outputs/markdown.js';
import { sidecarState } from '../src/outputs/state.js';
import { historyTail } from '../src/outputs/stream.js';
import { inertJson, inertLine, inertStrings, inertText } from '../src/protocol/terminal-text.js';
import { track } from './support/children.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello as entryHello, rows, T0 } from './support/entries.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { CLI, ROOT, startSidecar, tempDir, waitFor } from './support/sidecar.js';

/**
 * Remote text is inert wherever it is printed: a sidecar (or anything answering as one: ws:// has
 * no TLS) that names its job, host or GPU with terminal escape sequences gets them shown escaped by
 * `watch --plain` and the full-screen viewer, never obeyed; and the Markdown summary shows raw HTML
 * and Markdown in names as text.
 */

const cleanups = cleanupList();

/** A window title, a screen clear and a C1 CSI colour: what a spoofed sidecar would send. */
const JOB = 'evil\x1b]0;pwned\x07\x1b[2J\x9b31mjob';
const HOST = 'host\x1b[5m';
const GPU = 'GPU\x1b]2;gpu-title\x07';
/** Anything a terminal would act on: C0 but newline, DEL, C1. */
const RAW_CONTROL = /[\x00-\x09\x0b-\x1f\x7f-\x9f]/;

/** The frame a sidecar holding that job would send, as JSON text. */
function hostileSnapshot(): string {
  const engine = new Engine();
  engine.apply({ t: 'start', at: T0, config: { windowMs: 2_000, holdMs: 500, endGraceMs: 10_000 } });
  engine.apply({ t: 'source', at: T0, gpu: 'nvidia-smi', reason: 'test' });
  const helloEntry = entryHello('s');
  if (helloEntry.t !== 'hello') throw new Error('not a hello');
  engine.apply({ ...helloEntry, hello: { ...helloEntry.hello, job: JOB, host: HOST, env: { gpu_index: 0 } } });
  engine.apply({ t: 'connect', at: T0, session: 's' });
  engine.apply({ t: 'steps', at: T0 + 1_000, session: 's', dropped: 0, rows: rows(1, 40, 0, { data: 5, compute: 20 }) });
  const gpu = { ...emptyGpuSample(T0 + 1_000, 0), uuid: 'GPU-0', name: GPU, utilGpu: 97, smClockMHz: 1500, smClockMaxMHz: 1500 };
  engine.apply({ t: 'gpu', at: T0 + 1_000, samples: [gpu] });
  engine.apply({ t: 'tick', at: T0 + 1_250 });
  const snapshot = engine.snapshot();
  const state = sidecarState({
    snapshot,
    ingest: { connections: 1, connectionsTotal: 1, frames: 0, records: 40, duplicates: 0, rejected: {}, limited: {}, implausible: {} },
    sources: { gpu: { source: 'nvidia-smi', reason: 'test', health: null }, host: null, collectors: [] },
    journal: null,
    version: 'test',
    startedAt: T0,
    windowMs: 2_000,
  });
  return JSON.stringify({ v: 1, type: 'snapshot', seq: 1, at: new Date(snapshot.at).toISOString(), rate_hz: 4, state, history: historyTail(snapshot.history, snapshot.at, null) });
}

/** A stand-in sidecar that sends that frame to every viewer, again every 250 ms. */
async function spoofedSidecar(): Promise<number> {
  const frame = hostileSnapshot();
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  server.on('connection', (socket) => {
    socket.send(frame);
    const timer = setInterval(() => socket.send(frame), 250);
    socket.once('close', () => clearInterval(timer));
  });
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  await new Promise((resolve) => server.once('listening', resolve));
  return (server.address() as { port: number }).port;
}

describe('the terminal sanitizer', () => {
  it('shows every control character escaped, keeps text and (where asked) line breaks', () => {
    expect(inertLine(JOB)).toBe('evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31mjob');
    expect(inertText('a\nb\tc\rd')).toBe('a\nb\tc\\x0dd');
    expect(inertLine('a\nb')).toBe('a\\x0ab');
    expect(inertStrings({ [JOB]: [HOST, 1, null, { name: GPU }] })).toEqual({ [inertLine(JOB)]: [inertLine(HOST), 1, null, { name: inertLine(GPU) }] });
    expect(JSON.parse(inertJson(JSON.stringify({ JOB })))).toEqual({ JOB });
    expect(inertJson(JSON.stringify({ JOB }))).not.toMatch(RAW_CONTROL);
    expect(inertLine('ordinary-name_1 ✓ 🚀')).toBe('ordinary-name_1 ✓ 🚀');
  });
});

describe('stepscope watch against a spoofed sidecar', () => {
  it('--plain prints its names escaped, never the sequences themselves', async () => {
    const port = await spoofedSidecar();
    const viewer = track(spawn(process.execPath, [CLI, 'watch', '--plain', `ws://127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
    cleanups.push(() => void viewer.kill('SIGKILL'));
    let out = '';
    viewer.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    await waitFor(() => (out.includes('gpu0') ? out : null), 15_000);
    expect(out).not.toMatch(RAW_CONTROL);
    expect(out).toContain('job=evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31mjob');
  });

  const tmux = spawnSync('tmux', ['-V']).status === 0;
  it.skipIf(!tmux)(`full-screen shows its names escaped: the terminal's title and screen stay the viewer's${tmux ? '' : ' (skipped: no tmux)'}`, async () => {
    const port = await spoofedSidecar();
    const socket = `stepscope-hostile-${process.pid}`;
    const run = (...args: string[]) => spawnSync('tmux', ['-L', socket, '-f', '/dev/null', ...args], { encoding: 'utf8', timeout: 10_000 }).stdout;
    cleanups.push(() => void spawnSync('tmux', ['-L', socket, 'kill-server'], { stdio: 'ignore' }));
    run('new-session', '-d', '-x', '160', '-y', '40', '-s', 'viewer', '-c', ROOT, `node ${CLI} watch ws://127.0.0.1:${port}; sleep 60`);
    const screen = await waitFor(() => {
      const text = run('capture-pane', '-p', '-t', 'viewer');
      return text.includes('\\x1b]0;pwned') && text.includes('gpu-title') ? text : null;
    }, 20_000, 200);
    expect(screen).toContain('evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31mjob');
    expect(run('display-message', '-p', '-t', 'viewer', '#{pane_title}')).not.toMatch(/pwned|gpu-title/);
  });
});

describe('Markdown of names', () => {
  it('escapes HTML and Markdown in names, keeps the code spans of the text that quotes them', () => {
    expect(mdText('<img src=x onerror=alert(1)> **bold** [a](javascript:x) | `c`')).toBe('&lt;img src=x onerror=alert(1)&gt; \\*\\*bold\\*\\* \\[a\\](javascript:x) \\| \\`c\\`');
    expect(mdProse('Set `num_workers=8` for <b>job</b>')).toBe('Set `num_workers=8` for &lt;b&gt;job&lt;/b&gt;');
    expect(mdProse('odd ` tick')).toBe('odd \\` tick');
  });

  it('summary.md of a real run shows a hostile job, host and GPU name as text', async () => {
    const out = tempDir();
    const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out, '--end-grace', '1']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const job = 'x<img src=x onerror=alert(1)>**[a](javascript:alert(1))**';
    const hook = await TestHook.connect(sidecar.ingestUrl);
    cleanups.push(() => hook.close());
    hook.send(hello({ job, host: '<script>alert(1)</script>|', env: { gpu_name: '<b>H100</b>', torch: '2.5 <i>' }, clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: 2_000_000_000 } }));
    await hook.next((m) => m.type === 'welcome');
    hook.send(steps(range(1, 60).map((seq) => row({ seq, durMs: 20, dataMs: 2 }))));
    await hook.next((m) => m.type === 'ack' && m.ack >= 60);
    hook.send({ v: 1, type: 'end', reason: 'done' });
    const md = await waitFor(() => {
      const files = spawnSync('ls', [out], { encoding: 'utf8' }).stdout.split('\n').filter((name) => name.startsWith('summary') && name.endsWith('.md'));
      return files[0] ? readFileSync(path.join(out, files[0]), 'utf8') : null;
    }, 15_000);
    expect(md).not.toMatch(/<(img|script|b|i)\b/);
    // A link needs an unescaped `](`.
    expect(md).not.toMatch(/[^\\]\]\(javascript:/);
    expect(md.split('\n')[0]).toBe('# stepscope: x&lt;img src=x onerror=alert(1)&gt;\\*\\*\\[a\\](javascript:alert(1))\\*\\*');
    expect(md).toContain('&lt;script&gt;alert(1)&lt;/script&gt;\\|');
    expect(md).toContain('gpu\\_name &lt;b&gt;H100&lt;/b&gt;');
  });
});
