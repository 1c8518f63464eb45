// npm run bench: the figures behind BENCHMARKS.md. Medians over repeated runs; ratios against a
// baseline measured in the same run, because these machines are noisy.
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { decode, encode } from '../dist/protocol/codec.js';
import { STEP_FIELDS } from '../dist/protocol/messages.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const only = process.argv[2];

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return ticks / 100;
}

async function startSidecar() {
  const child = spawn(process.execPath, [path.join(root, 'dist/cli.js'), 'serve', '--port', '0', '--log-level', 'info'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      buffered += chunk;
      const match = buffered.match(/"port":(\d+)/);
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`sidecar exited ${code}`)));
  });
  return { child, port };
}

function python() {
  for (const candidate of [process.env.STEPSCOPE_PYTHON, 'python3', '/usr/bin/python3']) {
    if (candidate && spawnSync(candidate, ['-c', 'pass']).status === 0) return candidate;
  }
  throw new Error('no python3');
}

function hookBench(url) {
  const args = [path.join(root, 'python-hook/bench/bench_hook.py'), ...(url ? ['--url', url] : [])];
  const run = spawnSync(python(), args, { encoding: 'utf8', env: { ...process.env, PYTHONPATH: path.join(root, 'python-hook') }, stdio: ['ignore', 'pipe', 'inherit'] });
  if (run.status !== 0) throw new Error('bench_hook.py failed');
  return JSON.parse(run.stdout.trim().split('\n').at(-1));
}

async function ingestThroughput(port, { frames = 400, rowsPerFrame = 256, rounds = 5 } = {}) {
  const results = [];
  for (let round = 0; round < rounds; round++) {
    const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/ingest`);
    await new Promise((resolve, reject) => (socket.once('open', resolve), socket.once('error', reject)));
    const total = frames * rowsPerFrame;
    const done = new Promise((resolve) =>
      socket.on('message', (data) => {
        const message = decode(data);
        if (message.type === 'ack' && message.ack === total) resolve();
      }),
    );
    socket.send(encode({ v: 1, type: 'hello', job: `bench-${round}`, rank: 0, local_rank: 0, world_size: 1, session: `bench-${round}`, pid: 1, host: 'bench', clock: { wall_ns: 0, mono_ns: 0 }, env: {} }));
    const payloads = [];
    for (let f = 0; f < frames; f++) {
      const rows = [];
      for (let r = 0; r < rowsPerFrame; r++) {
        const seq = f * rowsPerFrame + r + 1;
        rows.push([seq, seq - 1, seq * 1_000_000, 1_000_000, 200_000, 100_000, 600_000, 32, null, null, null]);
      }
      payloads.push(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 }));
    }
    const child = globalThis.__sidecarPid;
    const cpu0 = cpuSeconds(child);
    const t0 = process.hrtime.bigint();
    for (const payload of payloads) socket.send(payload);
    await done;
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = cpuSeconds(child) - cpu0;
    results.push({ records_per_s: total / seconds, sidecar_cpu_us_per_record: (cpu / total) * 1e6 });
    socket.close();
  }
  return {
    records_per_round: frames * rowsPerFrame,
    rounds,
    median_records_per_s: Math.round(median(results.map((r) => r.records_per_s))),
    median_sidecar_cpu_us_per_record: Number(median(results.map((r) => r.sidecar_cpu_us_per_record)).toFixed(2)),
  };
}

const report = { date: new Date().toISOString(), machine: `${os.cpus().length} x ${os.cpus()[0]?.model}`, node: process.version };
const { child, port } = await startSidecar();
globalThis.__sidecarPid = child.pid;
try {
  if (!only || only === 'hook') {
    report.hook_no_sidecar = hookBench(null);
    report.hook_live_sidecar = hookBench(`ws://127.0.0.1:${port}/v1/ingest`);
  }
  if (!only || only === 'ingest') report.ingest = await ingestThroughput(port);
} finally {
  child.kill('SIGTERM');
}
console.log(JSON.stringify(report, null, 2));
