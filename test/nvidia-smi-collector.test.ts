import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NvidiaSmiCollector, type NvidiaSmiOptions } from '../src/counters/nvidia-smi.js';
import type { GpuSample } from '../src/counters/types.js';
import { capturedLogger } from './support/logger.js';
import { pathWithFakeNvidiaSmi } from './support/fake-gpu.js';
import { tempDir, waitFor, type LogLine } from './support/sidecar.js';
const FAST_BACKOFF = { initialMs: 50, maxMs: 400, resetAfterMs: 5_000 };

interface Harness {
  collector: NvidiaSmiCollector;
  rounds: GpuSample[][];
  logs: LogLine[];
  dir: string;
}

const running: NvidiaSmiCollector[] = [];

afterEach(async () => {
  await Promise.all(running.splice(0).map((collector) => collector.stop()));
});


/** `scenario` is the stand-in's (see the top of fake-nvidia-smi.mjs); a function gets the test's directory. */
function harness(scenario: object | ((dir: string) => object), options: Partial<NvidiaSmiOptions> = {}): Harness {
  const dir = tempDir('stepscope-nvidia-smi-');
  const scenarioFile = path.join(dir, 'scenario.json');
  writeFileSync(scenarioFile, JSON.stringify(typeof scenario === 'function' ? scenario(dir) : scenario));
  const { log, lines: logs } = capturedLogger();
  const collector = new NvidiaSmiCollector({
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

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
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
    expect(h.rounds[0]![0]).toMatchObject({ name: 'NVIDIA H100 80GB HBM3', utilGpu: 97, memUsedMiB: 61234, powerW: 698.23, pstate: 'P0' });
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
    expect(warned.msg).toMatch(/restarting in \d+ ms/);
    const second = await pidFrom(pidFile, first);
    const roundsAtRestart = h.rounds.length;
    await waitFor(() => h.rounds.length >= roundsAtRestart + 2);

    expect(second).not.toBe(first);
    expect(h.collector.health()).toMatchObject({ state: 'ok', restarts: 1 });
  });

  it('restarts a child that exits on its own, with backoff, naming its exit code and last stderr line', async () => {
    const h = await started(harness({ gpus: 1, exitAfterRounds: 2, exitCode: 3, exitMessage: 'Unable to determine the device handle for GPU0000:01:00.0: Unknown Error' }));
    const warned = await waitFor(() => warnings(h).find((line) => line.code === 3));
    expect(warned.stderr).toBe('Unable to determine the device handle for GPU0000:01:00.0: Unknown Error');
    await waitFor(() => h.collector.health().restarts >= 3);

    const delays = h.logs.filter((line) => typeof line.restart_in_ms === 'number').map((line) => line.restart_in_ms);
    expect(delays[0]).toBe(FAST_BACKOFF.initialMs);
    expect(h.collector.health().lastError).toContain('Unknown Error');
    // One warning for the recurring exit, not one per restart.
    expect(warnings(h).filter((line) => line.code === 3)).toHaveLength(1);
    expect(h.rounds.length).toBeGreaterThanOrEqual(4);
  });

  it('kills and restarts a child that stops printing', async () => {
    const h = await started(harness({ gpus: 1, silentAfterRounds: 1 }, { stallMs: 500 }));
    await waitFor(() => warnings(h).find((line) => line.problem === 'child stalled'));
    await waitFor(() => h.collector.health().restarts >= 1);
    expect(warnings(h).some((line) => line.signal === 'SIGKILL')).toBe(true);
  });

  it('skips lines it cannot read, with one warning per distinct problem, and keeps the rest', async () => {
    // A comma in a name splits the row; an unreadable figure becomes null.
    const h = await started(harness({ gpus: [{ 'memory.used': 'lots' }, { name: 'Odd, Name' }] }));
    await waitFor(() => h.rounds.length >= 5);
    expect(h.rounds.every((round) => indicesOf(round).join() === '0')).toBe(true);
    expect(h.rounds.every(([sample]) => sample!.memUsedMiB === null && sample!.memTotalMiB === 81559)).toBe(true);
    expect(warnings(h).map((line) => line.problem).sort()).toEqual(['expected 15 columns, got 16', 'unreadable memory.used']);
  });

  it('rejects start with a clear message when nvidia-smi is not on PATH', async () => {
    const empty = tempDir('stepscope-no-nvidia-smi-');
    const h = harness({}, { env: { ...process.env, PATH: empty } });
    await expect(h.collector.start(() => undefined)).rejects.toThrow(/"nvidia-smi" not found/);
    expect(h.collector.health()).toMatchObject({ state: 'failing', samples: 0 });
    expect(h.collector.health().lastError).toMatch(/not found/);
  });

  it('rejects start with what nvidia-smi said when it cannot talk to the driver', async () => {
    const message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.";
    const h = harness({ fail: { exitCode: 9, message } });
    await expect(h.collector.start(() => undefined)).rejects.toThrow(/exit 9\): NVIDIA-SMI has failed because/);
    expect(h.logs.some((line) => line.msg.includes('using clocks_throttle_reasons'))).toBe(false);
  });

  it('stop() kills the child, stops restarting and delivers nothing more', async () => {
    const h = await started(harness((dir) => ({ pidFile: path.join(dir, 'loop.pid') })));
    const pidFile = path.join(h.dir, 'loop.pid');
    const pid = await pidFrom(pidFile);
    await waitFor(() => h.rounds.length >= 2);

    await h.collector.stop();
    const delivered = h.rounds.length;
    expect(isAlive(pid)).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(h.rounds.length).toBe(delivered);
    expect(h.collector.health()).toMatchObject({ state: 'stopped', restarts: 0 });
  });
});
