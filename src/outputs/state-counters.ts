import { largestFirst, type ComputeApp } from '../counters/compute-apps.js';
import type { KnownGpu } from '../counters/counter-store.js';
import type { HostSample } from '../counters/host.js';
import { throttleReasonNames } from '../counters/types.js';
import type { GpuReading, HostReading } from '../protocol/state.js';

/** The counters' latest readings in the state's words: the sample's times (ms) written as ISO times. */

/** A GPU as last read, as the state has it. */
export function gpuReading(known: KnownGpu, processes: readonly ComputeApp[] | null): GpuReading {
  const sample = known.latest;
  return {
    index: sample.index,
    uuid: sample.uuid,
    name: sample.name,
    at: new Date(sample.at).toISOString(),
    util_gpu: sample.utilGpu,
    util_mem: sample.utilMem,
    sm_clock_mhz: sample.smClockMHz,
    sm_clock_max_mhz: sample.smClockMaxMHz,
    mem_clock_mhz: sample.memClockMHz,
    temp_c: sample.tempC,
    power_w: sample.powerW,
    power_limit_w: sample.powerLimitW,
    mem_used_mib: sample.memUsedMiB,
    mem_total_mib: sample.memTotalMiB,
    pstate: sample.pstate,
    throttle_reasons: throttleReasonNames(sample.throttleReasons),
    sm_active: sample.smActive,
    tensor_active: sample.tensorActive,
    key: known.key,
    parent_uuid: known.parentUuid,
    gpu_instance_id: known.gpuInstanceId,
    compute_instance_id: sample.computeInstanceId ?? null,
    mig_profile: sample.migProfile ?? null,
    processes:
      processes === null
        ? null
        : processes.map((app) => ({ pid: app.pid, name: app.name, used_mib: app.usedMiB })).sort(largestFirst((p) => p.used_mib)),
  };
}

/** The host as last read, as the state has it. */
export function hostReading(sample: HostSample | null): HostReading | null {
  if (!sample) return null;
  return {
    at: new Date(sample.at).toISOString(),
    cpu_pct: sample.cpuPct,
    cpu_per_core_pct: sample.cpuPerCorePct,
    iowait_pct: sample.iowaitPct,
    steal_pct: sample.stealPct,
    load1: sample.load1,
    load5: sample.load5,
    load15: sample.load15,
    mem_used_bytes: sample.memUsedBytes,
    mem_total_bytes: sample.memTotalBytes,
    mem_available_bytes: sample.memAvailableBytes,
    disk_read_bps: sample.diskReadBps,
    disk_write_bps: sample.diskWriteBps,
    net_rx_bps: sample.netRxBps,
    net_tx_bps: sample.netTxBps,
  };
}
