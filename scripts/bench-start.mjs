#!/usr/bin/env node
// How long each `stepscope` command takes to start (issue 24, target 7: at most 300 ms), against
// bare Node's own start measured in the same rounds (`node -e 0`), interleaved, medians of N.
//
//   node scripts/bench-start.mjs [--rounds N] [--against DIR] [--json]
//
// A command's start is its whole run on a small input where the command ends by itself (`--help`,
// `report`, `compare`, `gate`, `merge`, `replay` of a recording), and for `serve` the time to its
// `listening` log line (no --out; --gpu-source none, so no GPU probe is counted). --against DIR
// times DIR/dist/cli.js in the same rounds too (another checkout, built), for a before and after.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = argv.indexOf(name);
  return at >= 0 ? argv[at + 1] : fallback;
};
const rounds = Number(flag('--rounds', '9'));
const against = flag('--against', null);

const summary = path.join(root, 'test/fixtures/fix-checks/demo-regimes/summary.json');
// A recorded journal (kept gzipped in the repository), as a sidecar's --out leaves it.
const recording = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-start-'));
const recorded = path.join(root, 'test/fixtures/journals/host-bound-outside-phases-logging-between-steps');
writeFileSync(path.join(recording, 'wal-00000001.log'), gunzipSync(readFileSync(path.join(recorded, 'wal-00000001.log.gz'))));

/** Each command, as arguments to the CLI; `until` ends the timing at a line of its output instead of its exit. */
const COMMANDS = [
  { name: '--help', args: ['--help'] },
  { name: 'report', args: ['report', summary, '--format', 'json'] },
  { name: 'report --html', args: ['report', summary, '--html', '-o', path.join(mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-start-')), 'r.html')] },
  { name: 'compare', args: ['compare', summary, summary] },
  { name: 'gate', args: ['gate', summary, '--baseline', summary] },
  { name: 'merge', args: ['merge', summary, '--format', 'json'] },
  { name: 'replay', args: ['replay', recording, '--format', 'json'] },
  { name: 'serve', args: ['serve', '--port', '0', '--gpu-source', 'none', '--log-level', 'info'], until: /"msg":"listening"/ },
];

/** ms from spawn to exit (or to the `until` line, then stopped). */
function timed(args, until) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, STEPSCOPE_LOG_LEVEL: 'info' } });
    const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
    let out = '';
    let err = '';
    let at = null;
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      out += chunk;
      if (until && at === null && until.test(out)) {
        at = ms();
        child.kill('SIGTERM');
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk) => (err += chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (until) return at === null ? reject(new Error(`${args.join(' ')}: exited ${code} before ${until}: ${err.slice(-500)}`)) : resolve(at);
      // gate exits 0 on a pass; anything else here is a broken command, not a slow one.
      if (code !== 0) return reject(new Error(`${args.join(' ')}: exit ${code}: ${err.slice(-500)}`));
      resolve(ms());
    });
  });
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/** Medians of `rounds` interleaved rounds: bare Node, then each command of this tree (and of `against`). */
export async function measureStart({ rounds = 9, against = null, only = null } = {}) {
  const commands = only ? COMMANDS.filter((command) => only.includes(command.name)) : COMMANDS;
const trees = [['this', root], ...(against ? [['against', path.resolve(against)]] : [])];
  const times = new Map();
  const add = (key, value) => times.set(key, [...(times.get(key) ?? []), value]);
  for (let round = 0; round < rounds; round++) {
    // Interleaved: each round times bare Node, then every command of every tree, so load hits all alike.
    add('node -e 0', await timed(['-e', '0']));
    for (const command of commands) {
      for (const [tree, dir] of trees) add(`${tree}\0${command.name}`, await timed([path.join(dir, 'dist/cli.js'), ...command.args], command.until));
    }
  }
  
  const bare = median(times.get('node -e 0'));
  const result = { date: new Date().toISOString(), node: process.version, machine: `${os.cpus().length} x ${os.cpus()[0]?.model}`, load: os.loadavg()[0], rounds, bare_node_ms: Math.round(bare), commands: {} };
  for (const command of commands) {
    const entry = {};
    for (const [tree] of trees) {
      const ms = median(times.get(`${tree}\0${command.name}`));
      entry[tree === 'this' ? 'ms' : 'against_ms'] = Math.round(ms);
      if (tree === 'this') entry.ratio_to_bare_node = Number((ms / bare).toFixed(2));
    }
    if (against) entry.ratio_to_against = Number((entry.ms / entry.against_ms).toFixed(2));
    result.commands[command.name] = entry;
  }
  return result;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await measureStart({ rounds, against });
  if (argv.includes('--json')) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(`node ${process.version}, ${rounds} rounds, load ${result.load.toFixed(1)}; bare node -e 0: ${result.bare_node_ms} ms`);
    for (const [name, e] of Object.entries(result.commands)) {
      console.log(`${name.padEnd(14)} ${String(e.ms).padStart(6)} ms  ×${e.ratio_to_bare_node} bare${against ? `   against: ${e.against_ms} ms (×${e.ratio_to_against})` : ''}`);
    }
  }
}
