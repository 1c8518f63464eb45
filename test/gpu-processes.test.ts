import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { withOtherProcesses } from '../src/analysis/summary.js';
import type { SummaryGpu } from '../src/protocol/summary.js';
import { otherProcesses, rankWindow } from '../src/analysis/window.js';
import { parseComputeApp, parseComputeApps, type ComputeApp } from '../src/counters/compute-apps.js';
import { CounterStore } from '../src/counters/counter-store.js';
import type { HostSample } from '../src/counters/host.js';
import { describeAggregate } from '../src/counters/gpu-aggregate.js';
import { emptyGpuSample, type GpuSample } from '../src/counters/types.js';
import { otherProcessesLine } from '../src/outputs/summary-text.js';
import { StepBuckets } from '../src/store/step-buckets.js';
import { ROOT } from './support/sidecar.js';
import { computeAppFields } from './support/counters.js';

// Literal `nvidia-smi --query-compute-apps` captures; test/fixtures/nvidia-smi/SOURCES.md says where from.
const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'nvidia-smi');
function capture(name: string): ComputeApp[] {
  const [header, ...rows] = readFileSync(path.join(FIXTURES, name), 'utf8').split('\n').filter((line) => line.trim());
  return parseComputeApps(rows.join('\n'), computeAppFields(header!));
}

const H100 = 'GPU-00000000-0000-0000-0000-000000000000';
const gpuSample = (over: Partial<GpuSample>): GpuSample => ({ ...emptyGpuSample(1_000, 0), utilGpu: 97, memTotalMiB: 81559, ...over });

describe('nvidia-smi --query-compute-apps, parsed', () => {
  it('reads every process of a loaded H100 with the memory it holds', () => {
    expect(capture('h100-80gb-hbm3_590.48.01_compute-apps_load.csv')).toEqual([
      { gpuUuid: H100, pid: 11327, name: '/root/tools/memhog', usedMiB: 2566 },
      { gpuUuid: H100, pid: 11328, name: '/root/tools/memhog', usedMiB: 1542 },
      { gpuUuid: H100, pid: 11345, name: './gpu_burn', usedMiB: 15690 },
    ]);
  });

  it('reads [N/A] memory (Windows WDDM) as not known, and names with spaces whole', () => {
    const apps = capture('rtx-2080-super_591.86_windows_compute-apps_idle.csv');
    expect(apps).toHaveLength(10);
    expect(apps.every((app) => app.usedMiB === null)).toBe(true);
    expect(apps).toContainEqual({ gpuUuid: H100, pid: 20372, name: 'C:\\Program Files\\NZXT CAM\\NZXT CAM.exe', usedMiB: null });
  });

  it('keeps a process name that holds commas, taking the other columns from both ends', () => {
    // The sidecar's own query: gpu_uuid,pid,process_name,used_memory with noheader,nounits.
    expect(parseComputeApps(`${H100}, 4242, python3 train.py --tags a,b, 20480\n`)).toEqual([{ gpuUuid: H100, pid: 4242, name: 'python3 train.py --tags a, b', usedMiB: 20480 }]);
  });

  it('skips what is not a row: a header, a message', () => {
    expect(parseComputeApp('No running processes found', ['gpu_uuid', 'pid', 'process_name', 'used_memory'])).toBeNull();
    expect(parseComputeApps('gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n')).toEqual([]);
  });
});

describe("other processes on a rank's GPU", () => {
  const apps = capture('h100-80gb-hbm3_590.48.01_compute-apps_load.csv');

  it("are the GPU's processes less the job's pids, the largest first", () => {
    const others = otherProcesses(apps, { uuid: H100, parentUuid: null }, new Set([11345]));
    expect(others).toEqual({
      scope: 'gpu',
      job_pid_seen: true,
      processes: [
        { pid: 11327, name: '/root/tools/memhog', used_mib: 2566 },
        { pid: 11328, name: '/root/tools/memhog', used_mib: 1542 },
      ],
      used_mib: 4108,
    });
  });

  it("say so when none of the job's pids is among them (another pid namespace), listing them all", () => {
    const others = otherProcesses(apps, { uuid: H100, parentUuid: null }, new Set([7]));
    expect(others).toMatchObject({ job_pid_seen: false, used_mib: 2566 + 1542 + 15690 });
    expect(others!.processes.map((p) => p.pid)).toEqual([11345, 11327, 11328]);
  });

  it('are those of the physical GPU on a MIG instance, which nvidia-smi lists by its parent', () => {
    const mig = capture('h100-80gb-hbm3-mig_590.48.01_compute-apps_load.csv');
    const others = otherProcesses(mig, { uuid: 'MIG-00000000-0000-0000-0000-000000000000', parentUuid: H100 }, new Set([21198]));
    expect(others).toMatchObject({ scope: 'physical-gpu', job_pid_seen: true, used_mib: 2296 + 1272 });
  });

  it('are null, not none, where nothing listed them (DCGM, the hook), and [] where nvidia-smi listed none', () => {
    const window = (list: ComputeApp[] | null) =>
      rankWindow({ from: 0, to: 2_000, steps: new StepBuckets().between(0, 2_000), stepMs: [], gpu: { samples: [gpuSample({ uuid: H100 })], matchedBy: 'uuid' }, apps: list, host: [], process: [], memory: [] });
    expect(window(null).gpu!.other_processes).toBeNull();
    expect(window([]).gpu!.other_processes).toEqual({ scope: 'gpu', job_pid_seen: false, processes: [], used_mib: null });
  });
});

describe('other processes over a run', () => {
  it("keep the most memory each held in the counter store's slices, and leave the summary without them where none were read", () => {
    const store = new CounterStore<HostSample>();
    store.addGpuSamples([gpuSample({ at: 1_000, uuid: H100 }), gpuSample({ at: 2_000, uuid: 'GPU-other' })]);
    expect(describeAggregate(store.gpuAggregate(H100, 0, 20_000)).processes).toBeUndefined();
    store.addApps({ at: 1_500, apps: [{ gpuUuid: H100, pid: 9, name: 'burn', usedMiB: 100 }] });
    store.addApps({ at: 12_500, apps: [{ gpuUuid: H100, pid: 9, name: 'burn', usedMiB: 300 }, { gpuUuid: H100, pid: 10, name: 'train', usedMiB: 50 }] });
    expect(describeAggregate(store.gpuAggregate(H100, 0, 20_000)).processes).toEqual([
      { pid: 9, name: 'burn', used_mib_max: 300 },
      { pid: 10, name: 'train', used_mib_max: 50 },
    ]);
    expect(describeAggregate(store.gpuAggregate('GPU-other', 0, 20_000)).processes).toEqual([]);
    expect(store.appsAt(13_000)!.apps).toHaveLength(2);
    expect(store.appsAt(13_000 + 20_000)).toBeNull();
    // A checkpoint keeps the readings.
    expect(CounterStore.load(store.dump()).appsAt(13_000)).toEqual(store.appsAt(13_000));
  });

  it("show in the summary's GPU rows as other processes, in every rendering", () => {
    const gpu = {
      index: 0, uuid: H100, name: 'NVIDIA H100 80GB HBM3', ranks: [0], samples: 10, util_mean: 97, sm_clock_frac_mean: 1, sm_clock_max_mhz: 1980, throttle_share: {},
      temp_c_max: 59, power_frac_mean: 0.9, power_limit_w: 700, mem_peak_mib: 20000, mem_total_mib: 81559,
      processes: [{ pid: 11345, name: './gpu_burn', used_mib_max: 15690 }, { pid: 4242, name: 'python3', used_mib_max: 3000 }],
    };
    const summarised = withOtherProcesses(gpu, new Set([4242]));
    expect(summarised).not.toHaveProperty('processes');
    expect(summarised.other_processes).toEqual([{ pid: 11345, name: './gpu_burn', used_mib_max: 15690 }]);
    expect(otherProcessesLine(summarised)).toBe('Other processes on GPU 0: ./gpu_burn (pid 11345) 15690 MiB.');
    const { processes: _, ...unmeasured } = gpu;
    expect(withOtherProcesses(unmeasured as SummaryGpu, new Set())).not.toHaveProperty('other_processes');
    expect(otherProcessesLine(withOtherProcesses(unmeasured as SummaryGpu, new Set()))).toBeNull();
  });
});
