#!/usr/bin/env node
// npm run bench:check: a short run of the benchmarks that guard issue 24's budgets, its figures
// written to bench-results/latest.json and judged against bench-budgets.json (committed). Exit 1
// when a figure is over (or under) its budget, or missing. Run by .ci/run's second stage.
//
//   node scripts/bench-check.mjs [--quick] [--from FILE]
//
// --quick: fewer rounds (about a minute); --from FILE: judge figures already measured, run nothing.
// What is measured, each against a baseline in the same run where the time is wall-clock and noisy:
//   start.*  each command's start over bare Node's (`node -e 0`), interleaved (scripts/bench-start.mjs)
//   idle.*   the idle sidecar's CPU, % of a core, with 8 simulated GPUs through the stand-in nvidia-smi
//            (CPU time, not wall time: load slows it but hardly adds to it)
//   ingest.* the sidecar's CPU per step record through one websocket, without the journal and with it
//            (fdatasync before each ack), in interleaved rounds, and the ratio of the two
//   hook.*   the Python hook's CPU per step over a bare loop's, and that as a ratio to the same loop's
//            Python floor, the three loops timed in turn (python-hook/bench/bench_hook.py)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fakeNvidiaSmi, ingestRounds } from './bench-ingest.mjs';
import { measureStart } from './bench-start.mjs';
import { cpuSeconds, judge, median, readJson, writeResults } from './bench-results.mjs';
import { startSidecar as startSidecarOf } from './sidecar.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const from = argv.includes('--from') ? argv[argv.indexOf('--from') + 1] : null;
const RESULTS = path.join(root, 'bench-results', 'latest.json');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** Stops a sidecar and waits for it: one still writing to a closed pipe would die of EPIPE. */
const stop = (child) => (child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => (child.once('exit', resolve), child.kill('SIGTERM'))));
const startSidecar = (args, env = process.env) => startSidecarOf(path.join(root, 'dist/cli.js'), args, { env });

async function start() {
  const result = await measureStart({ rounds: quick ? 5 : 9, only: ['--help', 'report', 'gate', 'replay', 'serve'] });
  const figures = { 'start.bare_node_ms': result.bare_node_ms };
  for (const [name, entry] of Object.entries(result.commands)) {
    const key = name.replace(/^--/, '');
    figures[`start.${key}_ms`] = entry.ms;
    figures[`start.${key}_ratio_to_bare_node`] = entry.ratio_to_bare_node;
  }
  return figures;
}

async function idle() {
  const seconds = quick ? 8 : 20;
  const measure = async (args, env) => {
    const { child } = await startSidecar(args, env);
    try {
      await sleep(2000); // past the start
      const cpu0 = cpuSeconds(child.pid);
      const t0 = Date.now();
      await sleep(seconds * 1000);
      return (100 * (cpuSeconds(child.pid) - cpu0)) / ((Date.now() - t0) / 1000);
    } finally {
      await stop(child);
    }
  };
  const env = fakeNvidiaSmi(8);
  const none = [];
  const eight = [];
  for (let round = 0; round < (quick ? 1 : 3); round++) {
    none.push(await measure(['--gpu-source', 'none'], process.env));
    eight.push(await measure(['--gpu-source', 'nvidia-smi', '--gpu-interval', '500'], env));
  }
  return {
    'idle.cpu_pct_no_gpu_source': Number(median(none).toFixed(3)),
    'idle.cpu_pct_8_gpus': Number(median(eight).toFixed(3)),
    // What the GPU source adds, in % of a core: a ratio to an idle sidecar of 0.3% (0.1% a /proc tick
    // over 10 s) would judge the clock's resolution, not the collector.
    'idle.cpu_pct_added_by_8_gpus': Number((median(eight) - median(none)).toFixed(3)),
  };
}

async function ingest() {
  const out = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-check-'));
  const sidecars = [];
  try {
    sidecars.push(await startSidecar(['--gpu-source', 'none', '--max-jobs', '16']));
    sidecars.push(await startSidecar(['--gpu-source', 'none', '--max-jobs', '16', '--out', out]));
    // A round each first, left out: the first frames run before V8 has compiled the path.
    for (const { child, port } of sidecars) await ingestRounds(port, child.pid, { frames: 200, rowsPerFrame: 256, rounds: 1, job: 'warm-up' });
    const [plain, journaled] = [[], []];
    // Interleaved, a round each in turn: the ratio is of rounds the same load slowed alike.
    for (let round = 0; round < (quick ? 3 : 5); round++) {
      for (const [{ child, port }, into] of [[sidecars[0], plain], [sidecars[1], journaled]]) {
        const [result] = await ingestRounds(port, child.pid, { frames: 200, rowsPerFrame: 256, rounds: 1, job: `check-${round}` });
        into.push((result.cpu_seconds / result.records) * 1e6);
      }
    }
    return {
      'ingest.cpu_us_per_record': Number(median(plain).toFixed(3)),
      'ingest.journal_cpu_us_per_record': Number(median(journaled).toFixed(3)),
      'ingest.journal_ratio_to_no_journal': Number((median(journaled) / median(plain)).toFixed(2)),
    };
  } finally {
    for (const { child } of sidecars) await stop(child);
    rmSync(out, { recursive: true, force: true });
  }
}

function hook() {
  const python = [process.env.STEPSCOPE_PYTHON, 'python3', '/usr/bin/python3'].find((candidate) => candidate && spawnSync(candidate, ['-c', 'pass']).status === 0);
  const args = [path.join(root, 'python-hook/bench/bench_hook.py'), '--steps', quick ? '20000' : '50000', '--runs', quick ? '5' : '9', '--seconds', quick ? '2' : '5'];
  const run = spawnSync(python, args, { encoding: 'utf8', env: { ...process.env, PYTHONPATH: path.join(root, 'python-hook') }, stdio: ['ignore', 'pipe', 'inherit'] });
  if (run.status !== 0) throw new Error('bench_hook.py failed');
  const report = JSON.parse(run.stdout).unreachable;
  return {
    'hook.overhead_us_per_step_cpu': report.overhead_us_per_step_cpu,
    'hook.overhead_ratio_to_python_floor': report.overhead_ratio_to_floor,
    'hook.sender_cpu_pct_1000_steps_per_s': report.bg_cpu_pct,
  };
}

let figures;
if (from) figures = readJson(from).figures;
else {
  figures = {};
  for (const [name, part] of [['start', start], ['idle', idle], ['ingest', ingest], ['hook', hook]]) {
    const t0 = Date.now();
    Object.assign(figures, await part());
    console.error(`bench:check: ${name} measured in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  }
  writeResults(RESULTS, { date: new Date().toISOString(), node: process.version, machine: `${os.cpus().length} x ${os.cpus()[0]?.model}`, load: os.loadavg(), quick, figures });
}
const rows = judge(figures, readJson(path.join(root, 'bench-budgets.json')).budgets);
for (const row of rows) {
  const bound = row.max !== null ? `≤ ${row.max}` : `≥ ${row.min}`;
  console.log(`${row.ok ? 'ok  ' : 'OVER'} ${row.name.padEnd(40)} ${String(row.value).padStart(9)}  (budget ${bound})`);
}
const over = rows.filter((row) => !row.ok);
if (over.length) {
  for (const row of over) console.error(`bench:check: ${row.name} = ${row.value} against ${row.max !== null ? `at most ${row.max}` : `at least ${row.min}`}: ${row.why}`);
  process.exit(1);
}
console.log(`bench:check: ${rows.length} budgets kept${from ? '' : ` (figures in ${path.relative(root, RESULTS)})`}`);
// Stray sockets or timers must not keep the check from ending.
process.exit(0);
