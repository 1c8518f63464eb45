import type { Cause, Verdict } from '../../model/verdict.js';
import type { Breakdown, GpuReading, GpuWindow, JobState, RankState, SidecarState } from '../../protocol/state.js';
import type { HistoryState } from './history.js';
import type { SourceState } from './source.js';

/** A row per rank and per GPU, from what one sidecar sent about one job. Pure. */


export interface RankRow {
  key: string;
  rank: number;
  host: string;
  node: string;
  steps: number;
  p50: number | null;
  p90: number | null;
  samplesPerS: number | null;
  breakdown: Breakdown | null;
  verdict: Verdict | null;
  cause: Cause;
  straggler: boolean;
  gpu: number | null;
  state: 'running' | 'ended' | 'disconnected';
  /** Its sidecar is not connected: the figures are the last it sent. */
  stale: boolean;
}

export interface GpuRow {
  key: string;
  node: string;
  index: number;
  name: string | null;
  util: number | null;
  smMHz: number | null;
  smMaxMHz: number | null;
  throttle: string[];
  tempC: number | null;
  powerW: number | null;
  powerLimitW: number | null;
  memUsedMiB: number | null;
  memTotalMiB: number | null;
  ranks: number[];
  stale: boolean;
}

/** One sidecar's view of the job. */
export interface Part {
  source: SourceState;
  state: SidecarState;
  job: JobState;
  label: string;
  /** Its sparkline figures (an ended job's, as they were when it ended). */
  history: HistoryState | null;
}

export function rankRow(part: Part, rank: RankState, straggler: number | null): RankRow {
  return {
    key: `${part.source.url}#${rank.rank}`,
    rank: rank.rank,
    host: rank.host,
    node: part.label,
    steps: rank.steps,
    p50: rank.window.step_ms_p50,
    p90: rank.window.step_ms_p90,
    samplesPerS: rank.window.samples_per_s,
    breakdown: rank.window.breakdown,
    verdict: rank.verdict?.verdict ?? null,
    cause: rank.verdict?.cause ?? null,
    straggler: straggler === rank.rank,
    gpu: rank.window.gpu?.index ?? null,
    state: rank.ended ? 'ended' : rank.connected ? 'running' : 'disconnected',
    stale: part.source.status !== 'live',
  };
}

/**
 * The GPU (of the sidecar's `gpus`) a rank's window was read from: by the window's `key` where the
 * sidecar sends it (it tells apart MIG slices that DCGM names by the parent's index, with no UUID of
 * their own). From older sidecars, by UUID where a GPU has it; else by index, where that index is one
 * GPU's, or one whole GPU's beside MIG slices, as the sidecar matches: a rank on one of several
 * slices is put on none rather than on all.
 */
export function gpuOfWindow(window: Pick<GpuWindow, 'index' | 'uuid' | 'key'>, gpus: readonly GpuReading[]): GpuReading | null {
  const byKey = window.key === undefined ? undefined : gpus.find((g) => g.key === window.key);
  if (byKey) return byKey;
  const byUuid = window.uuid === null ? undefined : gpus.find((g) => g.uuid === window.uuid);
  if (byUuid) return byUuid;
  const same = gpus.filter((g) => g.index === window.index);
  if (same.length === 1) return same[0]!;
  const whole = same.filter((g) => g.parent_uuid === null && g.gpu_instance_id === null);
  return whole.length === 1 ? whole[0]! : null;
}

export function gpuRows(part: Part): GpuRow[] {
  const gpus = part.state.counters.gpus;
  const onGpu = new Map<GpuReading, number[]>();
  for (const rank of part.job.ranks) {
    const gpu = rank.window.gpu ? gpuOfWindow(rank.window.gpu, gpus) : null;
    if (gpu) onGpu.set(gpu, [...(onGpu.get(gpu) ?? []), rank.rank]);
  }
  return gpus.map((gpu) => ({
    key: `${part.source.url}#${gpu.key ?? gpu.uuid ?? gpu.index}`,
    node: part.label,
    index: gpu.index,
    name: gpu.name,
    util: gpu.util_gpu,
    smMHz: gpu.sm_clock_mhz,
    smMaxMHz: gpu.sm_clock_max_mhz,
    throttle: gpu.throttle_reasons,
    tempC: gpu.temp_c,
    powerW: gpu.power_w,
    powerLimitW: gpu.power_limit_w,
    memUsedMiB: gpu.mem_used_mib,
    memTotalMiB: gpu.mem_total_mib,
    ranks: onGpu.get(gpu) ?? [],
    stale: part.source.status !== 'live',
  }));
}

/** Ranks reported by more than one sidecar (a rank that moved) count once: where it stepped last. */
export function uniqueRanks(rows: Array<{ part: Part; rank: RankState }>) {
  const byRank = new Map<number, { part: Part; rank: RankState }>();
  for (const row of rows) {
    const held = byRank.get(row.rank.rank);
    if (!held || (row.rank.last_step_at ?? '') > (held.rank.last_step_at ?? '')) byRank.set(row.rank.rank, row);
  }
  return [...byRank.values()].sort((a, b) => a.rank.rank - b.rank.rank);
}
