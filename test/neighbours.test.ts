import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { gpuSharedCause, SHARED_GPU_MEMORY_MIB, topConsumersText } from '../src/analysis/neighbours.js';
import { rankWindow, type StepWindow } from '../src/analysis/window.js';
import { parseComputeApps, type ComputeApp } from '../src/counters/compute-apps.js';
import { type HostSample } from '../src/counters/host.js';
import type { TopProcess } from '../src/counters/proc-pid.js';
import { emptyGpuSample } from '../src/counters/types.js';
import type { StepRecord } from '../src/protocol/messages.js';
import { StepBuckets } from '../src/store/step-buckets.js';
import { ROOT } from './support/sidecar.js';
import { computeAppFields, emptyHostSample } from './support/counters.js';

const H100 = 'GPU-00000000-0000-0000-0000-000000000000';
// gpu_burn (11345) 15690 MiB and two memhogs (11327, 11328) 2566 and 1542 MiB on one H100: a literal capture.
const [header, ...rows] = readFileSync(path.join(ROOT, 'test/fixtures/nvidia-smi/h100-80gb-hbm3_590.48.01_compute-apps_load.csv'), 'utf8').split('\n').filter((l) => l.trim());
const CAPTURED = parseComputeApps(rows.join('\n'), computeAppFields(header!));

const step = (seq: number, idleMs: number): StepRecord => ({
  seq, step: seq, endNs: 0, durNs: 100e6, dataNs: idleMs * 1e6, h2dNs: 0, computeNs: (100 - idleMs) * 1e6, samples: 8,
  gpuH2dNs: null, gpuComputeNs: (100 - idleMs) * 1e6, gpuIdleNs: idleMs * 1e6, commNs: null, commWaitNs: null, commBytes: null, evalNs: null,
});

function windowOf(options: { apps: ComputeApp[] | null; jobPids: number[]; util?: number; idleMs?: number; host?: HostSample[]; parentUuid?: string }): StepWindow {
  const buckets = new StepBuckets();
  for (let i = 0; i < 20; i++) buckets.add(step(i + 1, options.idleMs ?? 10), 1_000 + i * 100);
  const gpu = { ...emptyGpuSample(2_000, 0), uuid: options.parentUuid ? 'MIG-1' : H100, parentUuid: options.parentUuid ?? null, utilGpu: options.util ?? 90, memTotalMiB: 81559 };
  return rankWindow({
    from: 1_000, to: 3_000, steps: buckets.between(1_000, 3_000), stepMs: [],
    gpu: { samples: [gpu], matchedBy: 'uuid' }, apps: options.apps, jobPids: new Set(options.jobPids),
    host: options.host ?? [], process: [], memory: [],
  });
}

describe('gpuSharedCause', () => {
  it("names the other processes holding a GPU's memory beside the job's", () => {
    const shared = gpuSharedCause(windowOf({ apps: CAPTURED, jobPids: [11327] }));
    expect(shared).toEqual({
      cause: 'gpu-shared',
      why: `other processes hold ${SHARED_GPU_MEMORY_MIB} MiB or more on GPU 0: ./gpu_burn (pid 11345) 15690 MiB, /root/tools/memhog (pid 11328) 1542 MiB`,
    });
  });

  it('says it of the physical GPU on a MIG instance, since nvidia-smi does not say which slice', () => {
    expect(gpuSharedCause(windowOf({ apps: CAPTURED, jobPids: [11345], parentUuid: H100 }))?.why).toMatch(/^other processes hold 1024 MiB or more on the physical GPU of this MIG instance \(GPU 0\): \/root\/tools\/memhog \(pid 11327\) 2566 MiB/);
  });

  it('leaves out a bare context (a display server) while the job accounts for the GPU being busy', () => {
    const small: ComputeApp[] = [{ gpuUuid: H100, pid: 2165, name: '/usr/bin/kwin_wayland', usedMiB: 25 }, { gpuUuid: H100, pid: 1, name: 'train', usedMiB: 30_000 }];
    expect(gpuSharedCause(windowOf({ apps: small, jobPids: [1], util: 90, idleMs: 10 }))).toBeNull();
  });

  it("names a small process when the GPU is busier than the job's own use of it can explain", () => {
    const small: ComputeApp[] = [{ gpuUuid: H100, pid: 5022, name: 'ffmpeg', usedMiB: 503 }, { gpuUuid: H100, pid: 1, name: 'train', usedMiB: 30_000 }];
    // The job leaves the GPU idle 60% of each step, yet it reads 95% busy.
    expect(gpuSharedCause(windowOf({ apps: small, jobPids: [1], util: 95, idleMs: 60 }))?.why).toBe(
      'GPU 0 is 95% busy while this job keeps it busy at most 40% of the time, and other processes run on it: ffmpeg (pid 5022) 503 MiB',
    );
  });

  it('claims nothing where nothing was measured (DCGM), where none other runs, or where the job cannot be told from the others', () => {
    expect(gpuSharedCause(windowOf({ apps: null, jobPids: [1] }))).toBeNull();
    expect(gpuSharedCause(windowOf({ apps: [{ gpuUuid: H100, pid: 1, name: 'train', usedMiB: 30_000 }], jobPids: [1] }))).toBeNull();
    // The ranks' pids are not the ones nvidia-smi shows (another pid namespace): gpu_burn may be the job itself.
    expect(gpuSharedCause(windowOf({ apps: CAPTURED, jobPids: [77] }))).toBeNull();
  });
});

describe('topConsumersText', () => {
  const busy: TopProcess[] = [
    { pid: 4242, name: 'python3', cores: 5.12, ancestors: [1] },
    { pid: 100, name: 'train', cores: 3, ancestors: [1] },
    { pid: 101, name: 'pt_data_worker', cores: 1, ancestors: [100, 1] },
    { pid: 777, name: 'ffmpeg', cores: 2.04, ancestors: [1] },
  ];
  const host = (visible: 'node' | 'pod'): HostSample[] => [{ ...emptyHostSample(2_000), processes: { visible, read: 300, truncated: false, top: busy } }];

  it('lists the busiest processes outside the job, with their cores', () => {
    expect(topConsumersText(windowOf({ apps: null, jobPids: [100], host: host('node') }))).toBe('busiest others: python3 (pid 4242) 5.1 cores, ffmpeg (pid 777) 2.0 cores');
  });

  it("says what it could not see: only the pod, or not the job's own processes", () => {
    expect(topConsumersText(windowOf({ apps: null, jobPids: [100], host: host('pod') }))).toBe("busiest others: python3 (pid 4242) 5.1 cores, ffmpeg (pid 777) 2.0 cores (only the sidecar's pod is visible)");
    expect(topConsumersText(windowOf({ apps: null, jobPids: [9], host: host('node') }))).toMatch(/and 1 more \(the job's own processes were not found, so some listed may be its own\)$/);
  });

  it('is null without process readings', () => {
    expect(topConsumersText(windowOf({ apps: null, jobPids: [100], host: [emptyHostSample(2_000)] }))).toBeNull();
  });
});
