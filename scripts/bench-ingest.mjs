// What bench.mjs and bench-check.mjs both measure against a running sidecar, written once: step
// records pushed through one websocket round after round, and the stand-in nvidia-smi's GPUs.
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { decode, encode } from '../dist/protocol/codec.js';
import { GPU_COLUMNS, REQUIRED_COLUMNS } from '../dist/protocol/step-records.js';
import { cpuSeconds } from './bench-results.mjs';

/** The columns every hook sends. */
const STEP_FIELDS = [...REQUIRED_COLUMNS, ...GPU_COLUMNS];

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * `rounds` rounds of `frames × rowsPerFrame` step records, each round a new job on its own
 * connection, sent at once and timed to the last ack: wall seconds and the sidecar's CPU per round.
 */
export async function ingestRounds(port, pid, { frames, rowsPerFrame = 256, rounds, job = 'bench' }) {
  const results = [];
  const total = frames * rowsPerFrame;
  for (let round = 0; round < rounds; round++) {
    const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/ingest`);
    await new Promise((resolve, reject) => (socket.once('open', resolve), socket.once('error', reject)));
    // Steps go once the hello is welcomed, as a hook's do: the sidecar holds at most 64 frames before
    // it, and with a journal the welcome waits for the hello's fdatasync.
    let welcomed;
    const welcome = new Promise((resolve) => (welcomed = resolve));
    const done = new Promise((resolve) =>
      socket.on('message', (data) => {
        const message = decode(data);
        if (message.type === 'welcome') welcomed();
        if (message.type === 'ack' && message.ack === total) resolve();
      }),
    );
    socket.send(encode({ v: 1, type: 'hello', job: `${job}-${round}`, rank: 0, local_rank: 0, world_size: 1, session: `${job}-${round}`, pid: 1, host: 'bench', clock: { wall_ns: 0, mono_ns: 0 }, env: {} }));
    const payloads = [];
    for (let f = 0; f < frames; f++) {
      const rows = [];
      for (let r = 0; r < rowsPerFrame; r++) {
        const seq = f * rowsPerFrame + r + 1;
        rows.push([seq, seq - 1, seq * 1_000_000, 1_000_000, 200_000, 100_000, 600_000, 32, null, null, null]);
      }
      payloads.push(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 }));
    }
    await welcome;
    const cpu0 = cpuSeconds(pid);
    const t0 = process.hrtime.bigint();
    for (const payload of payloads) socket.send(payload);
    await done;
    results.push({ records: total, seconds: Number(process.hrtime.bigint() - t0) / 1e9, cpu_seconds: cpuSeconds(pid) - cpu0 });
    socket.close();
  }
  return results;
}

/** The environment that puts the stand-in nvidia-smi (test/support/fake-nvidia-smi.mjs) on PATH, playing `gpus` busy GPUs. */
export function fakeNvidiaSmi(gpus) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-'));
  mkdirSync(path.join(dir, 'bin'));
  symlinkSync(path.join(root, 'test/support/fake-nvidia-smi.mjs'), path.join(dir, 'bin', 'nvidia-smi'));
  writeFileSync(path.join(dir, 'scenario.json'), JSON.stringify({ gpus }));
  return { ...process.env, PATH: `${path.join(dir, 'bin')}:${process.env.PATH}`, FAKE_NVIDIA_SMI_SCENARIO: path.join(dir, 'scenario.json') };
}
