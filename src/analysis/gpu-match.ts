import type { KnownGpu } from '../counters/counter-store.js';

/** What a rank told us about its device in `hello.env`, plus its local rank. */
export interface DeviceHint {
  gpuUuid: string | null;
  /** Logical CUDA index in the training process (torch.cuda.current_device()). */
  gpuIndex: number | null;
  localRank: number;
  cudaVisibleDevices: string | null;
  /** On a MIG instance, where the hook can tell (NVML): its physical GPU and GPU instance id. */
  gpuParentUuid: string | null;
  gpuInstanceId: number | null;
}

export type MatchedBy = 'uuid' | 'cuda-visible-devices' | 'local-rank';

export interface GpuMatch {
  gpu: KnownGpu;
  by: MatchedBy;
}

/** The part of a UUID both forms share: torch prints a MIG instance's UUID as `GPU-<same>`. */
function normaliseUuid(uuid: string): string {
  return uuid.trim().toLowerCase().replace(/^(gpu|mig)-/, '');
}

/** Drivers before R470 named MIG devices `MIG-GPU-<parent uuid>/<gi>/<ci>`. */
const LEGACY_MIG = /^MIG-(GPU-[0-9a-f-]+)\/(\d+)\/(\d+)$/i;

export function deviceHint(env: Record<string, unknown>, localRank: number): DeviceHint {
  const text = (value: unknown) => (typeof value === 'string' && value.trim() !== '' ? value : null);
  const int = (value: unknown) => (typeof value === 'number' && Number.isInteger(value) ? value : null);
  return {
    gpuUuid: text(env.gpu_uuid),
    gpuIndex: int(env.gpu_index),
    localRank,
    cudaVisibleDevices: text(env.cuda_visible_devices),
    gpuParentUuid: text(env.gpu_parent_uuid),
    gpuInstanceId: int(env.gpu_instance_id),
  };
}

const isMig = (gpu: KnownGpu) => gpu.parentUuid !== null || gpu.gpuInstanceId !== null;
const sameUuid = (a: string | null, b: string) => a !== null && normaliseUuid(a) === normaliseUuid(b);

/**
 * The GPUs whose UUID is `wanted` or starts with it: as written first (a GPU and a MIG instance may
 * share the part after the prefix, as masked captures do), then by that part alone.
 */
function byUuid(gpus: readonly KnownGpu[], wanted: string, prefix: boolean): KnownGpu[] {
  const fits = (uuid: string, want: string) => (prefix ? uuid.startsWith(want) : uuid === want);
  const exact = gpus.filter((g) => g.uuid !== null && fits(g.uuid.trim().toLowerCase(), wanted.trim().toLowerCase()));
  return exact.length > 0 ? exact : gpus.filter((g) => g.uuid !== null && fits(normaliseUuid(g.uuid), normaliseUuid(wanted)));
}

/** A whole GPU by index; else the one MIG instance on it, never a guess between slices. */
function byIndex(gpus: readonly KnownGpu[], index: number): KnownGpu | null {
  const whole = gpus.find((g) => g.index === index && !isMig(g));
  if (whole) return whole;
  const slices = gpus.filter((g) => g.index === index && isMig(g));
  return slices.length === 1 ? slices[0]! : null;
}

function byInstance(gpus: readonly KnownGpu[], parent: string, gi: number): KnownGpu | null {
  return gpus.find((g) => sameUuid(g.parentUuid, parent) && g.gpuInstanceId === gi) ?? null;
}

/**
 * A `MIG-…` entry: by UUID (prefix) where the source names instances (nvidia-smi, NVML); by parent
 * and instance id in the legacy form; else, where the source knows instances only by their parent
 * (DCGM) and exactly one is known (the exporter's pod selection), that one.
 */
function byMigEntry(gpus: readonly KnownGpu[], entry: string): KnownGpu | null {
  const legacy = LEGACY_MIG.exec(entry);
  if (legacy) return byUuid(gpus, entry, false)[0] ?? byInstance(gpus, legacy[1]!, Number(legacy[2]));
  const named = byUuid(gpus, entry, true);
  if (named.length > 0) return named.length === 1 ? named[0]! : null;
  const unnamed = gpus.filter((g) => isMig(g) && g.uuid === null);
  return unnamed.length === 1 && normaliseUuid(entry) !== '' ? unnamed[0]! : null;
}

/**
 * The GPU a rank runs on: by the UUID its hook reported (or its MIG parent and instance); else its
 * logical device (the current device, or torchrun's convention: the local rank) mapped through
 * CUDA_VISIBLE_DEVICES, which may list indices, (prefixes of) UUIDs or MIG instances.
 */
export function matchGpu(hint: DeviceHint, gpus: readonly KnownGpu[]): GpuMatch | null {
  if (hint.gpuUuid) {
    const [gpu] = byUuid(gpus, hint.gpuUuid, false);
    if (gpu) return { gpu, by: 'uuid' };
  }
  if (hint.gpuParentUuid && hint.gpuInstanceId !== null) {
    const gpu = byInstance(gpus, hint.gpuParentUuid, hint.gpuInstanceId);
    if (gpu) return { gpu, by: 'uuid' };
  }
  const logical = hint.gpuIndex ?? hint.localRank;
  if (hint.cudaVisibleDevices) {
    const entry = hint.cudaVisibleDevices.split(',')[logical]?.trim();
    if (!entry) return null;
    let gpu: KnownGpu | null;
    if (/^\d+$/.test(entry)) gpu = byIndex(gpus, Number(entry));
    else if (/^mig-/i.test(entry)) gpu = byMigEntry(gpus, entry);
    else {
      const named = byUuid(gpus, entry, true);
      gpu = named.length === 1 ? named[0]! : null;
    }
    return gpu ? { gpu, by: 'cuda-visible-devices' } : null;
  }
  const gpu = byIndex(gpus, logical);
  return gpu ? { gpu, by: 'local-rank' } : null;
}
