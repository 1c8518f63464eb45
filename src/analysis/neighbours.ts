import type { StepWindow } from './window.js';
import { processList } from '../model/process-list.js';

/**
 * What else runs beside a job: other processes on its GPU and the busiest processes on its node.
 * Pure helpers the verdict rules call; they read only the rank's window.
 */

/**
 * Another process holding at least this much GPU memory is doing real work on the GPU, not just
 * holding a context. In the captures under test/fixtures/nvidia-smi (utkuozdemir/nvidia_gpu_exporter,
 * `--query-compute-apps` under load) a display server holds 25 MiB and NVENC encoders 230 to 681 MiB,
 * while the compute workloads hold 1,272 MiB and more (gpu_burn 7,484 to 28,234 MiB); a bare CUDA
 * context is a few hundred MiB. 1 GiB sits between the two.
 */
export const SHARED_GPU_MEMORY_MIB = 1024;

/**
 * The GPU busier than the job can account for: on the CUDA path, the job leaves the GPU idle for
 * `gpu_idle_share` of its step time, so its own utilization is at most 1 - that; the GPU reading
 * this many points above it is someone else's work. 25 points is beyond what the sampling of
 * utilization (NVML's sample period is 1/6 s to 1 s, per nvmlDeviceGetUtilizationRates) blurs.
 */
export const UNACCOUNTED_UTIL_POINTS = 25;

export interface GpuShared {
  cause: 'gpu-shared';
  why: string;
}

/**
 * `gpu-shared` when a process that is not the job's shares the rank's GPU and either holds
 * SHARED_GPU_MEMORY_MIB or more, or the GPU is busier than the job can account for. Null when no
 * other process was measured (DCGM, the hook: nothing can be said), when none holds a GPU, and when
 * the job's own pids were not seen on the GPU (another pid namespace: the job's own process cannot
 * be told from the others, so nothing is claimed).
 */
export function gpuSharedCause(window: StepWindow): GpuShared | null {
  const gpu = window.gpu;
  const others = gpu?.other_processes;
  if (!gpu || !others || !others.job_pid_seen || others.processes.length === 0) return null;
  const where = others.scope === 'physical-gpu' ? `the physical GPU of this MIG instance (GPU ${gpu.index})` : `GPU ${gpu.index}`;
  const list = processList(others.processes.map((p) => ({ pid: p.pid, name: p.name, figure: p.used_mib === null ? null : `${p.used_mib} MiB` })));
  const big = others.processes.filter((p) => p.used_mib !== null && p.used_mib >= SHARED_GPU_MEMORY_MIB);
  if (big.length > 0) return { cause: 'gpu-shared', why: `${big.length === 1 ? 'another process holds' : 'other processes hold'} ${SHARED_GPU_MEMORY_MIB} MiB or more on ${where}: ${list}` };
  const idle = window.gpu_idle_share;
  if (idle !== null && gpu.util_mean !== null) {
    const own = (1 - idle) * 100;
    if (gpu.util_mean - own >= UNACCOUNTED_UTIL_POINTS) {
      return { cause: 'gpu-shared', why: `${where} is ${Math.round(gpu.util_mean)}% busy while this job keeps it busy at most ${Math.round(own)}% of the time, and other processes run on it: ${list}` };
    }
  }
  return null;
}

/** "busiest others: python3 (pid 4242) 5.1 cores, …"; null where none were read or none are busy. */
export function topConsumersText(window: StepWindow): string | null {
  const top = window.host?.top_consumers;
  if (!top || top.processes.length === 0) return null;
  const list = processList(top.processes.map((p) => ({ pid: p.pid, name: p.name, figure: `${p.cores.toFixed(1)} cores` })));
  const caveats = [
    top.visible === 'pod' ? "only the sidecar's pod is visible" : null,
    top.job_seen ? null : "the job's own processes were not found, so some listed may be its own",
  ].filter((c): c is string => c !== null);
  return `busiest others: ${list}${caveats.length ? ` (${caveats.join('; ')})` : ''}`;
}
