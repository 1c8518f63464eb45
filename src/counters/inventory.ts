import si from 'systeminformation';
import type { Logger } from '../log/log.js';
import type { NodeInventory } from '../protocol/state.js';
import { inventoryOf, type CpuFacts } from './inventory-parse.js';
import { execOnce } from './nvidia-smi-exec.js';
import type { Source } from './source.js';

/**
 * Reads the node's inventory once, at start: CPU and memory through systeminformation (a few files
 * of /proc and /sys, once), the GPUs, driver and CUDA versions through nvidia-smi where the node has
 * it. Each part gives up after `timeoutMs`, leaving its figures null: a slow probe never delays the
 * sidecar for long.
 */
export async function readInventory(options: { nvidiaSmi: string; log: Logger; timeoutMs?: number }): Promise<NodeInventory> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  const within = <T>(work: Promise<T>): Promise<T | null> =>
    Promise.race([work.catch(() => null), new Promise<null>((resolve) => setTimeout(() => resolve(null), timeoutMs).unref())]);
  const smi = async (args: string[]) => {
    const result = await execOnce(options.nvidiaSmi, args, { env: undefined, timeoutMs });
    return result.ok ? result.stdout : null;
  };
  const [cpu, memory, listing, banner] = await Promise.all([within<CpuFacts>(si.cpu()), within(si.mem()), smi(['-L']), smi([])]);
  const inventory = inventoryOf(cpu, memory?.total ?? null, { listing, banner });
  options.log.info({ node: inventory }, 'node inventory');
  return inventory;
}

/** The inventory as a source: read once, at start, under the one supervisor. */
export function inventorySource(options: { nvidiaSmi: string; log: Logger }): Source<NodeInventory> {
  return { name: 'inventory', read: () => readInventory(options) };
}
