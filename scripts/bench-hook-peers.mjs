// stepscope's hook against its peers on one training loop (issue 24, target 10): bare, the explicit
// API, the zero-code path (`python -m stepscope run`), torch.profiler recording every step, and
// TraceML (traceml-ai from PyPI, `traceml run` with its trace_step), in interleaved rounds, each a
// fresh process (python-hook/bench/peer_loop.py). Per variant: the training thread's CPU per step,
// and the whole run's CPU, every process of it counted (TraceML's own included: the wrapper's
// RUSAGE_CHILDREN), as medians over rounds and ratios to bare.
//
//   npm run build && node scripts/bench-hook-peers.mjs [--rounds 7] [--steps 2000]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { venvPython } from './python-venv.mjs';
import { startSidecar } from './sidecar.mjs';
import { TRACEML_VERSION, tracemlPython } from './traceml-venv.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values: opts } = parseArgs({ options: { rounds: { type: 'string', default: '7' }, steps: { type: 'string', default: '2000' } } });
const loop = path.join(root, 'python-hook/bench/peer_loop.py');
const torchPython = process.env.STEPSCOPE_VENV_PYTHON || venvPython();
if (!torchPython) throw new Error('no test environment with current PyTorch: node scripts/python-venv.mjs ensure');
const traceml = tracemlPython(torchPython);
if (!traceml.python) console.error(traceml.why);

// Runs argv and reports its stdout's last line (JSON) and the CPU of every process it waited for.
const WRAPPER = `import json, resource, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
last = [l for l in out.stdout.splitlines() if l.startswith('{')]
print(json.dumps({"rc": out.returncode, "result": json.loads(last[-1]) if last else None, "cpu_s": usage.ru_utime + usage.ru_stime, "stderr": out.stderr[-400:]}))`;

const freePort = () => new Promise((resolve) => { const s = net.createServer().listen(0, () => { const { port } = s.address(); s.close(() => resolve(port)); }); });
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

const { child: sidecar, port } = await startSidecar(path.join(root, 'dist/cli.js'), ['--gpu-source', 'none']);
const url = `ws://127.0.0.1:${port}/v1/ingest`;
const steps = ['--steps', opts.steps];
const env = { ...process.env, PYTHONPATH: path.join(root, 'python-hook') };
const variants = {
  bare: () => [torchPython, loop, '--variant', 'bare', ...steps],
  explicit: () => [torchPython, loop, '--variant', 'explicit', '--url', url, ...steps],
  'zero-code': () => [torchPython, '-m', 'stepscope', 'run', '--url', url, loop, '--variant', 'zero-code', ...steps],
  profiler: () => [torchPython, loop, '--variant', 'profiler', ...steps],
};
if (traceml.python) {
  variants.traceml = async (logs) => [traceml.traceml, 'run', '--run-name', 'peers', '--logs-dir', logs, '--aggregator-port', String(await freePort()), loop, '--args', '--variant', 'traceml', ...steps];
}
const names = Object.keys(variants);
const got = Object.fromEntries(names.map((n) => [n, []]));
try {
  for (let round = 0; round < Number(opts.rounds); round++) {
    const order = [...names.slice(round % names.length), ...names.slice(0, round % names.length)];
    for (const name of order) {
      const logs = mkdtempSync(path.join(os.tmpdir(), 'stepscope-peers-'));
      const argv = await variants[name](logs);
      const run = spawnSync(name === 'traceml' ? traceml.python : torchPython, ['-c', WRAPPER, ...argv], { encoding: 'utf8', env, timeout: 600_000 });
      rmSync(logs, { recursive: true, force: true });
      const report = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? 'null');
      if (!report || report.rc !== 0 || !report.result) throw new Error(`${name}: failed (${run.stderr || report?.stderr})`);
      got[name].push({ cpu: report.result.cpu_us_per_step, wall: report.result.wall_us_per_step, whole: report.cpu_s });
    }
  }
} finally {
  sidecar.kill();
}
const bare = { cpu: median(got.bare.map((r) => r.cpu)), whole: median(got.bare.map((r) => r.whole)) };
const out = { python: torchPython, traceml: traceml.python ? TRACEML_VERSION : traceml.why, rounds: Number(opts.rounds), steps: Number(opts.steps), load_average: os.loadavg()[0], variants: {} };
for (const name of names) {
  const cpu = median(got[name].map((r) => r.cpu));
  const whole = median(got[name].map((r) => r.whole));
  out.variants[name] = {
    thread_cpu_us_per_step: Number(cpu.toFixed(1)),
    wall_us_per_step: Number(median(got[name].map((r) => r.wall)).toFixed(1)),
    thread_cpu_ratio: Number((cpu / bare.cpu).toFixed(3)),
    // Per round against the bare run of the same round, then the median: drift falls on both alike.
    thread_cpu_ratio_same_round: Number(median(got[name].map((r, i) => r.cpu / got.bare[i].cpu)).toFixed(3)),
    whole_run_cpu_s: Number(whole.toFixed(2)),
    whole_run_cpu_ratio: Number((whole / bare.whole).toFixed(3)),
  };
}
console.log(JSON.stringify(out, null, 2));
