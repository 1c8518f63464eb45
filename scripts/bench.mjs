// npm run bench: the figures behind BENCHMARKS.md. Medians over repeated runs; ratios against a
// baseline measured in the same run, because these machines are noisy.
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fakeNvidiaSmi, ingestRounds } from './bench-ingest.mjs';
import { cpuSeconds, median } from './bench-results.mjs';
import { startSidecar as startSidecarOf } from './sidecar.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const only = process.argv[2];

// BENCH_CLI: another build's cli.js (a clone of main's dist), for a baseline in the same run.
const startSidecar = (args = ['--gpu-source', 'none'], env = process.env) => startSidecarOf(path.resolve(process.env.BENCH_CLI ?? path.join(root, 'dist/cli.js')), args, { env });

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
  return JSON.parse(run.stdout);
}

/** What knowing where a stalled rank is costs the training thread (python-hook/bench/bench_where.py). */
function whereBench() {
  const run = spawnSync(python(), [path.join(root, 'python-hook/bench/bench_where.py')], { encoding: 'utf8', env: { ...process.env, PYTHONPATH: path.join(root, 'python-hook') }, stdio: ['ignore', 'pipe', 'inherit'] });
  if (run.status !== 0) throw new Error('bench_where.py failed');
  return JSON.parse(run.stdout);
}

async function ingestThroughput(port, pid, { frames = 400, rowsPerFrame = 256, rounds = 5 } = {}) {
  const results = (await ingestRounds(port, pid, { frames, rowsPerFrame, rounds })).map((r) => ({ records_per_s: r.records / r.seconds, sidecar_cpu_us_per_record: (r.cpu_seconds / r.records) * 1e6 }));
  return {
    records_per_round: frames * rowsPerFrame,
    rounds,
    median_records_per_s: Math.round(median(results.map((r) => r.records_per_s))),
    median_sidecar_cpu_us_per_record: Number(median(results.map((r) => r.sidecar_cpu_us_per_record)).toFixed(2)),
  };
}

/** Sidecar CPU per second of wall time, idle (no hooks), with and without a GPU source. */
async function collectorCost({ seconds = 10, rounds = 3 } = {}) {
  const measure = async (args, env) => {
    const { child } = await startSidecar(args, env);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const cpu0 = cpuSeconds(child.pid);
    const t0 = Date.now();
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    const cpu = cpuSeconds(child.pid) - cpu0;
    const wall = (Date.now() - t0) / 1000;
    child.kill('SIGTERM');
    return (cpu / wall) * 100;
  };
  const env = fakeNvidiaSmi(8);
  const baseline = [];
  const eightGpus = [];
  for (let i = 0; i < rounds; i++) {
    baseline.push(await measure(['--gpu-source', 'none'], process.env));
    eightGpus.push(await measure(['--gpu-source', 'nvidia-smi', '--gpu-interval', '500'], env));
  }
  const b = median(baseline);
  const g = median(eightGpus);
  return {
    seconds_per_round: seconds,
    rounds,
    sidecar_cpu_pct_no_gpu_source: Number(b.toFixed(3)),
    sidecar_cpu_pct_nvidia_smi_8_gpus_500ms: Number(g.toFixed(3)),
    nvidia_smi_collector_cpu_pct: Number((g - b).toFixed(3)),
  };
}

const report = { date: new Date().toISOString(), machine: `${os.cpus().length} x ${os.cpus()[0]?.model}`, node: process.version };
// Each ingest round is a job of its own: room for all of them.
const { child, port } = await startSidecar(['--gpu-source', 'none', '--max-jobs', '16']);
try {
  if (!only || only === 'hook') {
    // Measures the hook pointed at nothing and at this live sidecar, in one run.
    report.hook = hookBench(`ws://127.0.0.1:${port}/v1/ingest`);
  }
  if (!only || only === 'ingest') {
    report.ingest = await ingestThroughput(port, child.pid);
    // The same with --out: every acknowledgement waits for the journal (write + fdatasync).
    const out = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-out-'));
    const journaled = await startSidecar(['--gpu-source', 'none', '--max-jobs', '16', '--out', out]);
    try {
      report.ingest_with_journal = await ingestThroughput(journaled.port, journaled.child.pid);
    } finally {
      journaled.child.kill('SIGTERM');
    }
    report.ingest_with_journal.cpu_ratio_to_without = Number((report.ingest_with_journal.median_sidecar_cpu_us_per_record / report.ingest.median_sidecar_cpu_us_per_record).toFixed(2));
  }
  if (!only || only === 'counters') report.counters = await collectorCost();
  if (!only || only === 'where') report.where = whereBench();
} finally {
  child.kill('SIGTERM');
}
console.log(JSON.stringify(report, null, 2));
