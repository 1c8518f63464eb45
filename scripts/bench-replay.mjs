// node scripts/bench-replay.mjs [--sizes 16,64,256] [--runs 3] [--per-frame 5] [--frames]: replay time and peak memory against
// journal size (BENCHMARKS.md, "Replay against journal size"), and the hostile journals of
// docs/security.md: a 250 MB checkpoint with a valid checksum, two entries a year apart. Each replay
// runs in a child process of its own (`node scripts/bench-replay.mjs child …`), its peak RSS read
// from the kernel (getrusage maxrss); medians of --runs. Needs `npm run build` first.
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = (file) => path.join(root, 'dist', file);
const args = process.argv.slice(2);
const mib = (bytes) => Math.round((bytes / 1024 / 1024) * 10) / 10;
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const T0 = Date.parse('2026-12-01T00:00:00Z');
const RANKS = 8;
// 8 ranks, each sending a frame of --per-frame records (default 5: 50 steps/s) every 100 ms, journaled
// as rows; --frames: as the frames' bytes, as a live sidecar journals a frame of 8 records or more
// (src/engine/entries.ts liveSteps).
const FRAMES = args.includes('--frames');
const PER_FRAME = args.includes('--per-frame') ? Number(args[args.indexOf('--per-frame') + 1]) : 5;

if (args[0] === 'child') {
  const [, what, target] = args;
  const started = performance.now();
  let result = {};
  if (what === 'replay') {
    const { replayJournal } = await import(dist('journal/replay.js'));
    const { checkpointBytesFor } = await import(dist('ingest/limits.js'));
    const { report } = await replayJournal(target, { maxCheckpointBytes: checkpointBytesFor() });
    result = { entries: report.entries, problems: report.problems, checkpoint: report.checkpoint };
  } else if (what === 'read-checkpoint') {
    const { readWal } = await import(dist('journal/wal-read.js'));
    for await (const item of readWal(target, { onBad: () => undefined })) result.kind = item.kind;
  } else if (what === 'parse-whole') {
    // What the reader did before: the line whole, then JSON.parse of it whole.
    const line = readFileSync(target);
    result.keys = Object.keys(JSON.parse(line.toString('utf8', 9, line.length - 1))).length;
  }
  console.log(JSON.stringify({ ...result, ms: performance.now() - started, maxRssBytes: process.resourceUsage().maxRSS * 1024 }));
  process.exit(0);
}

const sizes = (args.includes('--sizes') ? args[args.indexOf('--sizes') + 1] : '16,64,256').split(',').map(Number);
const runs = args.includes('--runs') ? Number(args[args.indexOf('--runs') + 1]) : 3;

function child(what, target) {
  const run = spawnSync(process.execPath, [fileURLToPath(import.meta.url), 'child', what, target], { encoding: 'utf8', maxBuffer: 1 << 20 });
  if (run.status !== 0) throw new Error(`child ${what} failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').at(-1));
}

function measured(what, target) {
  const all = Array.from({ length: runs }, () => child(what, target));
  return { ...all[0], ms: median(all.map((r) => r.ms)), maxRssBytes: median(all.map((r) => r.maxRssBytes)) };
}

const line = (value) => {
  const body = Buffer.from(JSON.stringify(value));
  return Buffer.concat([Buffer.from(`${crc32(body).toString(16).padStart(8, '0')} `), body, Buffer.from('\n')]);
};

/** A hook's steps frame of `rows`, in base64: how a live sidecar journals a frame it kept whole. */
const frameOf = FRAMES
  ? await (async () => {
      const { encode } = await import(dist('protocol/codec.js'));
      const { GPU_COLUMNS, REQUIRED_COLUMNS } = await import(dist('protocol/step-records.js'));
      const fields = [...REQUIRED_COLUMNS, ...GPU_COLUMNS];
      return (rows) => Buffer.from(encode({ v: 1, type: 'steps', fields, rows, dropped: 0 })).toString('base64');
    })()
  : null;

/** A journal as a node of 8 ranks at PER_FRAME × 10 steps/s writes it (frames every 100 ms, ticks, GPU, host and process samples), `bytes` of segments. */
function writeJournal(dir, bytes) {
  let segment = 1;
  let fd = openSync(path.join(dir, `wal-${String(segment).padStart(8, '0')}.log`), 'w');
  let inSegment = 0;
  let total = 0;
  const put = (entry) => {
    const data = line(entry);
    if (inSegment + data.length > 4 * 1024 * 1024) {
      closeSync(fd);
      segment += 1;
      fd = openSync(path.join(dir, `wal-${String(segment).padStart(8, '0')}.log`), 'w');
      inSegment = 0;
    }
    writeSync(fd, data);
    inSegment += data.length;
    total += data.length;
  };
  put({ t: 'start', at: T0, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10000 } });
  put({ t: 'source', at: T0, gpu: 'nvidia-smi', reason: 'bench' });
  for (let rank = 0; rank < RANKS; rank++) {
    put({ t: 'hello', at: T0, hello: { type: 'hello', job: 'bench', rank, local_rank: rank, world_size: RANKS, session: `s${rank}`, pid: 1000 + rank, host: 'node-a', clock: { wall_ms: T0, mono_ns: 0 }, env: { gpu_index: rank } }, secret: 'a'.repeat(32) });
    put({ t: 'connect', at: T0, session: `s${rank}` });
  }
  const seq = new Array(RANKS).fill(0);
  const durNs = Math.round(100e6 / PER_FRAME);
  let entries = 0;
  for (let t = 100; total < bytes; t += 100) {
    const at = T0 + t;
    for (let rank = 0; rank < RANKS; rank++) {
      const rows = [];
      for (let i = 0; i < PER_FRAME; i++) {
        seq[rank] += 1;
        rows.push([seq[rank], seq[rank] - 1, (t - 100) * 1e6 + (i + 1) * durNs, durNs, Math.round(durNs * 0.05), Math.round(durNs * 0.02), Math.round(durNs * 0.88), 256, null, null, null]);
      }
      put({ t: 'steps', at, session: `s${rank}`, dropped: 0, ...(frameOf ? { frame: frameOf(rows) } : { rows }) });
      entries += 1;
    }
    if (t % 250 === 0 || t % 250 === 50) (put({ t: 'tick', at: T0 + Math.floor(t / 250) * 250 }), (entries += 1));
    if (t % 500 === 0) {
      put({ t: 'gpu', at, samples: Array.from({ length: RANKS }, (_, index) => ({ at, index, uuid: `GPU-${index}`, name: 'NVIDIA H100 80GB HBM3', utilGpu: 97, utilMem: 40, memUsedMiB: 61234, memTotalMiB: 81559, tempC: 71, powerW: 612.4, powerLimitW: 700, smClockMHz: 1980, smClockMaxMHz: 1980, memClockMHz: 2619, pstate: 'P0', throttleReasons: 0, smActive: null, tensorActive: null })) });
      entries += 1;
    }
  }
  closeSync(fd);
  return { bytes: total, entries };
}

/** A checkpoint line of `bytes` with a valid crc (a JSON object padded with spaces), written a MiB at a time. */
function writePaddedCheckpoint(file, bytes) {
  const head = Buffer.from('{"format":"stepscope.checkpoint/v1","jobs":[]');
  const pad = Buffer.alloc(1024 * 1024, 0x20);
  const tail = Buffer.from('}');
  const padBytes = bytes - 10 - head.length - tail.length;
  let crc = crc32(head);
  for (let left = padBytes; left > 0; left -= pad.length) crc = crc32(pad.subarray(0, Math.min(left, pad.length)), crc);
  crc = crc32(tail, crc);
  const fd = openSync(file, 'w');
  writeSync(fd, Buffer.from(`${crc.toString(16).padStart(8, '0')} `));
  writeSync(fd, head);
  for (let left = padBytes; left > 0; left -= pad.length) writeSync(fd, pad, 0, Math.min(left, pad.length));
  writeSync(fd, Buffer.concat([tail, Buffer.from('\n')]));
  closeSync(fd);
}

const statSizeOf = (file) => readFileSync(file).length;

/** The engine's checkpoint with `ranks` ranks at their fullest (16 sessions, 10 minutes of steps, process samples), as bench-journal.mjs rank-memory builds them. */
async function fullCheckpoint(ranks) {
  const { Engine } = await import(dist('engine/engine.js'));
  const engine = new Engine();
  engine.apply({ t: 'start', at: T0, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10000 } });
  for (let r = 0; r < ranks; r++) {
    const base = { type: 'hello', job: 'bench', rank: r, local_rank: r % 8, world_size: ranks, pid: 1000 + r, host: 'node-a', clock: { wall_ms: T0, mono_ns: 0 }, env: { gpu_index: r % 8 } };
    for (let s = 0; s < 16; s++) engine.apply({ t: 'hello', at: T0, hello: { ...base, session: `s${r}-${s}` } });
    const rows = [];
    for (let i = 1; i <= 12000; i++) rows.push([i, i, i * 50e6, 50e6, 1e6, 1e6, 40e6, 8, null, null, null]);
    engine.apply({ t: 'steps', at: T0 + 600_000, session: `s${r}-15`, dropped: 0, rows });
    for (let i = 0; i < 120; i++) {
      const sample = { at_ns: i * 1e9, cpu_main_s: i, cpu_workers_s: i, workers: 4, rss_bytes: 1, cgroup_nr_periods: null, cgroup_nr_throttled: null, cgroup_throttled_usec: null, cgroup_quota_cores: null, cgroup_usage_usec: null };
      engine.apply({ t: 'counters', at: T0 + i * 1000, session: `s${r}-15`, batch: { source: 'process', samples: [sample] } });
    }
  }
  engine.apply({ t: 'tick', at: T0 + 600_000 });
  return engine.toCheckpoint();
}

/** The real sidecar on `dir`: ms from spawn to the first /healthz 200 and to `listening` (ready), and its peak RSS. */
async function serveTimes(dir) {
  const child = spawn(process.execPath, [dist('cli.js'), 'serve', '--port', '0', '--out', dir, '--gpu-source', 'none', '--log-level', 'info'], { stdio: ['ignore', 'pipe', 'ignore'] });
  const started = performance.now();
  let peak = 0;
  const sampler = setInterval(() => {
    try {
      peak = Math.max(peak, Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) * 1024);
    } catch {}
  }, 20);
  let healthyMs = null;
  let port = null;
  const ready = new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      buffered += chunk;
      for (const text of buffered.split('\n').slice(0, -1)) {
        const parsed = JSON.parse(text);
        port ??= parsed.port ?? null;
        if (parsed.msg === 'listening') resolve(performance.now() - started);
      }
      buffered = buffered.slice(buffered.lastIndexOf('\n') + 1);
    });
    child.once('exit', (code) => reject(new Error(`sidecar exited ${code}`)));
  });
  const polling = (async () => {
    while (healthyMs === null) {
      if (port !== null) {
        const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false);
        if (ok) healthyMs = performance.now() - started;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const readyMs = await ready;
  await polling;
  clearInterval(sampler);
  peak = Math.max(peak, Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) * 1024);
  child.kill('SIGKILL');
  return { healthyMs, readyMs, peakRss: peak };
}

console.log(`# replay against journal size: ${RANKS} ranks at ${PER_FRAME * 10} steps/s (steps as ${FRAMES ? 'frames' : 'rows'}), no checkpoint; medians of ${runs} runs, each in its own process`);
console.log('journal (MiB) | entries | replay (ms) | peak RSS (MiB) | serve: /healthz 200 (ms) | serve: ready (ms) | serve peak RSS (MiB)');
for (const size of sizes) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-replay-'));
  const { bytes, entries } = writeJournal(dir, size * 1024 * 1024);
  const replay = measured('replay', dir);
  const served = await serveTimes(dir);
  console.log(`${mib(bytes)} | ${entries.toLocaleString()} | ${replay.ms.toFixed(0)} | ${mib(replay.maxRssBytes)} | ${served.healthyMs.toFixed(0)} | ${served.readyMs.toFixed(0)} | ${mib(served.peakRss)}`);
  rmSync(dir, { recursive: true, force: true });
}

console.log('\n# hostile journals');
{
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-replay-'));
  writePaddedCheckpoint(path.join(dir, 'checkpoint-00000002.json'), 250_000_000);
  writeFileSync(path.join(dir, 'wal-00000002.log'), line({ t: 'start', at: T0, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10000 } }));
  const replay = measured('replay', dir);
  const served = await serveTimes(dir);
  console.log(`a 250 MB checkpoint, valid checksum: replay ${replay.ms.toFixed(0)} ms, peak RSS ${mib(replay.maxRssBytes)} MiB (problems: ${replay.problems}); serve /healthz ${served.healthyMs.toFixed(0)} ms, ready ${served.readyMs.toFixed(0)} ms, peak RSS ${mib(served.peakRss)} MiB`);
  rmSync(dir, { recursive: true, force: true });
}
{
  // Within the bound: a real checkpoint of 64 ranks at their fullest, streamed against read and parsed whole (as before).
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-replay-'));
  const file = path.join(dir, 'checkpoint-00000001.json');
  writeFileSync(file, line(await fullCheckpoint(64)));
  const streamed = measured('read-checkpoint', dir);
  const whole = measured('parse-whole', file);
  console.log(`a real checkpoint of 64 full ranks (${mib(statSizeOf(file))} MiB): streamed ${streamed.ms.toFixed(0)} ms, peak RSS ${mib(streamed.maxRssBytes)} MiB; read and parsed whole (the reader before) ${whole.ms.toFixed(0)} ms, peak RSS ${mib(whole.maxRssBytes)} MiB`);
  rmSync(dir, { recursive: true, force: true });
}
{
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-replay-'));
  const year = 365 * 24 * 3_600_000;
  const hello = { t: 'hello', at: T0, hello: { type: 'hello', job: 'gap', rank: 0, local_rank: 0, world_size: 1, session: 's', pid: 1, host: 'h', clock: { wall_ms: T0, mono_ns: 0 }, env: {} } };
  writeFileSync(path.join(dir, 'wal-00000001.log'), Buffer.concat([line(hello), line({ t: 'steps', at: T0 + year, session: 's', dropped: 0, rows: [[1, 0, year * 1e6, 20e6, 1e6, 0, 19e6, 32, null, null, null]] })]));
  const replay = measured('replay', dir);
  console.log(`two entries a year apart: replay ${replay.ms.toFixed(0)} ms, ${replay.entries} entries applied (ticks made up included), peak RSS ${mib(replay.maxRssBytes)} MiB`);
  rmSync(dir, { recursive: true, force: true });
}


