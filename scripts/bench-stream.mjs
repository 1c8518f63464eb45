#!/usr/bin/env node
// Step end → viewer update latency on loopback, through the real sidecar, and what an idle viewer costs.
//
//   node scripts/bench-stream.mjs [--seconds 20] [--viewers 1] [--rate <its default>] [--steps-per-s 50] [--idle-seconds 10]
//                                 [--hook script|python] [--ranks 1] [--batch-interval <the hook's>] [--busy 0] [--cuda-ms 0] [--hook-path <python-hook>] [--python python3] [--cli dist/cli.js]
//
// First, with no hook, the sidecar's CPU for --idle-seconds without viewers and then with the viewers
// connected: the CPU per idle viewer. Then a job steps at --steps-per-s; the viewers on ws /v1/stream
// note when a state frame first shows each step. `--hook script` (the default): a hook speaking the
// wire protocol from here sends each step the moment it ends, so only the sidecar's part is measured.
// `--hook python`: the real hook's explicit API in a real Python process (python-hook/bench/paced_loop.py),
// whose step ends are read from the wall clock it shares with the viewers: step end in the training
// process to the viewer, the hook's batching included; --ranks such processes, one a rank of one job;
// --busy: the share of each step spent holding the GIL (the sender waits for it to send); --cuda-ms:
// GPU time queued each step, which the hook times with CUDA events (a GPU and torch needed); --hook-path
// imports the hook from another checkout's python-hook (a baseline, with --cli). Prints JSON. --cli runs another build (a clone
// of main's dist) for a baseline in the same run.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { encode, decode } from '../dist/protocol/codec.js';
import { GPU_COLUMNS, REQUIRED_COLUMNS } from '../dist/protocol/step-records.js';
import { cpuSeconds } from './bench-results.mjs';
import { startSidecar } from './sidecar.mjs';

/** The columns every hook sends. */
const STEP_FIELDS = [...REQUIRED_COLUMNS, ...GPU_COLUMNS];

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    viewers: { type: 'string', default: '1' },
    rate: { type: 'string' },
    'steps-per-s': { type: 'string', default: '50' },
    'idle-seconds': { type: 'string', default: '10' },
    hook: { type: 'string', default: 'script' },
    python: { type: 'string', default: 'python3' },
    ranks: { type: 'string', default: '1' },
    'batch-interval': { type: 'string' },
    'hook-path': { type: 'string' },
    busy: { type: 'string', default: '0' },
    'cuda-ms': { type: 'string', default: '0' },
    cli: { type: 'string', default: path.join(ROOT, 'dist', 'cli.js') },
  },
});
if (!['script', 'python'].includes(values.hook)) throw new Error(`--hook: script or python, not ${values.hook}`);
const rankCount = values.hook === 'python' ? Number(values.ranks) : 1;
const seconds = Number(values.seconds);
const viewerCount = Number(values.viewers);
const stepMs = 1000 / Number(values['steps-per-s']);
const idleSeconds = Number(values['idle-seconds']);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
/** The sidecar's CPU in % of a core over `s` seconds. */
const cpuOver = async (pid, s) => {
  const cpu0 = cpuSeconds(pid);
  const t0 = Date.now();
  await sleep(s * 1000);
  return ((cpuSeconds(pid) - cpu0) / ((Date.now() - t0) / 1000)) * 100;
};

function open(url, listen = () => undefined) {
  const socket = new WebSocket(url);
  listen(socket);
  return new Promise((resolve, reject) => socket.once('open', () => resolve(socket)).once('error', reject));
}

const { child, port } = await startSidecar(path.resolve(values.cli), ['--gpu-source', 'none', ...(values.rate ? ['--stream-rate', values.rate] : [])]);
try {
  await sleep(2_000);
  const idleNoViewers = await cpuOver(child.pid, idleSeconds);
  let rate = null;
  const viewers = await Promise.all(
    Array.from({ length: viewerCount }, () => open(`ws://127.0.0.1:${port}/v1/stream`, (socket) => socket.once('message', (data) => (rate = JSON.parse(data.toString()).rate_hz)))),
  );
  await sleep(1_000);
  const idleViewers = await cpuOver(child.pid, idleSeconds);

  // Each viewer's first sight of each step (wall clock), and each step's end.
  const seenAt = viewers.map(() => new Map());
  let frames = 0;
  let frameBytes = 0;
  // Every viewer gets the same frame: it is parsed once, so that the 50th viewer's time is not 49 parses late.
  const parsed = new Map();
  const parse = (text) => {
    let frame = parsed.get(text);
    if (frame === undefined) {
      frame = JSON.parse(text);
      if (parsed.size > 8) parsed.clear();
      parsed.set(text, frame);
    }
    return frame;
  };
  viewers.forEach((viewer, i) => {
    const seen = [];
    viewer.on('message', (data) => {
      const at = Date.now();
      const frame = parse(data.toString());
      if (frame.type === 'verdict') return;
      frames += 1;
      frameBytes += data.length;
      for (const rank of frame.state.jobs.find((job) => job.job === 'bench')?.ranks ?? []) {
        const last = rank.last_step ?? -1;
        for (let step = (seen[rank.rank] ?? -1) + 1; step <= last; step++) seenAt[i].set(`${rank.rank}/${step}`, at);
        seen[rank.rank] = Math.max(seen[rank.rank] ?? -1, last);
      }
    });
  });

  const warmMs = 2_000; // past the first snapshot and warm-up
  const endedAt = values.hook === 'python' ? await Promise.all(Array.from({ length: rankCount }, (_, rank) => pythonJob(rank))) : [await scriptJob()];
  await sleep(500);
  const from = Math.min(...endedAt.map((ends) => ends[0])) + warmMs;
  const to = from + seconds * 1000;
  const latencies = [];
  let unseen = 0;
  endedAt.forEach((ends, rank) =>
    ends.forEach((end, step) => {
      if (end < from || end > to) return;
      for (const seen of seenAt) {
        if (seen.has(`${rank}/${step}`)) latencies.push({ rank, ms: seen.get(`${rank}/${step}`) - end });
        else unseen += 1;
      }
    }),
  );

  /** The job's steps' ends, by step, from a hook speaking the protocol from here: each sent the moment it ends. */
  async function scriptJob() {
    const hook = await open(`ws://127.0.0.1:${port}/v1/ingest`);
    const helloAt = Date.now();
    hook.send(
      encode({ v: 1, type: 'hello', job: 'bench', rank: 0, local_rank: 0, world_size: 1, session: `bench-${helloAt}`, pid: process.pid, host: 'bench', clock: { wall_ns: BigInt(helloAt) * 1_000_000n, mono_ns: 0 }, env: {} }),
    );
    hook.on('message', (data) => decode(data));
    const ends = [];
    const send = () => {
      const now = Date.now();
      const ns = (ms) => Math.round(ms * 1e6);
      const step = ends.length;
      ends.push(now);
      hook.send(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows: [[step + 1, step, ns(now - helloAt), ns(stepMs), 0, 0, ns(stepMs * 0.9), 32, null, null, null]], dropped: 0 }));
    };
    const timer = setInterval(send, stepMs);
    await sleep(warmMs + seconds * 1000);
    clearInterval(timer);
    hook.terminate();
    return ends;
  }

  /** The same from the real hook in a real Python process, which notes each step's end on the wall clock. */
  async function pythonJob(rank) {
    const dir = mkdtempSync(path.join(tmpdir(), 'bench-stream-'));
    try {
      const out = path.join(dir, 'ends.json');
      const loop = spawn(
        values.python,
        [
          path.join(ROOT, 'python-hook', 'bench', 'paced_loop.py'),
          ...['--url', `ws://127.0.0.1:${port}/v1/ingest`, '--rate', values['steps-per-s'], '--seconds', String(seconds + warmMs / 1000), '--out', out],
          ...(values['batch-interval'] ? ['--batch-interval', values['batch-interval']] : []),
          ...(values['hook-path'] ? ['--hook-path', path.resolve(values['hook-path'])] : []),
          ...['--busy', values.busy, '--cuda-ms', values['cuda-ms']],
        ],
        { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(rankCount) } },
      );
      const code = await new Promise((resolve) => loop.once('exit', resolve));
      if (code !== 0) throw new Error(`paced_loop.py exited ${code}`);
      return JSON.parse(readFileSync(out, 'utf8')).ends_ms;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  const sorted = latencies.map((l) => l.ms).sort((a, b) => a - b);
  const round = (x) => Math.round(x * 10) / 10;
  process.stdout.write(
    JSON.stringify(
      {
        what: 'step end -> first state frame showing it, per viewer, loopback',
        hook: values.hook,
        cli: path.relative(ROOT, path.resolve(values.cli)),
        stream_rate_hz: rate,
        viewers: viewerCount,
        ranks: rankCount,
        batch_interval_s: values['batch-interval'] ?? null,
        hook_path: values['hook-path'] ?? null,
        busy: Number(values.busy),
        cuda_ms: Number(values['cuda-ms']),
        seconds,
        steps_measured: sorted.length / viewerCount,
        steps_never_seen: unseen,
        p50_ms: round(quantile(sorted, 0.5)),
        p90_ms: round(quantile(sorted, 0.9)),
        p99_ms: round(quantile(sorted, 0.99)),
        max_ms: round(sorted.at(-1)),
        frames_per_viewer_per_s: round(frames / viewerCount / (seconds + 3)),
        frame_bytes_mean: Math.round(frameBytes / Math.max(1, frames)),
        p99_under_100_ms: quantile(sorted, 0.99) <= 100,
        ...(rankCount > 1 && {
          p50_ms_by_rank: endedAt.map((_, rank) => round(quantile(latencies.filter((l) => l.rank === rank).map((l) => l.ms).sort((a, b) => a - b), 0.5))),
        }),
        idle_cpu_pct_no_viewers: round(idleNoViewers),
        idle_cpu_pct_with_viewers: round(idleViewers),
        idle_cpu_pct_per_viewer: Math.round(((idleViewers - idleNoViewers) / viewerCount) * 1000) / 1000,
      },
      null,
      2,
    ) + '\n',
  );
  viewers.forEach((v) => v.terminate());
} finally {
  child.kill('SIGTERM');
}
