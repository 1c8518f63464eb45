import { COMPUTE_APPS_FIELDS, parseComputeApps, type ComputeApp } from './compute-apps.js';
import { execOnce } from './nvidia-smi-exec.js';
import { exitWarning } from './nvidia-smi-parse.js';
import type { Source } from './source.js';

/**
 * The compute processes on every GPU, from `nvidia-smi --query-compute-apps`: which processes hold a
 * GPU changes slowly and each reading is a process spawn, so it is polled apart from the GPU counters'
 * stream (every 5 s in serve), under the one supervisor.
 */
export function computeAppsSource(options: { binary: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Source<ComputeApp[]> {
  const args = [`--query-compute-apps=${COMPUTE_APPS_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];
  return {
    name: 'compute-apps',
    async read(signal) {
      const result = await execOnce(options.binary, args, { env: options.env, timeoutMs: options.timeoutMs ?? 15_000, signal });
      // A warning exit (a GPU fell off the bus, say) still lists the others' processes.
      if (result.ok || exitWarning(result.code) !== null) return parseComputeApps(result.stdout);
      throw new Error(`nvidia-smi does not list the compute processes; other processes on the GPUs are not shown (${result.reason})`);
    },
  };
}
