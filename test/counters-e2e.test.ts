import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { runs } from './support/children.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ROOT, startSidecar, waitFor } from './support/sidecar.js';

const plain = findPython();
const INTERVAL_MS = 500;

const rankEnv = (url: string, job: string, rank: number) => ({
  STEPSCOPE_URL: url,
  STEPSCOPE_JOB: job,
  RANK: String(rank),
  LOCAL_RANK: String(rank),
  WORLD_SIZE: '2',
});

describe.skipIf(!plain.python)('GPU counters matched to ranks, with a stand-in nvidia-smi on PATH', () => {
  it("shows a GPU's thermal clock drop in its own rank's window, dated within the drop, then the recovery", async () => {
    // The drop and the recovery are cued once the job is stepping, and the loop runs until the test has
    // seen both: no clock decides what a loaded machine gets done in time.
    const { env, dir } = fakeNvidiaSmiEnv((dir) => ({
      // GPU 0 is the H100 of a literal --query-compute-apps capture, which it answers with.
      gpus: [{ uuid: 'GPU-00000000-0000-0000-0000-000000000000' }, {}],
      computeApps: path.join(ROOT, 'test/fixtures/nvidia-smi/h100-80gb-hbm3_590.48.01_compute-apps_load.csv'),
      timeline: [
        { when: path.join(dir, 'drop'), gpu: 1, set: { 'clocks.sm': 1100, 'clocks_event_reasons.active': 0x40, 'temperature.gpu': 91 } },
        { when: path.join(dir, 'recover'), gpu: 1, set: { 'clocks.sm': 1980, 'clocks_event_reasons.active': 0, 'temperature.gpu': 78 } },
      ],
    }));
    const cue = (name: string) => writeFileSync(path.join(dir, name), '');
    const sidecar = await startSidecar(['--gpu-source', 'nvidia-smi', '--gpu-interval', String(INTERVAL_MS)], env);
    const ranks = [0, 1].map((rank) =>
      runPython(plain.python!, fixture('plain_loop.py'), ['--until', path.join(dir, 'stop'), '--data-ms', '9', '--compute-ms', '1'], rankEnv(sidecar.ingestUrl, 'thermal', rank)),
    );

    const rankWindow = (state: any, rank: number) => state.jobs[0]?.ranks.find((r: any) => r.rank === rank)?.window;
    await waitFor(async () => {
      const state = await sidecar.state();
      return [0, 1].every((rank) => rankWindow(state, rank)?.steps > 0 && rankWindow(state, rank)?.gpu) ? state : null;
    }, 30_000);
    const dropAt = Date.now();
    cue('drop');
    const dropped = await waitFor(
      async () => {
        const state = await sidecar.state();
        return rankWindow(state, 1)?.gpu?.latest.sm_clock_mhz === 1100 ? state : null;
      },
      30_000,
      100,
    );
    const hot = rankWindow(dropped, 1).gpu;
    expect(hot).toMatchObject({ index: 1, matched_by: 'local-rank', sm_clock_max_mhz: 1980, latest: { throttle_reasons: ['HwThermalSlowdown'], temp_c: 91 } });
    expect(hot.sm_clock_frac_min).toBeCloseTo(1100 / 1980, 3);
    expect(hot.throttle_share.HwThermalSlowdown).toBeGreaterThan(0);
    // Dated by the reading, which came after the cue: load can delay when this test looks, not the date.
    expect(Date.parse(hot.latest.at)).toBeGreaterThanOrEqual(dropAt - 1_000);
    const cool = rankWindow(dropped, 0).gpu;
    expect(cool).toMatchObject({ index: 0, sm_clock_frac_min: 1, throttle_share: {} });
    // The capture's processes share GPU 0; none is a rank (their pids are the capture's), and the window says so.
    const shared = await waitFor(async () => rankWindow(await sidecar.state(), 0)?.gpu?.other_processes ?? null, 15_000, 100);
    expect(shared).toMatchObject({ scope: 'gpu', job_pid_seen: false, used_mib: 2566 + 1542 + 15690 });
    expect(shared.processes.map((p: any) => p.name)).toEqual(['./gpu_burn', '/root/tools/memhog', '/root/tools/memhog']);
    expect(rankWindow(await sidecar.state(), 1).gpu.other_processes).toEqual({ scope: 'gpu', job_pid_seen: false, processes: [], used_mib: null });

    cue('recover');
    await waitFor(async () => rankWindow(await sidecar.state(), 1)?.gpu?.latest.sm_clock_mhz === 1980, 30_000, 100);
    cue('stop');
    const runs = await Promise.all(ranks);
    for (const run of runs) expect(run.code, run.stderr).toBe(0);
    const stepped = runs.reduce((sum, run) => sum + run.result.steps, 0);
    const final = await waitFor(async () => {
      const state = await sidecar.state();
      return state.jobs[0]?.ranks.every((r: any) => r.ended) ? state : null;
    });
    expect(final.jobs[0].steps).toBe(stepped);
    expect(final.counters.gpu_source).toBe('nvidia-smi');
    await sidecar.stop();
  });

  // The next two are independent (own sidecar, own stand-in, own loop) and run at once.
  it.concurrent('restarts a killed nvidia-smi while the steps keep flowing in', async () => {
    const { env, dir } = fakeNvidiaSmiEnv((dir) => ({ gpus: 1, pidFile: path.join(dir, 'nvidia-smi.pid') }));
    const pidFile = path.join(dir, 'nvidia-smi.pid');
    const sidecar = await startSidecar(['--gpu-source', 'nvidia-smi', '--gpu-interval', '250'], env);
    const loop = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '600', '--data-ms', '9'], { ...rankEnv(sidecar.ingestUrl, 'restart', 0), WORLD_SIZE: '1' });
    await waitFor(async () => ((await sidecar.state()).jobs[0]?.steps ?? 0) > 50, 15_000);
    // The stream at the live pace: the one at the idle pace is ended and run again at 250 ms once the
    // job is live (a retune, not a restart), and CI once killed it just as it went (kill ESRCH).
    const pid = await waitFor(() => {
      const pid = Number(readFileSync(pidFile, 'utf8'));
      const args = existsSync(`/proc/${pid}/cmdline`) ? readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0') : [];
      return args[args.indexOf('-lms') + 1] === '250' && runs(pid) ? pid : null;
    }, 15_000);
    process.kill(pid, 'SIGKILL');

    // Steps keep being taken in while nvidia-smi is down: no rate, which load would decide, only that they come.
    const atKill = (await sidecar.state()).jobs[0].steps as number;
    await waitFor(async () => (await sidecar.state()).jobs[0].steps > atKill);

    await sidecar.waitForLog((line) => /exited|died|restart/i.test(line.msg) && line.level >= 40);
    const restarted = await waitFor(async () => {
      const state = await sidecar.state();
      return state.counters.gpu_health.restarts >= 1 && state.counters.gpu_health.state === 'ok' ? state : null;
    }, 15_000);
    expect(Number(readFileSync(pidFile, 'utf8'))).not.toBe(pid);
    expect(restarted.counters.gpus).toHaveLength(1);
    const run = await loop;
    expect(run.code, run.stderr).toBe(0);
    expect(run.result.steps).toBe(600);
    await sidecar.stop();
  });

  it.concurrent("takes the GPU counters the hook reads through NVML when the sidecar sees no GPU (--gpu-source hook)", async () => {
    const sidecar = await startSidecar(['--gpu-source', 'hook', '--gpu-interval', '250']);
    // The stand-in binding plays an H100 held at 1100 of 1980 MHz by HwThermalSlowdown.
    const pythonPath = [path.join(ROOT, 'test', 'fixtures', 'fake_pynvml'), path.join(ROOT, 'python-hook')].join(path.delimiter);
    const loop = runPython(plain.python!, fixture('plain_loop.py'), ['--steps', '400', '--data-ms', '9'], {
      ...rankEnv(sidecar.ingestUrl, 'hook-nvml', 0),
      WORLD_SIZE: '1',
      PYTHONPATH: pythonPath,
    });
    const state = await waitFor(async () => {
      const s = await sidecar.state();
      return s.jobs[0]?.ranks[0]?.window.gpu ? s : null;
    }, 15_000);
    expect(state.counters.gpu_source).toBe('hook');
    expect(state.counters.gpus[0]).toMatchObject({ uuid: 'GPU-3f1c2b7e-9a41-4e0b-8d7a-5c6e2f9a1b30', name: 'NVIDIA H100 80GB HBM3', sm_clock_mhz: 1100, throttle_reasons: ['HwThermalSlowdown'], power_w: 612.345 });
    expect(state.jobs[0].ranks[0].window.gpu).toMatchObject({ index: 0, sm_clock_max_mhz: 1980, temp_c_max: 89, throttle_share: { HwThermalSlowdown: 1 } });
    // GPM through the hook (the stand-in binding has nvidia-ml-py's structures): the profiling
    // activities without a DCGM exporter, from the second reading on.
    const profiled = await waitFor(async () => {
      const s = await sidecar.state();
      return s.counters.gpus[0]?.sm_active != null && s.jobs[0]?.ranks[0]?.window.gpu?.tensor_active_mean != null ? s : null;
    }, 15_000);
    expect(profiled.counters.gpus[0]).toMatchObject({ sm_active: 0.935, tensor_active: 0.031 });
    expect(profiled.jobs[0].ranks[0].window.gpu).toMatchObject({ sm_active_mean: 0.935, sm_occupancy_mean: 0.412, tensor_active_mean: 0.031, dram_active_mean: 0.227 });
    const run = await loop;
    expect(run.code, run.stderr).toBe(0);
    await sidecar.stop();
  });
});
