// node scripts/bench-journal.mjs [size|restart|all] [--steps N]: the journal's figures in BENCHMARKS.md.
// A node of 8 ranks is simulated on a fast-forwarded clock through the real engine, recorder and
// write-ahead log (fdatasync included): what the sidecar writes, how big the folder gets, what a
// checkpoint costs, the process's memory as the job grows; then the real sidecar is restarted on
// the folder and timed to listening, with its peak RSS.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine } from '../dist/engine/engine.js';
import { Recorder } from '../dist/journal/recorder.js';
import { Wal } from '../dist/journal/wal.js';
import { createLogger } from '../dist/log.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const what = args.find((a) => !a.startsWith('--')) ?? 'all';
const stepsArg = args.indexOf('--steps');
const RANKS = 8;
const T0 = Date.parse('2026-12-01T00:00:00Z');

const mib = (bytes) => Math.round((bytes / 1024 / 1024) * 10) / 10;
const dirBytes = (dir) => readdirSync(dir).reduce((sum, name) => sum + statSync(path.join(dir, name)).size, 0);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function hello(rank, at) {
  return {
    t: 'hello',
    at,
    hello: { type: 'hello', job: 'bench', rank, local_rank: rank, world_size: RANKS, session: `s${rank}`, pid: 1000 + rank, host: 'node-a', clock: { wall_ms: at, mono_ns: (at - T0) * 1e6 }, env: { gpu_index: rank, num_workers: 4 } },
  };
}

function gpuSample(index, at) {
  return { at, index, uuid: `GPU-${index}`, name: 'NVIDIA H100 80GB HBM3', utilGpu: 97, utilMem: 40, memUsedMiB: 61234, memTotalMiB: 81559, tempC: 71, powerW: 612.4, powerLimitW: 700, smClockMHz: 1980, smClockMaxMHz: 1980, memClockMHz: 2619, pstate: 'P0', throttleReasons: 0, smActive: null, tensorActive: null };
}

function hostSample(at) {
  return { at, cpuPct: 31.5, cpuPerCorePct: Array(32).fill(31.5), iowaitPct: 0.4, stealPct: 0, load1: 9.1, load5: 9, load15: 8.8, memUsedBytes: 2e11, memTotalBytes: 1e12, memAvailableBytes: 8e11, diskReadBps: 1e7, diskWriteBps: 2e6, netRxBps: 5e8, netTxBps: 5e8 };
}

/**
 * The job as the sidecar journals it: every 100 ms each rank's frame of steps, every 250 ms a tick,
 * every 500 ms the 8 GPUs' samples, every second the host and each rank's process counters.
 */
async function simulate({ dir, stepsPerSecond, totalSteps, onHour }) {
  const log = createLogger('silent');
  let now = T0;
  const wal = await Wal.open({ dir, maxBytes: 512 * 1024 * 1024, now: () => now });
  const engine = new Engine();
  const recorder = new Recorder(engine, wal, { checkpointBytes: 16 * 1024 * 1024, checkpointMs: 5 * 60_000, samplesGiveUpShare: 0.75, now: () => now, log });
  const checkpointMs = [];
  const origCheckpoint = wal.checkpoint.bind(wal);
  wal.checkpoint = async (state) => {
    const started = performance.now();
    await origCheckpoint(state);
    checkpointMs.push({ ms: performance.now() - started, bytes: wal.health().lastCheckpointBytes });
  };
  let appended = 0;
  const origAppend = wal.append.bind(wal);
  // The bytes of each record as written: crc, space, JSON, newline.
  wal.append = (value) => ((appended += Buffer.byteLength(JSON.stringify(value)) + 10), origAppend(value));
  const pending = [];
  const record = (entry) => {
    const p = recorder.record(entry);
    pending.push(p);
    return p;
  };
  await record({ t: 'start', at: now, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10000 } });
  await record({ t: 'source', at: now, gpu: 'nvidia-smi', reason: 'bench' });
  for (let rank = 0; rank < RANKS; rank++) {
    await record(hello(rank, now));
    await record({ t: 'connect', at: now, session: `s${rank}` });
  }
  const perFrame = stepsPerSecond / 10;
  const durNs = 1e9 / stepsPerSecond;
  const seq = new Array(RANKS).fill(0);
  let written = 0;
  let steps = 0;
  let nextHour = T0 + 3600_000;
  const cpuStart = process.cpuUsage();
  const wallStart = performance.now();
  let peakRss = 0;
  for (let t = 100; steps < totalSteps; t += 100) {
    now = T0 + t;
    for (let rank = 0; rank < RANKS; rank++) {
      const rows = [];
      for (let i = 0; i < perFrame; i++) {
        seq[rank] += 1;
        const endNs = (t - 100) * 1e6 + (i + 1) * durNs;
        rows.push([seq[rank], seq[rank] - 1, endNs, durNs, durNs * 0.05, durNs * 0.02, durNs * 0.88, 256, null, null, null]);
      }
      steps += perFrame;
      record({ t: 'steps', at: now, session: `s${rank}`, dropped: 0, rows, duplicates: 0 });
    }
    if (t % 250 === 0 || t % 250 === 50) record({ t: 'tick', at: T0 + Math.floor(t / 250) * 250 });
    if (t % 500 === 0) record({ t: 'gpu', at: now, samples: Array.from({ length: RANKS }, (_, i) => gpuSample(i, now)) });
    if (t % 1000 === 0) {
      record({ t: 'host', at: now, sample: hostSample(now) });
      for (let rank = 0; rank < RANKS; rank++) {
        const s = t / 1000;
        record({ t: 'counters', at: now, session: `s${rank}`, batch: { source: 'process', samples: [{ at_ns: t * 1e6, cpu_main_s: s, cpu_workers_s: 3 * s, workers: 4, rss_bytes: 8e9, cgroup_nr_periods: null, cgroup_nr_throttled: null, cgroup_throttled_usec: null, cgroup_quota_cores: null, cgroup_usage_usec: null }] } });
      }
    }
    if (pending.length > 2000) {
      await Promise.all(pending.splice(0));
      peakRss = Math.max(peakRss, process.memoryUsage.rss());
    }
    if (now >= nextHour) {
      await Promise.all(pending.splice(0));
      global.gc?.();
      onHour?.({ hour: (now - T0) / 3600_000, steps, bytes: wal.bytes(), folder: dirBytes(dir), rss: process.memoryUsage.rss(), heap: process.memoryUsage().heapUsed, appended });
      nextHour += 3600_000;
    }
  }
  await Promise.all(pending.splice(0));
  const cpu = process.cpuUsage(cpuStart);
  const wallS = (performance.now() - wallStart) / 1000;
  written = statSum(dir);
  await recorder.close();
  return { steps, hours: (now - T0) / 3600_000, cpuUs: cpu.user + cpu.system, wallS, checkpointMs, peakRss, folder: dirBytes(dir), written, appended, engine };
}

function statSum(dir) {
  return dirBytes(dir);
}

async function restart(dir) {
  const child = spawn(process.execPath, [path.join(root, 'dist/cli.js'), 'serve', '--port', '0', '--out', dir, '--gpu-source', 'none', '--log-level', 'info'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const started = performance.now();
  let peak = 0;
  const sampler = setInterval(() => {
    try {
      const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      if (hwm) peak = Math.max(peak, Number(hwm[1]) * 1024);
    } catch {}
  }, 20);
  const listening = await new Promise((resolve, reject) => {
    let buffered = '';
    let replay = null;
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      buffered += chunk;
      for (const line of buffered.split('\n').slice(0, -1)) {
        try {
          const parsed = JSON.parse(line);
          if (parsed.msg?.startsWith('resumed from journal')) replay = parsed;
          if (parsed.msg === 'listening') resolve({ ms: performance.now() - started, replay });
        } catch {}
      }
      buffered = buffered.slice(buffered.lastIndexOf('\n') + 1);
    });
    child.once('exit', (code) => reject(new Error(`sidecar exited ${code}`)));
  });
  await new Promise((r) => setTimeout(r, 2000));
  clearInterval(sampler);
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  peak = Math.max(peak, Number(/VmHWM:\s+(\d+) kB/.exec(status)[1]) * 1024);
  const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) * 1024;
  child.kill('SIGKILL');
  return { ...listening, peakRss: peak, rss };
}

async function sizeAndMemory(totalSteps, stepsPerSecond) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-journal-'));
  const hours = [];
  const result = await simulate({ dir, stepsPerSecond, totalSteps, onHour: (h) => hours.push(h) });
  return { dir, result, hours };
}

/** Heap per rank, full: 16 sessions, 10 minutes of steps (every 250 ms slice), process samples, a snapshot. */
function rankMemory(ranks = 64) {
  global.gc();
  const before = process.memoryUsage().heapUsed;
  const engine = new Engine();
  engine.apply({ t: 'start', at: T0, config: { windowMs: 4000, holdMs: 2000, endGraceMs: 10000 } });
  for (let r = 0; r < ranks; r++) {
    for (let s = 0; s < 16; s++) engine.apply({ ...hello(r, T0), hello: { ...hello(r, T0).hello, session: `s${r}-${s}` } });
    const rows = [];
    for (let i = 1; i <= 12000; i++) rows.push([i, i, i * 50e6, 50e6, 1e6, 1e6, 40e6, 8, null, null, null]);
    engine.apply({ t: 'steps', at: T0 + 600_000, session: `s${r}-15`, dropped: 0, rows });
    for (let i = 0; i < 120; i++) {
      const sample = { at_ns: i * 1e9, cpu_main_s: i, cpu_workers_s: i, workers: 4, rss_bytes: 1, cgroup_nr_periods: null, cgroup_nr_throttled: null, cgroup_throttled_usec: null, cgroup_quota_cores: null, cgroup_usage_usec: null };
      engine.apply({ t: 'counters', at: T0 + i * 1000, session: `s${r}-15`, batch: { source: 'process', samples: [sample] } });
    }
  }
  engine.apply({ t: 'tick', at: T0 + 600_000 });
  global.gc();
  const perRank = (process.memoryUsage().heapUsed - before) / ranks;
  const checkpoint = JSON.stringify(engine.toCheckpoint()).length / ranks;
  console.log(`${ranks} full ranks: ${(perRank / 1024).toFixed(0)} KiB of heap per rank, ${(checkpoint / 1024).toFixed(0)} KiB of checkpoint per rank`);
}

if (what === 'rank-memory') {
  if (!global.gc) throw new Error('run with node --expose-gc');
  rankMemory();
  process.exit(0);
}

const totalSteps = stepsArg >= 0 ? Number(args[stepsArg + 1]) : 10_000_000;
console.log(`# ${RANKS} ranks, ${totalSteps.toLocaleString()} steps`);
// `size` (default): 50 steps/s per rank, frames of 5 steps; `fast`: 500 steps/s per rank, frames of 50.
for (const [label, perSecond] of what === 'fast' ? [['500 steps/s per rank', 500]] : [['50 steps/s per rank', 50]]) {
  const { dir, result, hours } = await sizeAndMemory(totalSteps, perSecond);
  const firstHour = hours[0];
  console.log(`\n## ${label}: ${result.hours.toFixed(2)} simulated hours in ${result.wallS.toFixed(1)} s`);
  console.log('hour | steps | journal on disk (MiB) | process RSS (MiB) | heap used (MiB)');
  for (const h of hours) console.log(`${h.hour} | ${h.steps.toLocaleString()} | ${mib(h.folder)} | ${mib(h.rss)} | ${mib(h.heap)}`);
  const records = result.steps;
  console.log(`ingest path CPU per step record (engine + journal, fdatasync'ed): ${(result.cpuUs / records).toFixed(2)} µs`);
  const cps = result.checkpointMs;
  if (cps.length) console.log(`checkpoints: ${cps.length}, median ${median(cps.map((c) => c.ms)).toFixed(0)} ms, ${mib(median(cps.map((c) => c.bytes)))} MiB each`);
  console.log(`folder at the end: ${mib(result.folder)} MiB`);
  const rs = [];
  for (let i = 0; i < 3; i++) rs.push(await restart(dir));
  console.log(`journal written: ${mib(result.appended / result.hours)} MiB per simulated hour (${mib(result.appended)} MiB in all)`);
  console.log(`restart to listening: median ${median(rs.map((r) => r.ms)).toFixed(0)} ms (replayed ${rs[0].replay?.entries} entries after checkpoint ${rs[0].replay?.checkpoint}), peak RSS ${mib(median(rs.map((r) => r.peakRss)))} MiB, RSS 2 s later ${mib(median(rs.map((r) => r.rss)))} MiB`);
  rmSync(dir, { recursive: true, force: true });
  void firstHour;
}
