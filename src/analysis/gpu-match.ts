import type { KnownGpu } from '../counters/counter-store.js';

/** What a rank told us about its device in `hello.env`, plus its local rank. */
export interface DeviceHint {
  gpuUuid: string | null;
  /** Logical CUDA index in the training process (torch.cuda.current_device()). */
  gpuIndex: number | null;
  localRank: number;
  cudaVisibleDevices: string | null;
}

export type MatchedBy = 'uuid' | 'cuda-visible-devices' | 'local-rank';

export interface GpuMatch {
  gpu: KnownGpu;
  by: MatchedBy;
}

function normaliseUuid(uuid: string): string {
  return uuid.trim().toLowerCase().replace(/^gpu-/, '');
}

export function deviceHint(env: Record<string, unknown>, localRank: number): DeviceHint {
  const text = (value: unknown) => (typeof value === 'string' && value.trim() !== '' ? value : null);
  return {
    gpuUuid: text(env.gpu_uuid),
    gpuIndex: typeof env.gpu_index === 'number' ? env.gpu_index : null,
    localRank,
    cudaVisibleDevices: text(env.cuda_visible_devices),
  };
}

/**
 * The GPU a rank runs on: by the UUID its hook reported; else its logical device (the current
 * device, or torchrun's convention: the local rank) mapped through CUDA_VISIBLE_DEVICES, which may
 * list indices or (prefixes of) UUIDs.
 */
export function matchGpu(hint: DeviceHint, gpus: readonly KnownGpu[]): GpuMatch | null {
  if (hint.gpuUuid) {
    const wanted = normaliseUuid(hint.gpuUuid);
    const gpu = gpus.find((g) => g.uuid !== null && normaliseUuid(g.uuid) === wanted);
    if (gpu) return { gpu, by: 'uuid' };
  }
  const logical = hint.gpuIndex ?? hint.localRank;
  if (hint.cudaVisibleDevices) {
    const entry = hint.cudaVisibleDevices.split(',')[logical]?.trim();
    if (!entry) return null;
    if (/^\d+$/.test(entry)) {
      const gpu = gpus.find((g) => g.index === Number(entry));
      return gpu ? { gpu, by: 'cuda-visible-devices' } : null;
    }
    const prefix = normaliseUuid(entry);
    const byUuid = gpus.filter((g) => g.uuid !== null && normaliseUuid(g.uuid).startsWith(prefix));
    return byUuid.length === 1 ? { gpu: byUuid[0]!, by: 'cuda-visible-devices' } : null;
  }
  const gpu = gpus.find((g) => g.index === logical);
  return gpu ? { gpu, by: 'local-rank' } : null;
}
