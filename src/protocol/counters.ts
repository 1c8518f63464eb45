import { emptyGpuSample, type GpuSample } from '../model/gpu.js';
import { PRINTABLE } from './hook-schema.js';
import { shortly, validatorOf } from './parse.js';

/** Counters that only the hook can read, as sent in `counters` frames (see docs/protocol.md). */

export interface NvmlSample {
  at_ns: number;
  index: number | null;
  uuid: string | null;
  name: string | null;
  util_gpu: number | null;
  util_mem: number | null;
  mem_used_mib: number | null;
  mem_total_mib: number | null;
  temp_c: number | null;
  power_w: number | null;
  power_limit_w: number | null;
  sm_clock_mhz: number | null;
  sm_clock_max_mhz: number | null;
  mem_clock_mhz: number | null;
  pstate: string | null;
  throttle_reasons: number | null;
  /** NVML GPM (Hopper and newer), as fractions 0..1: DCGM's SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE. */
  sm_active: number | null;
  sm_occupancy: number | null;
  tensor_active: number | null;
  dram_active: number | null;
}

export interface ProcessSample {
  at_ns: number;
  cpu_main_s: number | null;
  cpu_workers_s: number | null;
  workers: number | null;
  rss_bytes: number | null;
  cgroup_nr_periods: number | null;
  cgroup_nr_throttled: number | null;
  cgroup_throttled_usec: number | null;
  cgroup_quota_cores: number | null;
  cgroup_usage_usec: number | null;
  /** The training thread's time on a CPU and waiting for one (run queue), s (/proc/self/task/<tid>/schedstat); null unread or from an older hook. */
  train_cpu_s: number | null;
  train_wait_s: number | null;
}

/** The framework's allocator on one device (torch.cuda.memory_stats), read off the training thread. */
export interface MemorySample {
  at_ns: number;
  device: number | null;
  allocated_bytes: number | null;
  reserved_bytes: number | null;
  peak_allocated_bytes: number | null;
  /** Cumulative: times the allocator freed its cache and synchronised to satisfy a request. */
  alloc_retries: number | null;
  /** Cumulative out-of-memory errors the allocator raised. */
  ooms: number | null;
  inactive_split_bytes: number | null;
  total_bytes: number | null;
  /** The device's free memory, for every process on it (cudaMemGetInfo). */
  free_bytes: number | null;
}

export type CounterBatch =
  | { source: 'nvml'; samples: NvmlSample[] }
  | { source: 'process'; samples: ProcessSample[] }
  | { source: 'memory'; samples: MemorySample[] };

const figure = { type: ['number', 'null'], minimum: 0, maximum: 1e18 } as const;
const fraction = { type: ['number', 'null'], minimum: 0, maximum: 1 } as const;
// No control characters: a GPU name or pstate is shown in a terminal.
const text = { type: ['string', 'null'], maxLength: 128, pattern: PRINTABLE } as const;
const atNs = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;

const NVML_FIGURES = [
  'index',
  'util_gpu',
  'util_mem',
  'mem_used_mib',
  'mem_total_mib',
  'temp_c',
  'power_w',
  'power_limit_w',
  'sm_clock_mhz',
  'sm_clock_max_mhz',
  'mem_clock_mhz',
  'throttle_reasons',
] as const;
const NVML_TEXT = ['uuid', 'name', 'pstate'] as const;
/** GPM activities (the hook reads them where the GPU has GPM), 0..1. */
const NVML_FRACTIONS = ['sm_active', 'sm_occupancy', 'tensor_active', 'dram_active'] as const;
const PROCESS_FIGURES = [
  'cpu_main_s',
  'cpu_workers_s',
  'workers',
  'rss_bytes',
  'cgroup_nr_periods',
  'cgroup_nr_throttled',
  'cgroup_throttled_usec',
  'cgroup_quota_cores',
  'cgroup_usage_usec',
  'train_cpu_s',
  'train_wait_s',
] as const;

const MEMORY_FIGURES = ['device', 'allocated_bytes', 'reserved_bytes', 'peak_allocated_bytes', 'alloc_retries', 'ooms', 'inactive_split_bytes', 'total_bytes', 'free_bytes'] as const;

const sampleSchema = (figures: readonly string[], texts: readonly string[], fractions: readonly string[] = []) => ({
  type: 'object',
  required: ['at_ns'],
  properties: {
    at_ns: atNs,
    ...Object.fromEntries(figures.map((key) => [key, figure])),
    ...Object.fromEntries(texts.map((key) => [key, text])),
    ...Object.fromEntries(fractions.map((key) => [key, fraction])),
  },
});

/** Each source's samples: precompiled by the build (scripts/build-validators.mjs), else compiled on a hook's first counters frame. */
export const counterSchemas: Record<CounterBatch['source'], object> = {
  nvml: { type: 'array', minItems: 1, maxItems: 64, items: sampleSchema(NVML_FIGURES, NVML_TEXT, NVML_FRACTIONS) },
  process: { type: 'array', minItems: 1, maxItems: 64, items: sampleSchema(PROCESS_FIGURES, []) },
  memory: { type: 'array', minItems: 1, maxItems: 64, items: sampleSchema(MEMORY_FIGURES, []) },
};

function normalise<T>(sample: Record<string, unknown>, keys: readonly string[]): T {
  const out: Record<string, unknown> = { at_ns: sample.at_ns };
  for (const key of keys) out[key] = sample[key] ?? null;
  return out as T;
}

/** Validates a `counters` frame's samples; returns an error text instead of throwing. */
export function parseCounterBatch(source: unknown, samples: unknown): CounterBatch | string {
  if (source !== 'nvml' && source !== 'process' && source !== 'memory') return `counters.source: unknown source ${shortly(source)}`;
  const validate = validatorOf(counterSchemas[source]);
  if (!validate(samples)) {
    const error = validate.errors?.[0];
    const where = error?.instancePath.replace(/^\//, '').replaceAll('/', '.') ?? '';
    return `counters.samples${where ? '.' + where : ''}: ${error?.message ?? 'invalid'}`;
  }
  const rows = samples as Record<string, unknown>[];
  switch (source) {
    case 'nvml':
      return { source, samples: rows.map((s) => normalise<NvmlSample>(s, [...NVML_FIGURES, ...NVML_TEXT, ...NVML_FRACTIONS])) };
    case 'process':
      return { source, samples: rows.map((s) => normalise<ProcessSample>(s, PROCESS_FIGURES)) };
    case 'memory':
      return { source, samples: rows.map((s) => normalise<MemorySample>(s, MEMORY_FIGURES)) };
  }
}

/** A GPU reading the hook took through NVML, as the sidecar's own collectors give them. */
export function nvmlToGpuSample(s: NvmlSample, at: number): GpuSample {
  return {
    ...emptyGpuSample(at, s.index ?? 0),
    uuid: s.uuid,
    name: s.name,
    utilGpu: s.util_gpu,
    utilMem: s.util_mem,
    memUsedMiB: s.mem_used_mib,
    memTotalMiB: s.mem_total_mib,
    tempC: s.temp_c,
    powerW: s.power_w,
    powerLimitW: s.power_limit_w,
    smClockMHz: s.sm_clock_mhz,
    smClockMaxMHz: s.sm_clock_max_mhz,
    memClockMHz: s.mem_clock_mhz,
    pstate: s.pstate,
    throttleReasons: s.throttle_reasons,
    smActive: s.sm_active,
    smOccupancy: s.sm_occupancy,
    tensorActive: s.tensor_active,
    dramActive: s.dram_active,
  };
}
