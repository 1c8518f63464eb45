// The idle sidecar's CPU (issue 24, target 8), side by side with another build: no GPU source and 8
// stand-in GPUs at 500 ms, no hooks. Idle sidecars hardly compete, so the four run at once; after a
// settle, the CPU over a window from /proc: the sidecar's own, and its reaped children's (each
// compute-apps reading is a process; the stand-in nvidia-smi is Node, so that figure is the
// stand-in's, not a real nvidia-smi's). After `npm run build`:
//   node scripts/bench-idle.mjs [--baseline <another build's dist/cli.js>] [--settle 60] [--window 90]
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { fakeNvidiaSmi } from './bench-ingest.mjs';
import { startSidecar } from './sidecar.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values: opts } = parseArgs({ options: { baseline: { type: 'string' }, settle: { type: 'string', default: '60' }, window: { type: 'string', default: '90' } } });
const builds = { ...(opts.baseline ? { baseline: path.resolve(opts.baseline) } : {}), this: path.join(ROOT, 'dist/cli.js') };
const env = fakeNvidiaSmi(8);
/** [own, reaped children] CPU ticks of a process. */
const ticks = (pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return [Number(f[11]) + Number(f[12]), Number(f[13]) + Number(f[14])];
};
const runs = [];
try {
  for (const [name, cli] of Object.entries(builds)) {
    runs.push({ name, source: 'none', ...(await startSidecar(cli, ['--gpu-source', 'none'])) });
    runs.push({ name, source: 'nvidia-smi, 8 GPUs', ...(await startSidecar(cli, ['--gpu-source', 'nvidia-smi', '--gpu-interval', '500'], { env })) });
  }
  await new Promise((resolve) => setTimeout(resolve, Number(opts.settle) * 1000));
  const before = runs.map((run) => ticks(run.child.pid));
  const t0 = Date.now();
  await new Promise((resolve) => setTimeout(resolve, Number(opts.window) * 1000));
  const wall = (Date.now() - t0) / 1000;
  // /proc counts in 10 ms ticks: ticks / seconds is % of a core.
  const results = runs.map((run, i) => {
    const [own, children] = ticks(run.child.pid).map((value, j) => value - before[i][j]);
    return { build: run.name, source: run.source, sidecar_pct: Number((own / wall).toFixed(3)), children_pct: Number((children / wall).toFixed(3)) };
  });
  console.log(JSON.stringify({ date: new Date().toISOString(), node: process.version, settle_s: Number(opts.settle), window_s: Number(opts.window), results }, null, 2));
} finally {
  for (const run of runs) run.child.kill('SIGTERM');
}
