// The sidecar's memory under a burst (issue 24, target 1): `ranks` real hook processes (the explicit
// API of python-hook, stepping as fast as they can or at `--rate` steps/s each) against the real
// sidecar for `--seconds`, its RSS read from /proc every 250 ms. Then every rank closes, and what it
// lost (dropped by its queue, or never acknowledged) is counted from the hook's own stats. The
// sidecar's CPU (all its threads) is read from the run's third second to its end, in % of a core:
// what a pod of this many ranks at this rate costs. --watched: a viewer reads ws /v1/stream the
// whole time (the hooks then send every 0.08 s instead of every 0.5 s, and the sidecar ticks on them).
// --attach PID:PORT: a sidecar already running (a container's, as a pod runs it: its pid as this host
// sees it, its port published on 127.0.0.1; STEPSCOPE_TOKEN in the environment where it wants one),
// measured the same way (its peak from the samples, not its lifetime's VmHWM) and left running.
//   node scripts/bench-burst.mjs [--ranks 8] [--seconds 300] [--rate 0] [--journal] [--watched] [--cli dist/cli.js] [--attach PID:PORT]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { cpuSeconds } from './bench-results.mjs';
import { startSidecar, untilReady } from './sidecar.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : process.argv[at + 1];
};
const RANKS = Number(arg('ranks', 8));
const SECONDS = Number(arg('seconds', 300));
const RATE = Number(arg('rate', 0));
const CLI = path.resolve(arg('cli', path.join(root, 'dist/cli.js')));
const JOURNAL = process.argv.includes('--journal');
const WATCHED = process.argv.includes('--watched');
const PYTHON = process.env.STEPSCOPE_PYTHON ?? 'python3';

// One rank: the README's loop (loader, two phases, step) with nothing in it, then close() and its delivery counters as JSON.
const RANK = `
import json, sys, time
import stepscope
rank, ranks, seconds, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
scope = stepscope.init(url=sys.argv[5], job="burst", rank=rank, world_size=ranks, cuda=False, comm=False)
end = time.monotonic() + seconds
gap = 1.0 / rate if rate > 0 else 0.0
next_at = time.monotonic()
while True:
    now = time.monotonic()
    if now >= end:
        break
    if gap:
        if now < next_at:
            time.sleep(next_at - now)
        next_at += gap
    for batch in scope.loader(range(1 if gap else 64)):
        with scope.phase("h2d"):
            moved = batch
        with scope.phase("compute"):
            result = moved
        scope.step(samples=8)
ok = scope.close(timeout=120)
stats = scope.stats()
print(json.dumps({"ok": ok, "records": stats["records"], "acked": stats["acked"], "dropped": stats["dropped"], "reconnects": stats["reconnects"], "pending": stats["pending"]}))
`;

const status = (pid) => readFileSync(`/proc/${pid}/status`, 'utf8');
const kib = (text, field) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(text)?.[1] ?? NaN);

const ATTACH = arg('attach', null)?.split(':').map(Number) ?? null;
if (ATTACH && (ATTACH.length !== 2 || !ATTACH.every((n) => Number.isInteger(n) && n > 0))) {
  console.error('--attach PID:PORT: the sidecar\'s pid and its port, e.g. --attach 4242:9701');
  process.exit(2);
}
const token = process.env.STEPSCOPE_TOKEN ? { headers: { authorization: `Bearer ${process.env.STEPSCOPE_TOKEN}` } } : {};
const out = JOURNAL && !ATTACH ? mkdtempSync(path.join(os.tmpdir(), 'stepscope-burst-')) : null;
const { child, port } = ATTACH
  ? { child: { pid: ATTACH[0], exitCode: null }, port: ATTACH[1] }
  : await startSidecar(CLI, ['--gpu-source', 'none', ...(out ? ['--out', out] : [])]);
// An attached sidecar may still be replaying its journal, as startSidecar waits for.
if (ATTACH) await untilReady(port, token);
const url = `ws://127.0.0.1:${port}/v1/ingest`;
let viewerFrames = 0;
const viewer = WATCHED ? new WebSocket(`ws://127.0.0.1:${port}/v1/stream`, token).on('message', () => (viewerFrames += 1)) : null;
if (viewer) await new Promise((resolve, reject) => (viewer.once('open', resolve), viewer.once('error', reject)));
const rss = [];
const sampler = setInterval(() => rss.push({ at: Date.now(), kib: kib(status(child.pid), 'VmRSS') }), 250);
const t0 = Date.now();
const cpu = [];
// From the third second (past the hellos) to the run's end; a run of 2 s or less has no CPU figure.
const cpuTimers = SECONDS > 2 ? [2000, SECONDS * 1000].map((ms) => setTimeout(() => child.exitCode === null && cpu.push({ at: Date.now(), s: cpuSeconds(child.pid) }), ms)) : [];
const ranks = Array.from({ length: RANKS }, (_, rank) => {
  const proc = spawn(PYTHON, ['-c', RANK, String(rank), String(RANKS), String(SECONDS), String(RATE), url], {
    env: { ...process.env, PYTHONPATH: path.join(root, 'python-hook') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let text = '';
  proc.stdout.setEncoding('utf8').on('data', (chunk) => (text += chunk));
  return new Promise((resolve, reject) => proc.once('exit', (code) => (code === 0 ? resolve(JSON.parse(text.trim().split('\n').at(-1))) : reject(new Error(`rank ${rank} exited ${code}`)))));
});
const results = await Promise.all(ranks);
const wall = (Date.now() - t0) / 1000;
clearInterval(sampler);
for (const timer of cpuTimers) clearTimeout(timer);
viewer?.close();
// VmHWM is the whole life's peak: an attached sidecar's own, from before this run too, so the samples' there.
// Linux updates it lazily (a 250 ms sample has read 1 MiB above it), so never below the samples.
const sampled = Math.max(...rss.map((s) => s.kib));
const peak = ATTACH ? sampled : Math.max(sampled, kib(status(child.pid), 'VmHWM'));
// Its journal is removed once it has exited: it writes its last checkpoint as it stops.
if (!ATTACH) {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}
if (out) rmSync(out, { recursive: true, force: true });

const mib = (k) => Math.round(k / 1024);
// RSS per tenth of the run: flat, or growing.
const tenths = Array.from({ length: 10 }, (_, i) => {
  const from = t0 + (i * SECONDS * 1000) / 10;
  const inside = rss.filter((s) => s.at >= from && s.at < from + (SECONDS * 1000) / 10);
  return inside.length ? mib(Math.max(...inside.map((s) => s.kib))) : null;
});
// After the run's seconds, while the ranks close: each sends what its queue still holds.
const closing = rss.filter((s) => s.at >= t0 + SECONDS * 1000);
const records = results.reduce((sum, r) => sum + r.records, 0);
const acked = results.reduce((sum, r) => sum + r.acked, 0);
console.log(
  JSON.stringify(
    {
      cli: ATTACH ? `attached to pid ${ATTACH[0]}, port ${ATTACH[1]}` : path.relative(root, CLI) || CLI,
      node: ATTACH ? null : process.version, // an attached sidecar's Node is its own
      ranks: RANKS,
      seconds: SECONDS,
      rate_per_rank: RATE || 'as fast as they can',
      journal: ATTACH ? 'as the attached sidecar runs' : JOURNAL,
      steps_per_s: Math.round(records / SECONDS),
      peak_rss_mib: mib(peak),
      rss_max_mib_by_tenth: tenths,
      rss_max_mib_closing: closing.length ? mib(Math.max(...closing.map((s) => s.kib))) : null,
      watched: WATCHED,
      viewer_frames: viewer ? viewerFrames : null,
      sidecar_cpu_pct: cpu.length === 2 ? Number(((100 * (cpu[1].s - cpu[0].s)) / ((cpu[1].at - cpu[0].at) / 1000)).toFixed(2)) : null,
      records,
      acked,
      dropped: results.reduce((sum, r) => sum + r.dropped, 0),
      lost: records - acked,
      reconnects: results.reduce((sum, r) => sum + r.reconnects, 0),
      all_closed_ok: results.every((r) => r.ok),
      wall_s: Math.round(wall),
    },
    null,
    2,
  ),
);
