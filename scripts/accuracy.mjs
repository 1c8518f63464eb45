#!/usr/bin/env node
// npm run accuracy: how often stepscope's verdict is right, measured against ground truth on real
// programs (scripts/accuracy/train.py, plain PyTorch on the CPU) run unmodified under `stepscope run`
// against a real sidecar. Each cell's truth is measured by ablation in the same run: the same loop
// over the same batches made beforehand (scripts/accuracy/train.py --ready), so the share of time
// the data cost is 1 - t_ready / t_real. Writes ACCURACY.md (see there for what it holds).
//
//   npm run accuracy [-- --out ACCURACY.md] [--json results.json] [--before DIR [--before-label TEXT]]
//                    [--python PY] [--stepscope DIR] [--only SUBSTRING] [--seconds 6]
//                    [--traceml auto|off|all] [--label TEXT] [--merge results.json] [--keep]
//   npm run accuracy -- --render results.json [--out FILE]   (no runs: the Markdown again)
//
// --before DIR replays each cell's journal with another checkout (its dist/ built): the verdicts of
// the rules before a change on exactly the same runs, beside this checkout's. --stepscope DIR runs
// the grid on another checkout's sidecar and hook altogether (--label names a folder that is no git
// checkout). --keep keeps each cell's journals and summaries (their folder is printed).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { venvPython } from './python-venv.mjs';
import { TRACEML_VERSION, tracemlPython as tracemlVenv } from './traceml-venv.mjs';
import { startSidecar as startSidecarOf } from './sidecar.mjs';
import { inTurns, signalRun } from './accuracy/in-turns.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const HERE = path.join(ROOT, 'scripts', 'accuracy');

const { values: opts } = parseArgs({
  options: {
    out: { type: 'string', default: path.join(ROOT, 'ACCURACY.md') },
    json: { type: 'string' },
    before: { type: 'string' },
    'before-label': { type: 'string' },
    python: { type: 'string' },
    stepscope: { type: 'string', default: ROOT },
    only: { type: 'string' },
    seconds: { type: 'string', default: '6' },
    traceml: { type: 'string', default: 'auto' },
    label: { type: 'string' },
    merge: { type: 'string' },
    render: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const SECONDS = Number(opts.seconds);
const STEPSCOPE = path.resolve(opts.stepscope);
const CLI = path.join(STEPSCOPE, 'dist', 'cli.js');
if (!opts.render && !existsSync(CLI)) throw new Error(`no ${CLI}: build that checkout first (npm run build)`);

/** The bars the truth is classed by: the documented ones (docs/verdicts.md), fixed here so that every version is judged alike. */
const BARS = { input: 0.2, host: 0.25, moderate: 0.05 };

// ---------------------------------------------------------------------------------------------------
// Processes

const children = new Set();
function track(child) {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}
function killAll() {
  for (const child of children) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      try {
        child.kill('SIGKILL');
      } catch {
        // gone
      }
    }
  }
}
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => (killAll(), process.exit(1)));

/**
 * Runs a command to its end (in a process group of its own); its last stdout line parsed as JSON (the
 * programs print their result there) unless `json` is false. `started` gets the child at once.
 */
function run(command, args, env = {}, timeoutMs = 180_000, json = true, started = () => {}) {
  return new Promise((resolve, reject) => {
    const child = track(spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true }));
    started(child);
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      const last = stdout.trim().split('\n').at(-1) ?? '';
      let result = null;
      try {
        result = JSON.parse(last);
      } catch {
        // no result
      }
      if (code !== 0 || (json && !result)) reject(new Error(`${path.basename(command)} ${args.slice(-12).join(' ')} exited ${code}:\n${stderr.slice(-3000)}`));
      else resolve({ result, stdout, stderr });
    });
  });
}

/** A sidecar of the cell's own (its journal holds the cell alone), gone once both of its jobs have ended. */
async function startSidecar(out) {
  // A job ends when its hook says so; the grace is for a hook gone silent, which a loaded machine can make of a live one.
  // Not --exit-on-end: a cell's two jobs start apart (the ablation makes its batches first), and the
  // sidecar left once the first ended when the second had not said hello yet (2 cells of a grid run
  // lost their ablation's summary so). It is stopped once both summaries are written.
  const { child, port } = await startSidecarOf(CLI, ['--gpu-source', 'none', '--out', out, '--end-grace', '5'], { detached: true });
  track(child);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return { child, exited, url: `ws://127.0.0.1:${port}/v1/ingest` };
}

/**
 * The summaries another checkout makes of a cell's journal (`stepscope replay --write`), by job: the
 * rules before a change, on the same runs. The journal holds the whole cell (no checkpoint has
 * replaced its first segments: a cell lasts seconds).
 */
function replayedWith(checkout, journal, jobs) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-accuracy-before-'));
  try {
    const replay = spawnSync(process.execPath, [path.join(checkout, 'dist', 'cli.js'), 'replay', journal, '--format', 'json', '--write', dir], { encoding: 'utf8', timeout: 120_000 });
    if (replay.status !== 0) throw new Error(`replay with ${checkout} failed: ${replay.stderr.slice(-2000)}`);
    return new Map(jobs.map((job) => [job, JSON.parse(readFileSync(path.join(dir, `summary-${job}.json`), 'utf8'))]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The truth runs: the program and its ablation in turns (scripts/accuracy/in-turns.mjs), swapping
 * every 100 ms, each timed in its training thread's CPU time. Each runs `seconds` on the clock, so
 * about half of it.
 */
async function truthInTurns(command, realArgs, ablatedArgs, env) {
  const children = [];
  const runs = [realArgs, ablatedArgs].map((args) => run(command, args, env, 300_000, true, (child) => children.push(child)));
  const [real, ablated] = await inTurns(children, Promise.all(runs));
  return { real: real.result, ablated: ablated.result };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function summaryOf(out, job, timeoutMs = 30_000) {
  const file = path.join(out, `summary-${job}.json`);
  const until = Date.now() + timeoutMs;
  while (!existsSync(file)) {
    if (Date.now() > until) throw new Error(`no ${file}: the sidecar did not end job ${job}`);
    await sleep(100);
  }
  return JSON.parse(readFileSync(file, 'utf8'));
}

// ---------------------------------------------------------------------------------------------------
// Pythons: stepscope's grid on one torch; TraceML (which needs torch ≥ 2) in a bench venv beside it

function torchVersion(python) {
  const probe = spawnSync(python, ['-c', 'import torch, sys; print(torch.__version__); print(sys.version.split()[0])'], { encoding: 'utf8', timeout: 120_000 });
  return probe.status === 0 ? probe.stdout.trim().split('\n') : null;
}

/** TraceML's venv (scripts/traceml-venv.mjs), unless --traceml off. */
function tracemlPython(torchPython) {
  if (opts.traceml === 'off') return { python: null, why: 'TraceML not run (--traceml off)' };
  return tracemlVenv(torchPython);
}

// ---------------------------------------------------------------------------------------------------
// The grid

const STEP_MS = [0.5, 1, 10, 100];
const LOAD = [0, 0.05, 0.1, 0.2, 0.3, 0.5];

/** A cap on steps well past SECONDS of the loop at the cell's step time: the runs stop on time (--seconds). */
const stepsFor = (stepMs) => Math.max(480, Math.round((4 * SECONDS * 1000) / stepMs));
/**
 * Both runs of a cell stop after this long: SECONDS, or for slow steps long enough for the warm-up
 * (20 steps), a window and the hold before the verdict, and the verdict to hold most of the run.
 */
const secondsFor = (stepMs) => ['--seconds', String(Math.max(SECONDS, (120 * stepMs) / 1000))];
/** The truth runs take turns: each gets about half of this on the clock, at least 40 steps of it. */
const truthSecondsFor = (stepMs) => ['--seconds', String(Math.max(SECONDS, (80 * stepMs) / 1000))];

function cells(cal) {
  const unitsFor = (ms) => Math.round(ms * cal.units_per_ms);
  // calibrate.py keys widths by Python's str() of each target: match them by value.
  const widths = new Map(Object.entries(cal.hidden).map(([ms, width]) => [Number(ms), width]));
  const hidden = (ms) => widths.get(Number(ms.toPrecision(6)));
  const grid = STEP_MS.flatMap((stepMs) =>
    LOAD.map((load) => ({
      name: `grid-${String(stepMs).replace('.', '_')}ms-${Math.round(load * 100)}pct`,
      kind: 'input',
      stepMs,
      load,
      real: ['--steps', String(stepsFor(stepMs)), '--hidden', String(hidden(stepMs * (1 - load))), '--load-units', String(unitsFor(stepMs * load))],
      ablated: ['--steps', String(stepsFor(stepMs)), '--hidden', String(hidden(stepMs * (1 - load))), '--load-units', String(unitsFor(stepMs * load)), '--ready'],
      traceml: stepMs === 1 || opts.traceml === 'all',
    })),
  );
  return [
    ...grid,
    {
      name: 'host-eval-10ms',
      kind: 'host',
      stepMs: 10,
      what: 'evaluation: 12 batches under no_grad every 4 steps',
      real: ['--steps', String(stepsFor(10)), '--hidden', String(hidden(10)), '--eval-every', '4', '--eval-batches', '12'],
      ablated: ['--steps', String(stepsFor(10)), '--hidden', String(hidden(10))],
      traceml: true,
    },
    {
      name: 'host-logging-0_5ms',
      kind: 'host',
      stepMs: 0.5,
      what: 'per-step logging: every parameter norm (.item()) as a JSON line, flushed',
      real: ['--steps', String(stepsFor(0.5)), '--hidden', String(hidden(0.5)), '--layers', '4', '--log-every-step', '--log-file', path.join(os.tmpdir(), `stepscope-accuracy-${process.pid}.log`)],
      ablated: ['--steps', String(stepsFor(0.5)), '--hidden', String(hidden(0.5)), '--layers', '4'],
      traceml: true,
    },
    {
      name: 'starved-workers-10ms',
      kind: 'input',
      stepMs: 10,
      load: null,
      what: '2 loader workers (per-item work, default collate) beside a neighbour keeping 2 cores busy',
      neighbour: 2,
      workers: 2,
      real: ['--steps', String(stepsFor(10)), '--hidden', String(hidden(10)), '--batch-items', '--workers', '2', '--load-units', String(unitsFor(12))],
      ablated: ['--steps', String(stepsFor(10)), '--hidden', String(hidden(10)), '--batch-items', '--workers', '2', '--load-units', String(unitsFor(12)), '--ready'],
      traceml: true,
    },
  ].filter((cell) => !opts.only || cell.name.includes(opts.only));
}

// ---------------------------------------------------------------------------------------------------
// Truth and what each tool said

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  return s[Math.floor(at)] + (s[Math.ceil(at)] - s[Math.floor(at)]) * (at - Math.floor(at));
};

/**
 * 1 − t_ablated / t_real from the mean step time over ten blocks of steady steps each, with an
 * interval of two standard errors (from the blocks' spread, propagated through the ratio). Without
 * workers, the times are the training thread's CPU time (the runs took turns: see inTurns); with
 * workers loading in parallel, the clock's.
 */
function truthOf(cell, real, ablated) {
  const clock = cell.workers ? 'wall' : 'cpu';
  const pick = (run) => (clock === 'cpu' ? run.cpu_ms_blocks : run.step_ms_blocks);
  const stats = (blocks) => {
    const m = blocks.reduce((a, b) => a + b, 0) / blocks.length;
    const sd = Math.sqrt(blocks.reduce((a, b) => a + (b - m) ** 2, 0) / Math.max(1, blocks.length - 1));
    return { m, rel: sd / Math.sqrt(blocks.length) / m };
  };
  const r = stats(pick(real));
  const a = stats(pick(ablated));
  const ratio = a.m / r.m;
  const half = 2 * ratio * Math.hypot(r.rel, a.rel);
  const wall = 1 - stats(ablated.step_ms_blocks).m / stats(real.step_ms_blocks).m;
  return { clock, lost: 1 - ratio, low: 1 - ratio - half, high: 1 - ratio + half, realMs: r.m, ablatedMs: a.m, wallLost: wall };
}

const levelOf = (share, bar) => (share >= bar ? 'high' : share >= BARS.moderate ? 'moderate' : 'none');

/** The class the truth puts a cell in: the verdict the documented bars call for, and the limiter's level. */
function truthClass(cell, truth) {
  const bar = cell.kind === 'host' ? BARS.host : BARS.input;
  const verdict = truth.lost >= bar ? (cell.kind === 'host' ? 'host-bound' : 'input-bound') : 'compute-bound';
  // Borderline: the measured range straddles a bar, so either side is right: the verdict's bar for
  // the verdict, either bar for the level.
  const straddles = (b) => truth.low < b && truth.high >= b;
  return { verdict, level: levelOf(truth.lost, bar), borderline: straddles(bar), borderlineLevel: straddles(bar) || straddles(BARS.moderate) };
}

/** What stepscope's summary said of the limiter the cell is about: its verdict, cause, share and level. */
function stepscopeSaid(summary, cell) {
  const limiter = cell.kind === 'host' ? 'host' : 'input';
  const listed = (summary.limiters ?? []).find((l) => l.limiter === limiter);
  const share = listed?.share ?? (limiter === 'host' ? summary.breakdown.other : summary.breakdown.data);
  const verdictLimiter = { 'input-bound': 'input', 'host-bound': 'host' }[summary.verdict];
  // Before limiters were listed, a share below the verdict's bar was named nowhere: no level.
  const level = listed ? listed.level : verdictLimiter === limiter ? 'high' : 'none';
  return { verdict: summary.verdict, cause: summary.cause, share, level, causes: summary.causes ?? null, headline: summary.headline };
}

/** TraceML's verdict from its final_summary.json, as stepscope's names (INPUT-BOUND → input-bound), and the cell's limiter's share. */
function tracemlSaid(file, cell) {
  const summary = JSON.parse(readFileSync(file, 'utf8'));
  const diagnosis = summary.primary_diagnosis ?? {};
  const kind = String(diagnosis.kind ?? 'unknown');
  const names = { INPUT_BOUND: 'input-bound', RESIDUAL_HEAVY: 'host-bound', COMPUTE_BOUND: 'compute-bound', NO_CLEAR_PERFORMANCE_BOTTLENECK: 'compute-bound', H2D_BOUND: 'transfer-bound' };
  const average = summary.step_time?.global?.average ?? {};
  const part = cell.kind === 'host' ? average.residual_ms : average.input_wait_ms;
  const share = typeof part === 'number' && average.step_time_ms > 0 ? part / average.step_time_ms : null;
  // TraceML warns from 10% and calls 20% critical: its "warn" is our moderate.
  const level = names[kind] === (cell.kind === 'host' ? 'host-bound' : 'input-bound') ? (diagnosis.severity === 'crit' ? 'high' : 'moderate') : 'none';
  return { verdict: names[kind] ?? kind.toLowerCase(), severity: diagnosis.severity ?? null, share, level };
}

// ---------------------------------------------------------------------------------------------------

async function main() {
  const started = Date.now();
  const torchPython = venvPython();
  const python = opts.python ?? (torchPython && opts.traceml !== 'off' ? torchPython : '/usr/bin/python3');
  const versions = torchVersion(python);
  if (!versions) throw new Error(`${python} cannot import torch`);
  const traceml = tracemlPython(torchPython);
  const env = { OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1', PYTHONUNBUFFERED: '1', PYTHONPATH: HERE };
  const load0 = os.loadavg();

  console.error(`calibrating on ${python} (torch ${versions[0]}) …`);
  const targets = [...new Set(STEP_MS.flatMap((ms) => LOAD.map((load) => Number((ms * (1 - load)).toPrecision(6)))))];
  const cal = (await run(python, [path.join(HERE, 'calibrate.py'), '--compute-ms', ...targets.map(String)], env)).result;

  const results = [];
  const failed = [];
  try {
    for (const cell of cells(cal)) {
      const t0 = Date.now();
      const out = mkdtempSync(path.join(os.tmpdir(), 'stepscope-accuracy-'));
      const sidecar = await startSidecar(out);
      let neighbour = null;
      if (cell.neighbour) {
        neighbour = track(spawn(python, [path.join(HERE, 'neighbour.py'), '--procs', String(cell.neighbour)], { stdio: ['ignore', 'ignore', 'inherit'], detached: true }));
        await sleep(500);
      }
      try {
        if (neighbour && neighbour.exitCode !== null) throw new Error(`the neighbour exited ${neighbour.exitCode} at its start`);
        const script = path.join(HERE, 'train.py');
        const zeroCode = (job, args) => run(process.execPath, [CLI, 'run', '--url', sidecar.url, '--job', job, '--', python, script, ...args], env);
        // The verdicts: the program and its ablation side by side, each against the sidecar.
        const [ablated, real] = await Promise.all([zeroCode(`${cell.name}-ablated`, [...cell.ablated, ...secondsFor(cell.stepMs)]), zeroCode(cell.name, [...cell.real, ...secondsFor(cell.stepMs)])]);
        // The truth: without workers, the same two in turns (in the training thread's CPU time); with
        // workers loading in parallel, the clock of the side-by-side runs.
        const turns = cell.workers ? null : await truthInTurns(python, [script, ...cell.real, ...truthSecondsFor(cell.stepMs)], [script, ...cell.ablated, ...truthSecondsFor(cell.stepMs)], env);
        const truth = truthOf(cell, turns?.real ?? real.result, turns?.ablated ?? ablated.result);
        const said = stepscopeSaid(await summaryOf(out, cell.name), cell);
        const control = stepscopeSaid(await summaryOf(out, `${cell.name}-ablated`), cell);
        sidecar.child.kill('SIGTERM');
        await sidecar.exited;
        let before = null;
        if (opts.before) {
          const replayed = replayedWith(opts.before, out, [cell.name, `${cell.name}-ablated`]);
          before = { stepscope: stepscopeSaid(replayed.get(cell.name), cell), control: stepscopeSaid(replayed.get(`${cell.name}-ablated`), cell) };
        }
        let tml = null;
        if (traceml.python && cell.traceml) {
          const logs = mkdtempSync(path.join(os.tmpdir(), 'stepscope-traceml-'));
          try {
            // A port of its own: an aggregator left by an interrupted run must not fail the next.
            await run(traceml.traceml, ['run', '--run-name', cell.name, '--logs-dir', logs, '--aggregator-port', String(await freePort()), path.join(HERE, 'train.py'), '--args', ...cell.real, ...secondsFor(cell.stepMs), '--traceml'], env, 240_000, false);
            tml = tracemlSaid(path.join(logs, cell.name, 'final_summary.json'), cell);
          } catch (error) {
            tml = { verdict: 'failed', share: null, level: 'none', error: String(error.message).split('\n').slice(0, 3).join(' ') };
            console.error(`TraceML failed on ${cell.name}: ${tml.error}`);
          } finally {
            rmSync(logs, { recursive: true, force: true });
          }
        }
        const entry = { ...cell, truth, class: truthClass(cell, truth), stepscope: said, control, before, traceml: tml, seconds: (Date.now() - t0) / 1000 };
        results.push(entry);
        // Written as it goes: a run cut short keeps the cells it measured (--merge takes them up).
        if (opts.json) writeFileSync(opts.json, JSON.stringify({ partial: true, at: new Date().toISOString(), versions: { stepscope: opts.label ?? commitOf(STEPSCOPE) }, results }, null, 2) + '\n');
        console.error(
          `${cell.name.padEnd(22)} truth ${(truth.lost * 100).toFixed(1).padStart(5)}% (${(truth.low * 100).toFixed(0)}–${(truth.high * 100).toFixed(0)})  ` +
            `stepscope ${said.verdict} ${said.level} ${(said.share * 100).toFixed(1)}%  control ${control.verdict}` +
            (before ? `  before ${before.stepscope.verdict} (control ${before.control.verdict})` : '') +
            (tml ? `  TraceML ${tml.verdict}${tml.share === null ? '' : ` ${(tml.share * 100).toFixed(1)}%`}` : '') +
            `  (${entry.seconds.toFixed(0)} s)`,
        );
      } catch (error) {
        // One cell that cannot be measured (a crash, a run that never ends) is said, and the grid goes on.
        failed.push({ name: cell.name, error: String(error.message).split('\n').slice(0, 4).join(' ') });
        console.error(`${cell.name}: not measured: ${failed.at(-1).error}`);
      } finally {
        if (neighbour) signalRun(neighbour, 'SIGKILL');
        signalRun(sidecar.child, 'SIGKILL');
        if (opts.keep) console.error(`${cell.name}: its journals and summaries kept in ${out}`);
        else rmSync(out, { recursive: true, force: true });
      }
    }
  } finally {
    killAll();
  }
  const report = {
    at: new Date().toISOString(),
    seconds: (Date.now() - started) / 1000,
    machine: machine(load0),
    versions: {
      node: process.version,
      python: versions[1],
      torch: versions[0],
      python_path: python,
      stepscope: opts.label ?? commitOf(STEPSCOPE),
      before: opts.before ? (opts['before-label'] ?? commitOf(opts.before)) : null,
      traceml: traceml.python ? TRACEML_VERSION : null,
    },
    traceml_why: traceml.why,
    calibration: cal,
    results,
    failed,
  };
  if (opts.merge) {
    // Cells run again (--only) replace theirs in an earlier run's results; the rest are kept, in order.
    const earlier = JSON.parse(readFileSync(opts.merge, 'utf8'));
    const fresh = new Map(report.results.map((r) => [r.name, r]));
    report.results = [...earlier.results.map((r) => fresh.get(r.name) ?? r), ...report.results.filter((r) => !earlier.results.some((e) => e.name === r.name))];
    report.failed = [...(earlier.failed ?? []), ...report.failed].filter((f) => !report.results.some((r) => r.name === f.name));
    report.merged = `${report.results.length - fresh.size} cells from the run of ${earlier.at}, ${fresh.size} from this one`;
  }
  if (opts.json) writeFileSync(opts.json, JSON.stringify(report, null, 2) + '\n');
  writeFileSync(opts.out, markdown(report));
  console.error(`wrote ${path.relative(process.cwd(), opts.out)} in ${report.seconds.toFixed(0)} s`);
}

function commitOf(dir) {
  const rev = spawnSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  const dirty = spawnSync('git', ['-C', dir, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' });
  return rev.status === 0 ? `${rev.stdout.trim()}${dirty.stdout.trim() ? ' (with uncommitted changes)' : ''}` : 'not a git checkout';
}

function machine(load0) {
  const cpus = os.cpus();
  return { cpu: cpus[0]?.model ?? 'unknown', cores: cpus.length, memory_gib: Math.round(os.totalmem() / 2 ** 30), os: `${os.type()} ${os.release()}`, load_start: load0.map((x) => x.toFixed(2)), load_end: os.loadavg().map((x) => x.toFixed(2)) };
}

// ---------------------------------------------------------------------------------------------------
// ACCURACY.md

const pct = (x, digits = 0) => (x === null || x === undefined ? 'n/a' : `${(x * 100).toFixed(digits)}%`);

/** A confusion matrix of the clear cells (borderline ones are counted under it, not in it); a row's `expect` is its right answer. */
function confusion(rows, labels) {
  const clear = rows.filter((r) => !r.borderline);
  const count = (t, s) => clear.filter((r) => r.truth === t && r.said === s).length;
  const lines = [`| truth ↓ / said → | ${labels.said.join(' | ')} | right |`, `|---|${labels.said.map(() => '---:').join('|')}|---:|`];
  for (const t of labels.truth) {
    const all = clear.filter((r) => r.truth === t);
    if (!all.length) continue;
    lines.push(`| **${t}** | ${labels.said.map((s) => count(t, s) || '·').join(' | ')} | ${all.filter((r) => r.said === (r.expect ?? t)).length}/${all.length} |`);
  }
  const borderline = rows.length - clear.length;
  if (borderline) lines.push('', `${borderline} borderline cell${borderline === 1 ? '' : 's'} left out (truth within its error of a bar; in the table of every cell).`);
  return lines;
}

/** The ablation runs: the same loop with the cost removed, which must be compute-bound. */
const CONTROL = 'ablation (control)';

/** Each cell's verdict as `who` said it (stepscope, the rules before, TraceML), with its truth; stepscope's ablations too. */
function verdictRows(report, who) {
  return report.results.flatMap((r) => {
    const said = who === 'traceml' ? r.traceml : who === 'before' ? r.before?.stepscope : r.stepscope;
    if (!said) return [];
    const rows = [{ truth: r.class.verdict, said: said.verdict, borderline: r.class.borderline }];
    const control = who === 'before' ? r.before.control : who === 'stepscope' ? r.control : null;
    if (control) rows.push({ truth: CONTROL, expect: 'compute-bound', said: control.verdict, borderline: false });
    return rows;
  });
}

function levelRows(report, who = 'stepscope') {
  return report.results.flatMap((r) => {
    const said = who === 'before' ? r.before?.stepscope : r.stepscope;
    return said ? [{ truth: r.class.level, said: said.level, borderline: r.class.borderlineLevel }] : [];
  });
}

function errors(report) {
  const by = new Map();
  for (const r of report.results) {
    const key = r.kind === 'host' ? 'host cases' : r.load === null ? 'starved workers' : `${r.stepMs} ms steps`;
    by.set(key, [...(by.get(key) ?? []), r]);
  }
  const signed = (x) => `${x >= 0 ? '+' : '−'}${(Math.abs(x) * 100).toFixed(1)}`;
  return [...by.entries()].map(([key, rs]) => {
    const d = rs.map((r) => r.stepscope.share - r.truth.lost);
    const e = d.map(Math.abs);
    const t = rs.filter((r) => r.traceml?.share != null).map((r) => Math.abs(r.traceml.share - r.truth.lost));
    return `| ${key} | ${rs.length} | ${signed(median(d))} | ${(median(e) * 100).toFixed(1)} | ${(Math.max(...e) * 100).toFixed(1)} | ${t.length ? `${(median(t) * 100).toFixed(1)} / ${(Math.max(...t) * 100).toFixed(1)}` : 'n/a'} |`;
  });
}

function score(rows) {
  const clear = rows.filter((r) => !r.borderline);
  return `${clear.filter((r) => r.said === (r.expect ?? r.truth)).length}/${clear.length}`;
}

function markdown(report) {
  const verdicts = ['input-bound', 'host-bound', 'compute-bound'];
  const said = (rows) => [...new Set([...verdicts, ...rows.map((r) => r.said)])];
  const truths = [...verdicts, CONTROL];
  const rows = verdictRows(report, 'stepscope');
  const m = report.machine;
  const v = report.versions;
  const lines = [
    '# Accuracy: stepscope\'s verdicts against measured ground truth',
    '',
    `Written by \`npm run accuracy\` (scripts/accuracy.mjs) on ${report.at.slice(0, 16).replace('T', ' ')} UTC, in ${(report.seconds / 60).toFixed(1)} minutes.`,
    '',
    `- Machine: ${m.cpu}, ${m.cores} cores, ${m.memory_gib} GiB, ${m.os}; load average ${m.load_start.join(' / ')} at the start, ${m.load_end.join(' / ')} at the end (other work shares this machine: the truth is measured in the same run, beside it).`,
    `- Versions: stepscope ${v.stepscope}, Node ${v.node}, Python ${v.python} (${v.python_path}), torch ${v.torch}; TraceML ${v.traceml ?? 'not run'}.`,
    ...(report.merged ? [`- Cells: ${report.merged}.`] : []),
    `- ${report.traceml_why || `TraceML ${v.traceml} ran the cells marked in the table below through its documented plain-loop integration (\`traceml.init\`, \`trace_step\`), with \`traceml run\`, on the same program and torch.`}`,
    '',
    '## How it is measured',
    '',
    'Each cell is a real PyTorch program (scripts/accuracy/train.py: an MLP trained with SGD on the CPU, one thread) fed by a real',
    '`DataLoader` whose `Dataset` does real work in Python for every batch (a tokenizer-like loop), sized by scripts/accuracy/calibrate.py',
    'so that the step takes about the cell\'s time and loading about its share (the machine\'s load moves both: each cell\'s own',
    'figures are in the table). The program runs unmodified under `stepscope run` (the zero-code path) against a real sidecar of',
    'the cell\'s own, with its default settings, beside its **ablation** — the same program with `--ready`, iterating over the same',
    'batches made beforehand (the data cost removed, nothing else changed), also under `stepscope run`; their summaries give the',
    'verdicts, and the ablation must be compute-bound.',
    '',
    '**Truth by ablation, in the same run**: the program and its ablation run again, in turns (one stopped while the other runs,',
    'swapping every 100 ms), so that both meet the same machine; lost = 1 − t_ablated / t_real from their mean step times over ten',
    'blocks of steady steps (the first 20% left out), in the training thread\'s CPU time (which neither being stopped nor other work on',
    'the machine moves much). Where loader workers load in parallel, the truth is the clock\'s, from the side-by-side runs. The range',
    'beside it is two standard errors, from the blocks. The host cases ablate the evaluation or the logging instead.',
    '',
    'The truth is classed by the documented bars: input-bound at ≥ 20% lost, host-bound at ≥ 25%; a limiter is *moderate* from 5% up',
    'to its bar, *high* at it. A cell whose range straddles a bar is **borderline**: either answer is right there, and it is left out',
    'of the matrices. **Before** is the rules before this change, judged on exactly the same runs: each cell\'s journal replayed',
    '(`stepscope replay`) by that checkout.',
    '',
    '## Verdicts',
    '',
    `stepscope: ${score(rows)} right on clear cells and their ablations (each of which must be compute-bound).`,
    '',
    ...confusion(rows, { truth: truths, said: said(rows) }),
    '',
  ];
  const old = verdictRows(report, 'before');
  if (old.length) {
    lines.push(`Before (stepscope ${report.versions.before}: its rules on the same runs, their journals replayed): ${score(old)} right.`, '', ...confusion(old, { truth: truths, said: said(old) }), '');
  }
  const tml = verdictRows(report, 'traceml');
  if (tml.length) lines.push(`TraceML ${report.versions.traceml}, on the cells it ran: ${score(tml)} right on clear cells.`, '', ...confusion(tml, { truth: verdicts, said: said(tml) }), '');
  const levels = levelRows(report);
  lines.push(
    '## Levels: is the limiter\'s cost named?',
    '',
    'Truth level of the cell\'s limiter (input or host) against the level stepscope listed beside its verdict (none: not listed).',
    '',
    ...confusion(levels, { truth: ['high', 'moderate', 'none'], said: ['high', 'moderate', 'none'] }),
    '',
  );
  const oldLevels = levelRows(report, 'before');
  if (oldLevels.length) {
    lines.push('Before: a limiter was named only as the verdict (high); a share under its bar was named nowhere.', '', ...confusion(oldLevels, { truth: ['high', 'moderate', 'none'], said: ['high', 'moderate', 'none'] }), '');
  }
  lines.push(
    '## Share errors',
    '',
    'The share stepscope reported for the cell\'s limiter (its time blocked in `next()`, or outside the phases) against the',
    'measured loss, in points of step time: signed (reported − truth: below zero, the loss is under-reported) and absolute.',
    '',
    '| cells | n | median signed | median | largest | TraceML median / largest |',
    '|---|---:|---:|---:|---:|---:|',
    ...errors(report),
    '',
    '## Every cell',
    '',
    '| cell | real / ablated ms | truth lost (range) | truth | stepscope | share | level | ready control | before | TraceML |',
    '|---|---:|---:|---|---|---:|---|---|---|---|',
    ...report.results.map((r) => {
      const s = r.stepscope;
      const t = r.traceml;
      const verdict = `${s.verdict}${s.cause ? ` (${s.cause})` : ''}${r.class.verdict === s.verdict ? '' : ' ✗'}`;
      return `| ${r.name}${r.what ? `: ${r.what}` : ''} | ${r.truth.realMs.toFixed(2)} / ${r.truth.ablatedMs.toFixed(2)} | ${pct(r.truth.lost, 1)} (${pct(r.truth.low)}–${pct(r.truth.high)}) | ${r.class.verdict}${r.class.borderline ? ', borderline' : ''} (${r.class.level}${r.class.borderlineLevel && !r.class.borderline ? ', borderline' : ''}) | ${verdict} | ${pct(s.share, 1)} | ${s.level} | ${r.control.verdict} | ${r.before ? `${r.before.stepscope.verdict}${r.before.stepscope.verdict === r.class.verdict ? '' : ' ✗'}` : '—'} | ${t ? `${t.verdict}${t.share === null ? '' : ` ${pct(t.share, 1)}`}` : '—'} |`;
    }),
    '',
    ...(report.failed?.length ? ['Not measured:', '', ...report.failed.map((f) => `- ${f.name}: ${f.error}`), ''] : []),
    'Transfer (host-to-device copies) cannot be measured here: this machine has no GPU, and the hook times copies only to a CUDA device.',
    '',
  );
  return lines.join('\n');
}

if (opts.render) {
  writeFileSync(opts.out, markdown(JSON.parse(readFileSync(opts.render, 'utf8'))));
} else {
  await main();
}
