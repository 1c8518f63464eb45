#!/usr/bin/env node
/**
 * A stand-in for `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-lms N | -l N]`,
 * for tests on machines without a GPU. Put it on PATH under the name `nvidia-smi` (a symlink in a
 * temp dir) or run it by path. Without a loop option it prints one round and exits 0; with one it
 * prints a round at once and then one every N ms, forever. Values are printed the way real drivers
 * print them: "71.15" W with two decimals, whole MHz/MiB/%, "0x0000000000000040" for bitmasks,
 * "[N/A]" for what a GPU does not report, units ("71.15 W") unless `nounits`, a header unless
 * `noheader`. Fields it does not know are refused like a real driver refuses them:
 * `Field "x" is not a valid field to query.` on stdout, exit 2.
 *
 * The scenario is a JSON file named by env FAKE_NVIDIA_SMI_SCENARIO (optional; the default is one
 * busy H100). Every key is optional:
 *
 *   {
 *     "driver": "new",        // "new" (535 and later): knows clocks_event_reasons.* AND clocks_throttle_reasons.*,
 *                             // and power.draw.average / power.draw.instant (equal to power.draw unless set)
 *                             // "old" (before 535): refuses clocks_event_reasons.* and those two as unknown fields
 *     "gpus": 2,              // a count of default GPUs, or an array of per-GPU base values keyed by query
 *                             // field, e.g. [{ "name": "NVIDIA A100-SXM4-80GB", "power.limit": "[N/A]" }, {}]
 *                             // (a string is printed as is, so "[N/A]", "[GPU requires reset]" work)
 *     "notAvailable": ["utilization.gpu"],  // fields every GPU prints as "[N/A]" (a MIG-enabled GPU)
 *     "t0": 1796223827049,    // epoch ms the timeline counts from (default: this process's start), so that
 *                             // a restarted stand-in carries on with the same story
 *     "timeline": [           // changes keyed by seconds since t0, applied in order
 *       { "at": 1.0, "gpu": 0, "set": { "clocks.sm": 1100, "clocks_event_reasons.active": 64 } },
 *       { "at": 3.0, "gpu": 0, "set": { "clocks.sm": 1980, "clocks_event_reasons.active": 0 } }
 *     ],                      // "gpu" omitted: every GPU; "when": "/path/cue" instead of "at": applied
 *                             // once that file exists (a test cues a change when its job is ready,
 *                             // which no clock can promise on a loaded machine)
 *     "exitAfterRounds": 3,   // loop mode: exit after printing this many rounds...
 *     "exitCode": 1,          // ...with this code (default 1)...
 *     "exitMessage": "...",   // ...after printing this line on stderr
 *     "silentAfterRounds": 2, // loop mode: stay alive but print nothing after this many rounds (a hung driver)
 *     "pidFile": "/tmp/x",    // loop mode: write this process's pid here (so a test can kill it)
 *     "fail": { "exitCode": 9, "message": "NVIDIA-SMI has failed because ..." }
 *                             // every invocation prints the message and exits (no driver loaded)
 *     "computeApps": "/path/x.csv" // `--query-compute-apps` answers with the processes of this literal
 *                             // `--format=csv` capture (test/fixtures/nvidia-smi/*_compute-apps_*.csv),
 *                             // the fields asked for, in the format asked for; none without it
 *   }
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

const DEFAULT_GPU = {
  uuid: null, // derived from the index
  name: 'NVIDIA H100 80GB HBM3',
  'utilization.gpu': 97,
  'utilization.memory': 45,
  'memory.used': 61234,
  'memory.total': 81559,
  'temperature.gpu': 71,
  'power.draw': 698.23,
  'power.limit': 700,
  'clocks.sm': 1980,
  'clocks.max.sm': 1980,
  'clocks.mem': 2619,
  pstate: 'P0',
  'mig.mode.current': 'Disabled',
  'clocks_event_reasons.active': 0,
};

/** Other names a driver accepts for the same figure. */
const ALIASES = {
  gpu_uuid: 'uuid',
  gpu_name: 'name',
  'clocks.current.sm': 'clocks.sm',
  'clocks.current.memory': 'clocks.mem',
  'clocks_throttle_reasons.active': 'clocks_event_reasons.active',
};

const UNITS = {
  'power.draw.average': 'W',
  'power.draw.instant': 'W',
  'utilization.gpu': '%',
  'utilization.memory': '%',
  'memory.used': 'MiB',
  'memory.total': 'MiB',
  'power.draw': 'W',
  'power.limit': 'W',
  'clocks.sm': 'MHz',
  'clocks.max.sm': 'MHz',
  'clocks.mem': 'MHz',
};

const canonical = (field) => ALIASES[field] ?? field;

/** Newer drivers' split power readings; a GPU that sets none reads power.draw in them. */
const POWER_READINGS = ['power.draw.average', 'power.draw.instant'];
const valueOf = (gpu, field) => gpu[canonical(field)] ?? (POWER_READINGS.includes(field) ? gpu['power.draw'] : undefined);

function parseArgs(argv) {
  const options = { fields: null, apps: null, format: null, loopMs: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [flag, inline] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    const value = () => inline ?? argv[++i];
    if (flag === '--query-gpu') options.fields = value().split(',').map((f) => f.trim());
    else if (flag === '--query-compute-apps') options.apps = value().split(',').map((f) => f.trim());
    else if (flag === '--format') options.format = new Set(value().split(',').map((f) => f.trim()));
    else if (flag === '-lms' || flag === '--loop-ms') options.loopMs = Number(value());
    else if (flag === '-l' || flag === '--loop') options.loopMs = Number(value()) * 1000;
    else return null;
  }
  if ((!options.fields && !options.apps) || !options.format?.has('csv')) return null;
  return options;
}

/** The names a capture's header prints for the fields one may ask (`used_gpu_memory [MiB]` for used_memory). */
const APP_ALIASES = { used_gpu_memory: 'used_memory', uuid: 'gpu_uuid', name: 'process_name' };

/** The processes of a literal capture, printed as nvidia-smi prints the fields asked for. */
function printComputeApps(scenario, options) {
  const withUnits = !options.format.has('nounits');
  if (!options.format.has('noheader')) process.stdout.write(`${options.apps.map((f) => (f === 'used_memory' && withUnits ? `${f} [MiB]` : f)).join(', ')}\n`);
  if (!scenario.computeApps) return;
  const [header, ...rows] = readFileSync(scenario.computeApps, 'utf8').split('\n').filter((line) => line.trim());
  const names = header.split(',').map((c) => c.trim().replace(/\s*\[[^\]]*\]$/, '')).map((c) => APP_ALIASES[c] ?? c);
  for (const row of rows) {
    const columns = row.split(',').map((c) => c.trim());
    const value = (field) => {
      const text = columns[names.indexOf(APP_ALIASES[field] ?? field)] ?? '[N/A]';
      return field === 'used_memory' && !withUnits ? text.replace(/ MiB$/, '') : text;
    };
    process.stdout.write(`${options.apps.map(value).join(', ')}\n`);
  }
}

function loadScenario() {
  const file = process.env.FAKE_NVIDIA_SMI_SCENARIO;
  return file ? JSON.parse(readFileSync(file, 'utf8')) : {};
}

function baseGpus(scenario) {
  const gpus = Array.isArray(scenario.gpus) ? scenario.gpus : Array.from({ length: scenario.gpus ?? 1 }, () => ({}));
  return gpus.map((overrides, index) => {
    const gpu = { ...DEFAULT_GPU, index, uuid: `GPU-5f8c${String(index).padStart(4, '0')}-1d2e-4f3a-9b8c-7d6e5f4a3b2c` };
    for (const field of scenario.notAvailable ?? []) gpu[canonical(field)] = '[N/A]';
    for (const [field, value] of Object.entries(overrides)) gpu[canonical(field)] = value;
    return gpu;
  });
}

function valuesAt(scenario, gpus, elapsedS) {
  const now = gpus.map((gpu) => ({ ...gpu }));
  for (const change of scenario.timeline ?? []) {
    if (change.when !== undefined ? !existsSync(change.when) : change.at > elapsedS) continue;
    for (const gpu of now) {
      if (change.gpu !== undefined && change.gpu !== gpu.index) continue;
      for (const [field, value] of Object.entries(change.set)) gpu[canonical(field)] = value;
    }
  }
  return now;
}

function format(field, value, withUnits) {
  if (value === null || value === undefined) return '[N/A]';
  if (typeof value === 'string') return value;
  const name = canonical(field);
  let text;
  if (name === 'clocks_event_reasons.active') text = `0x${value.toString(16).toUpperCase().padStart(16, '0')}`;
  else if (name.startsWith('power.')) text = value.toFixed(2);
  else text = String(Math.round(value));
  return withUnits && UNITS[name] ? `${text} ${UNITS[name]}` : text;
}

function refusedField(fields, driver) {
  const known = new Set(['index', ...Object.keys(DEFAULT_GPU), ...POWER_READINGS]);
  const newOnly = (field) => field.startsWith('clocks_event_reasons.') || POWER_READINGS.includes(field);
  return fields.find((field) => !known.has(canonical(field)) || (driver === 'old' && newOnly(field)));
}

function main() {
  const options = parseArgs(process.argv.slice(2));
  if (!options) {
    process.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n");
    process.exit(2);
  }
  const scenario = loadScenario();
  if (scenario.fail) {
    process.stdout.write(`${scenario.fail.message}\n\n`);
    process.exit(scenario.fail.exitCode ?? 9);
  }
  if (options.apps) return printComputeApps(scenario, options);
  const refused = refusedField(options.fields, scenario.driver ?? 'new');
  if (refused) {
    process.stdout.write(`Field "${refused}" is not a valid field to query.\n\n`);
    process.exit(2);
  }

  const withUnits = !options.format.has('nounits');
  const gpus = baseGpus(scenario);
  const startedAt = scenario.t0 === undefined ? performance.now() : performance.now() - (Date.now() - scenario.t0);
  const printRound = () => {
    const values = valuesAt(scenario, gpus, (performance.now() - startedAt) / 1000);
    const lines = values.map((gpu) => options.fields.map((field) => format(field, valueOf(gpu, field), withUnits)).join(', '));
    process.stdout.write(`${lines.join('\n')}\n`);
  };

  process.stdout.on('error', () => process.exit(0));
  if (!options.format.has('noheader')) {
    process.stdout.write(`${options.fields.map((f) => (withUnits && UNITS[canonical(f)] ? `${f} [${UNITS[canonical(f)]}]` : f)).join(', ')}\n`);
  }
  if (options.loopMs === null) {
    printRound();
    return;
  }

  if (scenario.pidFile) writeFileSync(scenario.pidFile, String(process.pid));
  let rounds = 0;
  const tick = () => {
    if (scenario.silentAfterRounds !== undefined && rounds >= scenario.silentAfterRounds) return;
    printRound();
    rounds++;
    if (scenario.exitAfterRounds !== undefined && rounds >= scenario.exitAfterRounds) {
      if (scenario.exitMessage) process.stderr.write(`${scenario.exitMessage}\n`);
      process.exitCode = scenario.exitCode ?? 1;
      clearInterval(timer);
    }
  };
  const timer = setInterval(tick, Math.max(1, options.loopMs));
  tick();
}

main();
