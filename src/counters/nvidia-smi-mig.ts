import type { GpuSample } from './types.js';

/**
 * MIG instances as nvidia-smi shows them. `--query-gpu` has a row per physical GPU only, so the
 * instances come from `nvidia-smi -L` (their UUIDs) and, once, `nvidia-smi -q` (their GPU and
 * compute instance ids, which R470 and later no longer put in the UUID). Pure: nvidia-smi.ts runs them.
 */

export interface MigDevice {
  /** The physical GPU's index and UUID. */
  parentIndex: number;
  parentUuid: string;
  parentName: string;
  /** The instance's index among its GPU's MIG devices ("Device 0"). */
  device: number;
  uuid: string;
  profile: string;
  gpuInstanceId: number | null;
  computeInstanceId: number | null;
  memTotalMiB: number | null;
}

/** Whether any row of a `--query-gpu` answer that asked for mig.mode.current says "Enabled". */
export function anyMigEnabled(stdout: string, fields: readonly string[]): boolean {
  const at = fields.indexOf('mig.mode.current');
  return at >= 0 && stdout.split('\n').some((line) => line.split(',')[at]?.trim() === 'Enabled');
}

const GPU_LINE = /^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)$/;
const MIG_LINE = /^MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$/;
/** Before R470 the UUID itself said where the instance lies: MIG-<parent UUID>/<gi>/<ci>. */
const LEGACY_MIG_UUID = /^MIG-GPU-[0-9a-f-]+\/(\d+)\/(\d+)$/i;

/** The physical GPUs in `nvidia-smi -L` output, in its order. */
export function parseGpuListing(text: string): Array<{ index: number; name: string; uuid: string }> {
  return text.split('\n').flatMap((raw) => {
    const gpu = GPU_LINE.exec(raw.trim());
    return gpu ? [{ index: Number(gpu[1]), name: gpu[2]!, uuid: gpu[3]! }] : [];
  });
}

/** The MIG devices in `nvidia-smi -L` output; none for a GPU without MIG. */
export function parseMigListing(text: string): MigDevice[] {
  const devices: MigDevice[] = [];
  let parent: { index: number; name: string; uuid: string } | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    const gpu = GPU_LINE.exec(line);
    if (gpu) {
      parent = { index: Number(gpu[1]), name: gpu[2]!, uuid: gpu[3]! };
      continue;
    }
    const mig = MIG_LINE.exec(line);
    if (!mig || !parent) continue;
    const legacy = LEGACY_MIG_UUID.exec(mig[3]!);
    devices.push({
      parentIndex: parent.index,
      parentUuid: parent.uuid,
      parentName: parent.name,
      device: Number(mig[2]),
      uuid: mig[3]!,
      profile: mig[1]!,
      gpuInstanceId: legacy ? Number(legacy[1]) : null,
      computeInstanceId: legacy ? Number(legacy[2]) : null,
      memTotalMiB: null,
    });
  }
  return devices;
}

export interface MigQueryEntry {
  parentUuid: string;
  device: number;
  gpuInstanceId: number | null;
  computeInstanceId: number | null;
  memTotalMiB: number | null;
}

/**
 * The "MIG Device" blocks of `nvidia-smi -q`, with the GPU UUID of the block they sit in (which
 * comes after them). Indentation says where a key belongs: 4 spaces under a GPU, 8 under a MIG
 * device, 12 under its memory.
 */
export function parseMigQuery(text: string): MigQueryEntry[] {
  const entries: MigQueryEntry[] = [];
  let pending: Array<Omit<MigQueryEntry, 'parentUuid'>> = [];
  let current: Omit<MigQueryEntry, 'parentUuid'> | null = null;
  let section = '';
  const flush = (parentUuid: string | null) => {
    if (parentUuid !== null) for (const entry of pending) entries.push({ parentUuid, ...entry });
    pending = [];
    current = null;
  };
  let parentUuid: string | null = null;
  for (const raw of text.split('\n')) {
    if (/^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+\s*$/.test(raw)) {
      flush(parentUuid);
      parentUuid = null;
      continue;
    }
    const indent = raw.length - raw.trimStart().length;
    const [key = '', value = ''] = raw.trim().split(/\s+:\s*/, 2) as [string?, string?];
    if (indent === 4) {
      current = null;
      if (key === 'MIG Device') pending.push((current = { device: -1, gpuInstanceId: null, computeInstanceId: null, memTotalMiB: null }));
      if (key === 'GPU UUID') parentUuid = value;
    } else if (current && indent === 8) {
      section = value === '' ? key : '';
      if (key === 'Index') current.device = Number(value);
      if (key === 'GPU Instance ID') current.gpuInstanceId = integer(value);
      if (key === 'Compute Instance ID') current.computeInstanceId = integer(value);
    } else if (current && indent === 12 && /FB Memory Usage$/.test(section) && key === 'Total') {
      current.memTotalMiB = integer(value.replace(/\s*MiB$/, ''));
    }
  }
  flush(parentUuid);
  return entries.filter((entry) => entry.device >= 0);
}

function integer(text: string): number | null {
  return /^\d+$/.test(text) ? Number(text) : null;
}

/** The listing with the ids and memory `-q` knows, matched by parent and device index. */
export function withQueryDetails(devices: readonly MigDevice[], query: readonly MigQueryEntry[]): MigDevice[] {
  return devices.map((device) => {
    const found = query.find((entry) => entry.parentUuid === device.parentUuid && entry.device === device.device);
    if (!found) return device;
    return {
      ...device,
      gpuInstanceId: device.gpuInstanceId ?? found.gpuInstanceId,
      computeInstanceId: device.computeInstanceId ?? found.computeInstanceId,
      memTotalMiB: found.memTotalMiB,
    };
  });
}

/**
 * A round with one more sample per MIG instance after its GPU's. Clocks, power, temperature,
 * P-state and throttle reasons are the physical GPU's, which every instance on it runs under (DCGM
 * reports them so for its GPU-instance entities); utilization and memory in use are per instance
 * and nvidia-smi has neither, so they stay null.
 */
export function withMigInstances(round: readonly GpuSample[], devices: readonly MigDevice[]): GpuSample[] {
  if (devices.length === 0) return [...round];
  return round.flatMap((gpu) => {
    const own = devices.filter((device) => (gpu.uuid !== null ? device.parentUuid === gpu.uuid : device.parentIndex === gpu.index));
    return [gpu, ...own.map((device) => instanceSample(gpu, device))];
  });
}

function instanceSample(gpu: GpuSample, device: MigDevice): GpuSample {
  return {
    ...gpu,
    uuid: device.uuid,
    name: `${gpu.name ?? device.parentName} MIG ${device.profile}`,
    parentUuid: device.parentUuid,
    gpuInstanceId: device.gpuInstanceId,
    computeInstanceId: device.computeInstanceId,
    migProfile: device.profile,
    utilGpu: null,
    utilMem: null,
    memUsedMiB: null,
    memTotalMiB: device.memTotalMiB,
  };
}
