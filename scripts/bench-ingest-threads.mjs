// node scripts/bench-ingest-threads.mjs [--journal] [--rounds 10] [--rows-per-frame 256] [--cli dist/cli.js]: where the
// sidecar's ingest CPU goes, by thread. The same rounds as `bench.mjs ingest` (400 frames of 256
// records, each round a job of its own, sent at once and timed to the last ack), after a warm-up
// round; each thread's CPU summed over all rounds (not a median: the GC helpers' work comes in bursts
// that a median of rounds leaves out) and divided by the records. Threads of one name are added up:
// MainThread (JavaScript, the event loop), V8Worker (the collector's parallel and concurrent work),
// libuv-worker (file system calls: the journal's write and fdatasync); Node 20 names every thread
// `node`. --rows-per-frame below 8: frames the journal keeps as rows. Needs `npm run build` first.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ingestRounds } from './bench-ingest.mjs';
import { startSidecar } from './sidecar.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const option = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : process.argv[at + 1];
};
const rounds = Number(option('rounds', '10'));
const rowsPerFrame = Number(option('rows-per-frame', '256'));
const cli = path.resolve(option('cli', path.join(root, 'dist/cli.js')));
const journal = process.argv.includes('--journal');

/** CPU ticks of each of the process's threads, by thread id and name. */
function threadTicks(pid) {
  const ticks = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks.set(tid, { name, ticks: Number(fields[11]) + Number(fields[12]) });
  }
  return ticks;
}

const out = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-threads-'));
// Small frames arrive faster than a hook's frame-rate limit allows: it is lifted.
const { child, port } = await startSidecar(cli, ['--gpu-source', 'none', '--max-jobs', String(rounds + 2), '--max-frame-rate', '100000', ...(journal ? ['--out', out] : [])]);
try {
  await ingestRounds(port, child.pid, { frames: 100, rowsPerFrame, rounds: 1, job: 'warm-up' });
  const before = threadTicks(child.pid);
  const results = await ingestRounds(port, child.pid, { frames: 400, rowsPerFrame, rounds });
  const after = threadTicks(child.pid);
  const records = results.reduce((sum, round) => sum + round.records, 0);
  const byName = {};
  for (const [tid, { name, ticks }] of after) byName[name] = (byName[name] ?? 0) + ticks - (before.get(tid)?.ticks ?? 0);
  const perRecord = (ticks) => Number(((ticks / 100 / records) * 1e6).toFixed(3));
  const threads = Object.fromEntries(Object.entries(byName).filter(([, ticks]) => ticks > 0).map(([name, ticks]) => [name, perRecord(ticks)]));
  const total = perRecord(Object.values(byName).reduce((sum, ticks) => sum + ticks, 0));
  console.log(JSON.stringify({ node: process.version, cli: path.relative(process.cwd(), cli), journal, rows_per_frame: rowsPerFrame, records, cpu_us_per_record: { total, ...threads } }));
} finally {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
  rmSync(out, { recursive: true, force: true });
}
