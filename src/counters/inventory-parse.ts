import type { NodeInventory } from '../protocol/state.js';
import { parseGpuListing } from './nvidia-smi-mig.js';

/**
 * The node's static inventory, read once at start: what `compare` needs to tell "this run had 8
 * cores per GPU, the baseline 16". Pure: inventory.ts does the reading.
 */

export interface CpuFacts {
  manufacturer: string;
  brand: string;
  cores: number;
  physicalCores: number;
}

const VERSION = (label: string) => new RegExp(`${label} Version\\s*:\\s*(\\S+)`);

/** Driver and CUDA versions from the banner of plain `nvidia-smi` (or `-q`); null for one it does not print or prints as N/A. */
export function parseDriverBanner(text: string): { driver: string | null; cuda: string | null } {
  const version = (label: string) => {
    const found = VERSION(label).exec(text)?.[1] ?? null;
    return found === null || found === 'N/A' ? null : found;
  };
  return { driver: version('Driver'), cuda: version('CUDA') };
}

const positive = (n: number | null | undefined) => (n !== null && n !== undefined && Number.isFinite(n) && n > 0 ? n : null);

/** The inventory from what each reader gave; null for what it could not read (never a made-up zero). */
export function inventoryOf(cpu: CpuFacts | null, memoryBytes: number | null, smi: { listing: string | null; banner: string | null }): NodeInventory {
  const gpus = smi.listing === null ? null : parseGpuListing(smi.listing);
  const models = new Map<string, number>();
  for (const gpu of gpus ?? []) models.set(gpu.name, (models.get(gpu.name) ?? 0) + 1);
  const banner = smi.banner === null ? { driver: null, cuda: null } : parseDriverBanner(smi.banner);
  const brand = cpu ? `${cpu.manufacturer} ${cpu.brand}`.trim() : '';
  return {
    cpu_model: brand || null,
    cores_logical: positive(cpu?.cores),
    cores_physical: positive(cpu?.physicalCores),
    memory_bytes: positive(memoryBytes),
    gpu_models: gpus === null ? null : [...models].map(([name, count]) => ({ name, count })),
    gpu_count: gpus === null ? null : gpus.length,
    driver_version: banner.driver,
    cuda_version: banner.cuda,
  };
}

/** Logical cores per GPU the job can see; null where either is unknown or there is no GPU. */
export function coresPerGpu(inventory: Pick<NodeInventory, 'cores_logical'>, gpus: number | null): number | null {
  if (inventory.cores_logical === null || gpus === null || gpus <= 0) return null;
  return Math.round((inventory.cores_logical / gpus) * 100) / 100;
}
