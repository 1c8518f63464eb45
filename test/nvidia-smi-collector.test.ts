import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { IDLE_INTERVAL_MS, nvidiaSmiCollector, type NvidiaSmiOptions } from '../src/counters/nvidia-smi.js';
import type { Collector } from '../src/counters/source.js';
import type { GpuSample } from '../src/counters/types.js';
import { capturedLogger } from './support/logger.js';
import { runs } from './support/children.js';
import { pathWithFakeNvidiaSmi } from './support/fake-gpu.js';
import { ROOT, tempDir, waitFor, type LogLine } from './support/sidecar.js';
const FAST_BACKOFF = { initialMs: 50, maxMs: 400, resetAfterMs: 5_000 };

interface Harness {
  collector: Collector<GpuSample[]>;
  rounds: GpuSample[][];
  logs: LogLine[];
  dir: string;
}

const running: Array<Collector<GpuSample[]>> = [];

afterEach(async () => {
  await Promise.all(running.splice(0).map((collector) => collector.stop()));
});


/** `scenario` is the stand-in's (see the top of fake-nvidia-smi.mjs); a function gets the test's directory. */
function harness(scenario: object | ((dir: string) => object), options: Partial<NvidiaSmiOptions> = {}): Harness {
  const dir = tempDir('stepscope-nvidia-smi-');
  const scenarioFile = path.join(dir, 'scenario.json');
  writeFileSync(scenarioFile, JSON.stringify(typeof scenario === 'function' ? scenario(dir) : scenario));
  const { log, lines: logs } = capturedLogger();
  const collector = nvidiaSmiCollector({
    intervalMs: 100,
    backoff: FAST_BACKOFF,
    log,
    env: { ...process.env, PATH: pathWithFakeNvidiaSmi(dir), FAKE_NVIDIA_SMI_SCENARIO: scenarioFile },
    ...options,
  });
  running.push(collector);
  return { collector, rounds: [], logs, dir };
}

async function started(h: Harness): Promise<Harness> {
  await h.collector.start((round) => h.rounds.push(round));
  return h;
}

const warnings = (h: Harness) => h.logs.filter((line) => line.level === 40);
const indicesOf = (round: GpuSample[]) => round.map((sample) => sample.index);

async function pidFrom(file: string, not?: number): Promise<number> {
  return waitFor(() => {
    if (!existsSync(file)) return null;
    const pid = Number(readFileSync(file, 'utf8'));
    return pid > 0 && pid !== not ? pid : null;
  });
}

const CAPTURES = path.join(ROOT, 'test', 'fixtures', 'nvidia-smi');

/**
 * An nvidia-smi that answers from real captures (test/fixtures/nvidia-smi): `--query-gpu` with the
 * asked columns of a `--format=csv` capture (refusing a field the capture lacks, as its driver
 * did), `-L` and `-q` with their captures; once, or every -lms ms.
 */
const REPLAY = `#!/usr/bin/env node
const fs = require('node:fs');
const cfg = JSON.parse(fs.readFileSync(process.env.REPLAY_CONFIG, 'utf8'));
const args = process.argv.slice(2);
const file = (name) => fs.readFileSync(name, 'utf8');
if (args[0] === '-L' || args[0] === '-q') {
  const name = args[0] === '-L' ? cfg.list : cfg.query;
  if (!name) { process.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\\n"); process.exit(2); }
  process.stdout.write(file(name));
  process.exit(0);
}
const fields = args.find((a) => a.startsWith('--query-gpu=')).slice(12).split(',');
const [header, ...rows] = file(cfg.csv).trim().split('\\n');
const names = header.split(', ').map((c) => c.replace(/ \\[.*\\]$/, ''));
const column = (f) => names.indexOf({ 'clocks.sm': 'clocks.current.sm', 'clocks.mem': 'clocks.current.memory' }[f] ?? f);
const unknown = fields.find((f) => column(f) < 0);
if (unknown) { process.stdout.write('Field "' + unknown + '" is not a valid field to query.\\n\\n'); process.exit(2); }
const out = rows.map((r) => { const cols = r.split(', '); return fields.map((f) => cols[column(f)]).join(', '); }).join('\\n') + '\\n';
const loop = args.indexOf('-lms');
if (loop < 0) {
  if (cfg.warning) process.stdout.write(cfg.warning);
  process.stdout.write(out);
  process.exit(cfg.exitCode ?? 0);
}
const tick = () => process.stdout.write(out);
tick();
setInterval(tick, Number(args[loop + 1]));
`;

function replaying(config: { csv: string; list?: string; query?: string; warning?: string; exitCode?: number }): Harness {
  const dir = tempDir('stepscope-nvidia-smi-replay-');
  const bin = path.join(dir, 'bin');
  mkdirSync(bin);
  writeFileSync(path.join(bin, 'nvidia-smi'), REPLAY);
  chmodSync(path.join(bin, 'nvidia-smi'), 0o755);
  const at = (name: string | undefined) => (name ? path.join(CAPTURES, name) : undefined);
  const configFile = path.join(dir, 'replay.json');
  writeFileSync(configFile, JSON.stringify({ ...config, csv: at(config.csv), list: at(config.list), query: at(config.query) }));
  const { log, lines: logs } = capturedLogger();
  const collector = nvidiaSmiCollector({
    intervalMs: 100,
    backoff: FAST_BACKOFF,
    log,
    env: { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH ?? ''}`, REPLAY_CONFIG: configFile },
  });
  running.push(collector);
  return { collector, rounds: [], logs, dir };
}

describe('NvidiaSmiCollector', () => {
  it('finds nvidia-smi on PATH and calls the sink once per round, with every GPU of that round', async () => {
    const h = await started(
      harness({
        gpus: 2,
        timeline: [
          { at: 0.3, gpu: 0, set: { 'clocks.sm': 1100, 'clocks_event_reasons.active': 0x40 } },
          { at: 0.9, gpu: 0, set: { 'clocks.sm': 1980, 'clocks_event_reasons.active': 0 } },
        ],
      }),
    );
    const slowed = await waitFor(() => h.rounds.find((round) => round[0]!.smClockMHz === 1100));
    expect(slowed[0]!.throttleReasons).toBe(0x40);
    expect(slowed[1]!).toMatchObject({ smClockMHz: 1980, throttleReasons: 0 });
    const slowedAt = h.rounds.indexOf(slowed);
    await waitFor(() => h.rounds.slice(slowedAt).find((round) => round[0]!.smClockMHz === 1980 && round[0]!.throttleReasons === 0));

    expect(h.rounds.every((round) => indicesOf(round).join() === '0,1')).toBe(true);
    expect(h.rounds[0]![0]).toMatchObject({ name: 'NVIDIA H100 80GB HBM3', utilGpu: 97, memUsedMiB: 61234, powerW: 698.23, powerReading: 'average', pstate: 'P0' });
    const health = h.collector.health();
    expect(health).toMatchObject({ name: 'nvidia-smi', state: 'ok', restarts: 0, lastError: null });
    expect(health.samples).toBeGreaterThanOrEqual(h.rounds.length * 2 - 2);
    expect(warnings(h)).toEqual([]);
  });

  it('falls back to clocks_throttle_reasons on a driver before 535, which refuses the new name', async () => {
    const h = await started(harness({ driver: 'old', gpus: 1 }));
    await waitFor(() => h.rounds.length >= 4);
    expect(h.rounds.every((round) => round[0]!.throttleReasons === 0)).toBe(true);
    expect(h.logs.some((line) => line.msg.includes('using clocks_throttle_reasons'))).toBe(true);
    expect(h.logs.find((line) => line.msg === 'reading GPU counters from nvidia-smi')?.reasons_field).toBe('clocks_throttle_reasons.active');
    expect(h.collector.health()).toMatchObject({ state: 'ok', restarts: 0 });
  });

  it('reports figures the GPU prints as [N/A] as null, never 0, and does not warn about them', async () => {
    const h = await started(harness({ notAvailable: ['utilization.gpu', 'utilization.memory'], gpus: [{ 'power.limit': '[N/A]' }] }));
    await waitFor(() => h.rounds.length >= 3);
    for (const [sample] of h.rounds) {
      expect(sample).toMatchObject({ utilGpu: null, utilMem: null, powerLimitW: null, memUsedMiB: 61234, powerW: 698.23 });
    }
    expect(warnings(h)).toEqual([]);
  });

  it('logs a killed child, restarts it, and samples resume', async () => {
    const h = await started(harness((dir) => ({ gpus: 1, pidFile: path.join(dir, 'loop.pid') })));
    const pidFile = path.join(h.dir, 'loop.pid');
    const first = await pidFrom(pidFile);
    await waitFor(() => h.rounds.length >= 2);

    process.kill(first, 'SIGKILL');
    const warned = await waitFor(() => warnings(h).find((line) => line.signal === 'SIGKILL'));
    expect(warned.msg).toMatch(/running it again in \d+ ms/);
    const second = await pidFrom(pidFile, first);
    const roundsAtRestart = h.rounds.length;
    await waitFor(() => h.rounds.length >= roundsAtRestart + 2);

    expect(second).not.toBe(first);
    expect(h.collector.health()).toMatchObject({ state: 'ok', restarts: 1, lastError: null });
    expect(h.logs.some((line) => line.msg === 'nvidia-smi: reading again')).toBe(true);
  });

  it('restarts a child that exits on its own, with backoff, naming its exit code and last stderr line', async () => {
    const h = await started(harness({ gpus: 1, exitAfterRounds: 2, exitCode: 3, exitMessage: 'Unable to determine the device handle for GPU0000:01:00.0: Unknown Error' }));
    const warned = await waitFor(() => warnings(h).find((line) => line.code === 3));
    expect(warned.stderr).toBe('Unable to determine the device handle for GPU0000:01:00.0: Unknown Error');
    expect(warned.err).toContain('Unknown Error');
    await waitFor(() => h.collector.health().restarts >= 3);

    const delays = h.logs.filter((line) => typeof line.restart_in_ms === 'number').map((line) => line.restart_in_ms);
    expect(delays[0]).toBe(FAST_BACKOFF.initialMs);
    // One warning for the recurring exit, not one per restart.
    expect(warnings(h).filter((line) => line.code === 3)).toHaveLength(1);
    expect(h.rounds.length).toBeGreaterThanOrEqual(4);
  });

  it('kills and restarts a child that stops printing', async () => {
    const h = await started(harness({ gpus: 1, silentAfterRounds: 1 }, { stallMs: 500 }));
    await waitFor(() => warnings(h).find((line) => line.problem === 'stalled'));
    await waitFor(() => h.collector.health().restarts >= 1);
    expect(warnings(h).some((line) => line.signal === 'SIGKILL')).toBe(true);
  });

  it('loops at the idle pace while no job is live, and again at its interval once one is: neither a failure nor a restart', async () => {
    let live = false;
    const h = await started(harness((dir) => ({ gpus: 1, pidFile: path.join(dir, 'loop.pid') }), { jobsLive: () => live }));
    const pidFile = path.join(h.dir, 'loop.pid');
    const loopArg = (pid: number) => {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      return Number(args[args.indexOf('-lms') + 1]);
    };
    const idle = await pidFrom(pidFile);
    expect(loopArg(idle)).toBe(IDLE_INTERVAL_MS);
    await waitFor(() => h.rounds.length >= 1);
    live = true;
    // As the sidecar's tick does when a job goes live.
    h.collector.repace();
    const busy = await pidFrom(pidFile, idle);
    expect(loopArg(busy)).toBe(100);
    const rounds = h.rounds.length;
    await waitFor(() => h.rounds.length >= rounds + 3);
    expect(h.collector.health()).toMatchObject({ state: 'ok', restarts: 0, lastError: null });
    expect(warnings(h)).toEqual([]);
    expect(h.logs.find((line) => line.msg === 'reading GPU counters from nvidia-smi')).toMatchObject({ interval_ms: 100, idle_interval_ms: IDLE_INTERVAL_MS });
  });

  it('skips lines it cannot read, with one warning per distinct problem, and keeps the rest', async () => {
    // A comma in a name splits the row; an unreadable figure becomes null.
    const h = await started(harness({ gpus: [{ 'memory.used': 'lots' }, { name: 'Odd, Name' }] }));
    await waitFor(() => h.rounds.length >= 5);
    expect(h.rounds.every((round) => indicesOf(round).join() === '0')).toBe(true);
    expect(h.rounds.every(([sample]) => sample!.memUsedMiB === null && sample!.memTotalMiB === 81559)).toBe(true);
    expect(warnings(h).map((line) => line.problem).sort()).toEqual(['expected 18 columns, got 19', 'unreadable memory.used']);
  });

  it('rejects start with a clear message when nvidia-smi is not on PATH', async () => {
    const empty = tempDir('stepscope-no-nvidia-smi-');
    const h = harness({}, { env: { ...process.env, PATH: empty } });
    await expect(h.collector.start(() => undefined, { required: true })).rejects.toThrow(/"nvidia-smi" not found/);
    expect(h.collector.health()).toMatchObject({ state: 'failing', samples: 0 });
    expect(h.collector.health().lastError).toMatch(/not found/);
  });

  it('rejects start with what nvidia-smi said when it cannot talk to the driver', async () => {
    const message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.";
    const h = harness({ fail: { exitCode: 9, message } });
    await expect(h.collector.start(() => undefined, { required: true })).rejects.toThrow(/exit 9\): NVIDIA-SMI has failed because/);
    expect(h.logs.some((line) => line.msg.includes('using clocks_throttle_reasons'))).toBe(false);
  });

  it('reads the MIG instances of a MIG-enabled H100 as devices of their own, after the GPU', async () => {
    const h = await started(
      replaying({ csv: 'h100-80gb-hbm3-mig_590.48.01_idle.csv', list: 'h100-80gb-hbm3-mig_590.48.01_list.txt', query: 'h100-80gb-hbm3-mig_590.48.01_query.txt' }),
    );
    await waitFor(() => h.rounds.length >= 3);
    for (const round of h.rounds) {
      expect(round.map((s) => s.uuid)).toEqual([
        'GPU-00000000-0000-0000-0000-000000000000',
        'MIG-00000000-0000-0000-0000-000000000000',
        'MIG-00000001-0000-0000-0000-000000000001',
        'MIG-00000002-0000-0000-0000-000000000002',
        'MIG-00000003-0000-0000-0000-000000000003',
      ]);
    }
    expect(h.rounds[0]![1]).toMatchObject({ gpuInstanceId: 2, computeInstanceId: 0, migProfile: '3g.40gb', smClockMHz: 345, powerReading: 'average', utilGpu: null });
    expect(h.logs.find((line) => line.msg === 'reading GPU counters from nvidia-smi')).toMatchObject({ gpus: 1, mig_instances: 4 });
    // nvidia-smi -L and -q ran once, at start, because the GPU answered mig.mode.current "Enabled".
    expect(warnings(h)).toEqual([]);
  });

  it('asks for the power readings a driver has, and says which one a sample carries', async () => {
    const turing = await started(replaying({ csv: 'rtx-2080-super_595.71.05_load.csv' }));
    await waitFor(() => turing.rounds.length >= 2);
    expect(turing.rounds[1]![0]).toMatchObject({ powerW: 111.5, powerReading: 'instant' });

    // Driver 465 knows neither power.draw.average nor power.draw.instant, nor clocks_event_reasons.
    const old = await started(replaying({ csv: 'rtx-2080-super_465.27_linux.csv' }));
    await waitFor(() => old.rounds.length >= 2);
    expect(old.rounds[1]![0]).toMatchObject({ powerW: 30.37, powerReading: 'draw', throttleReasons: 0x1 });
    expect(old.logs.filter((line) => line.msg.includes('does not know an optional field')).map((line) => line.refused)).toEqual(['power.draw.average']);
    expect(old.logs.find((line) => line.msg === 'reading GPU counters from nvidia-smi')).toMatchObject({ power_fields: ['power.draw'], reasons_field: 'clocks_throttle_reasons.active' });
  });

  it('keeps the rows of an nvidia-smi that exits 14 (infoROM corrupted), and says so', async () => {
    const h = await started(
      replaying({ csv: 'h100-80gb-hbm3_590.48.01_load.csv', exitCode: 14, warning: readFileSync(path.join(CAPTURES, 'inforom-corrupted_warning.txt'), 'utf8') }),
    );
    await waitFor(() => h.rounds.length >= 2);
    expect(h.rounds[0]![0]).toMatchObject({ powerW: 631.95, smClockMHz: 1980 });
    // Its last error stays null while it reads ("null while it works"): the warning is logged.
    expect(h.collector.health()).toMatchObject({ state: 'ok', restarts: 0, lastError: null });
    expect(warnings(h).map((line) => line.msg)).toContain('nvidia-smi exited with a warning code; reading the rows it printed');
    // The warning line is recognised, not reported as a row that could not be read.
    expect(warnings(h).some((line) => /not a row of the query/.test(line.msg))).toBe(false);
  });

  it('stop() kills the child, stops restarting and delivers nothing more', async () => {
    const h = await started(harness((dir) => ({ pidFile: path.join(dir, 'loop.pid') })));
    const pidFile = path.join(h.dir, 'loop.pid');
    const pid = await pidFrom(pidFile);
    await waitFor(() => h.rounds.length >= 2);

    await h.collector.stop();
    const delivered = h.rounds.length;
    expect(runs(pid)).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(h.rounds.length).toBe(delivered);
    expect(h.collector.health()).toMatchObject({ state: 'stopped', restarts: 0 });
  });
});
