import { isNotAvailable } from './nvidia-smi-parse.js';

/**
 * Pure reading of `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
 * --format=csv,noheader,nounits`: the processes holding a CUDA context on each GPU, with their memory.
 * On a MIG-enabled GPU the driver names the physical GPU's UUID, not the instance's
 * (test/fixtures/nvidia-smi/h100-80gb-hbm3-mig_590.48.01_compute-apps_load.csv), so a process there
 * is known to share the GPU, not which slice.
 */

export const COMPUTE_APPS_FIELDS = ['gpu_uuid', 'pid', 'process_name', 'used_memory'] as const;

export interface ComputeApp {
  gpuUuid: string;
  pid: number;
  name: string;
  /** MiB; null where the driver cannot say (Windows WDDM prints [N/A]). */
  usedMiB: number | null;
}

/** The largest holder of GPU memory first (unknown last), then by pid: one order wherever processes are listed. */
export const largestFirst =
  <T extends { pid: number }>(mib: (item: T) => number | null) =>
  (a: T, b: T): number =>
    (mib(b) ?? -1) - (mib(a) ?? -1) || a.pid - b.pid;

const MIB = /^(\d+)(?: ?MiB)?$/;

/**
 * One row, or null when it is not one. The process name is the workload's own and may hold commas,
 * so the columns left of it are taken from the left and those right of it from the right.
 */
export function parseComputeApp(line: string, fields: readonly string[]): ComputeApp | null {
  const columns = line.split(',').map((column) => column.trim());
  const nameAt = fields.indexOf('process_name');
  if (nameAt === -1 || columns.length < fields.length) return null;
  const after = fields.length - nameAt - 1;
  const value = (field: string): string | null => {
    const at = fields.indexOf(field);
    if (at === -1) return null;
    if (at < nameAt) return columns[at]!;
    if (at > nameAt) return columns[columns.length - (fields.length - at)]!;
    return columns.slice(nameAt, columns.length - after).join(', ');
  };
  const uuid = value('gpu_uuid');
  const pid = value('pid');
  const name = value('process_name');
  const memory = value('used_memory');
  if (uuid === null || !/^GPU-/.test(uuid) || pid === null || !/^\d+$/.test(pid) || name === null) return null;
  const mib = memory === null || isNotAvailable(memory) ? null : MIB.exec(memory);
  return { gpuUuid: uuid, pid: Number(pid), name, usedMiB: mib ? Number(mib[1]) : null };
}

/** Every row of an answer; lines that are not rows (a header, a warning) are left out. */
export function parseComputeApps(output: string, fields: readonly string[] = COMPUTE_APPS_FIELDS): ComputeApp[] {
  return output
    .split('\n')
    .filter((line) => line.trim())
    .flatMap((line) => parseComputeApp(line, fields) ?? []);
}
