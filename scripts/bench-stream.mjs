#!/usr/bin/env node
// Step end → viewer update latency on loopback, through the real sidecar, and what an idle viewer costs.
//
//   node scripts/bench-stream.mjs [--seconds 20] [--viewers 1] [--rate <its default>] [--steps-per-s 50] [--idle-seconds 10] [--cli dist/cli.js]
//
// First, with no hook, the sidecar's CPU for --idle-seconds without viewers and then with the viewers
// connected: the CPU per idle viewer. Then a hook (speaking the wire protocol from here) sends each
// step the moment it ends; the viewers on ws /v1/stream note when a state frame first shows it.
// Prints JSON. The Python hook adds up to its batch interval (0.1 s) before a step leaves the
// training process. --cli runs another build (a clone of main's dist) for a baseline in the same run.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { encode, decode } from '../dist/protocol/codec.js';
import { GPU_COLUMNS, REQUIRED_COLUMNS } from '../dist/protocol/step-records.js';
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
    cli: { type: 'string', default: path.join(ROOT, 'dist', 'cli.js') },
  },
});
const seconds = Number(values.seconds);
const viewerCount = Number(values.viewers);
const stepMs = 1000 / Number(values['steps-per-s']);
const idleSeconds = Number(values['idle-seconds']);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
const cpuSeconds = (pid) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
};
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

  const endedAt = new Map();
  const hook = await open(`ws://127.0.0.1:${port}/v1/ingest`);
  const helloAt = Date.now();
  hook.send(
    encode({ v: 1, type: 'hello', job: 'bench', rank: 0, local_rank: 0, world_size: 1, session: `bench-${helloAt}`, pid: process.pid, host: 'bench', clock: { wall_ns: BigInt(helloAt) * 1_000_000n, mono_ns: 0 }, env: {} }),
  );
  hook.on('message', (data) => decode(data));

  const latencies = [];
  let frames = 0;
  let frameBytes = 0;
  let measuring = false;
  viewers.forEach((viewer, i) => {
    let seen = -1;
    viewer.on('message', (data) => {
      const at = Date.now();
      const frame = JSON.parse(data.toString());
      if (frame.type === 'verdict') return;
      frames += 1;
      frameBytes += data.length;
      const last = frame.state.jobs.find((job) => job.job === 'bench')?.ranks[0]?.last_step ?? -1;
      for (let step = seen + 1; step <= last; step++) {
        if (measuring && endedAt.has(step)) latencies.push({ viewer: i, ms: at - endedAt.get(step) });
      }
      seen = Math.max(seen, last);
    });
  });

  let step = 0;
  const send = () => {
    const now = Date.now();
    const ns = (ms) => Math.round(ms * 1e6);
    endedAt.set(step, now);
    hook.send(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows: [[step + 1, step, ns(now - helloAt), ns(stepMs), 0, 0, ns(stepMs * 0.9), 32, null, null, null]], dropped: 0 }));
    step += 1;
  };
  const timer = setInterval(send, stepMs);
  await sleep(2_000); // past the first snapshot and warm-up
  measuring = true;
  await sleep(seconds * 1000);
  measuring = false;
  clearInterval(timer);
  await sleep(500);

  const sorted = latencies.map((l) => l.ms).sort((a, b) => a - b);
  const round = (x) => Math.round(x * 10) / 10;
  process.stdout.write(
    JSON.stringify(
      {
        what: 'step end -> first state frame showing it, per viewer, loopback',
        cli: path.relative(ROOT, path.resolve(values.cli)),
        stream_rate_hz: rate,
        viewers: viewerCount,
        seconds,
        steps_measured: sorted.length / viewerCount,
        p50_ms: round(quantile(sorted, 0.5)),
        p90_ms: round(quantile(sorted, 0.9)),
        p99_ms: round(quantile(sorted, 0.99)),
        max_ms: round(sorted.at(-1)),
        frames_per_viewer_per_s: round(frames / viewerCount / (seconds + 3)),
        frame_bytes_mean: Math.round(frameBytes / Math.max(1, frames)),
        p99_under_100_ms: quantile(sorted, 0.99) <= 100,
        idle_cpu_pct_no_viewers: round(idleNoViewers),
        idle_cpu_pct_with_viewers: round(idleViewers),
        idle_cpu_pct_per_viewer: Math.round(((idleViewers - idleNoViewers) / viewerCount) * 1000) / 1000,
      },
      null,
      2,
    ) + '\n',
  );
  viewers.forEach((v) => v.terminate());
  hook.terminate();
} finally {
  child.kill('SIGTERM');
}
