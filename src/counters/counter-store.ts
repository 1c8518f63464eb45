import { Ring } from '../store/ring.js';
import type { ComputeApp } from './compute-apps.js';
import type { FilledFrom, FillSource } from './coverage.js';
import { addProcesses, addSample, emptyAggregate, mergeAggregate, type GpuAggregate } from './gpu-aggregate.js';
import type { GpuSample } from './types.js';
import type { CountersCheckpoint } from './counters-checkpoint.js';
import type { HostSample } from './host.js';

/**
 * GPU sums, so that any job's span can be summed in fixed memory: per 10 s slice for the last hour,
 * then folded into 5 min slices for the rest of the day (a day of 10 s slices was 8,640 objects a GPU).
 */
const SLICE_MS = 10_000;
const SLICES_KEPT = 360;
const COARSE_MS = 300_000;
const COARSE_KEPT = 288;

interface GpuEntry {
  known: KnownGpu;
  history: Ring<GpuSample>;
  slices: Map<number, GpuAggregate>;
  coarse: Map<number, GpuAggregate>;
}

export interface KnownGpu {
  key: string;
  index: number;
  uuid: string | null;
  name: string | null;
  /** For a MIG instance: its physical GPU and GPU instance id; both null for a whole GPU. */
  parentUuid: string | null;
  gpuInstanceId: number | null;
  latest: GpuSample;
}

/** One `nvidia-smi --query-compute-apps` answer: every GPU's compute processes at `at`. */
export interface AppsReading {
  at: number;
  apps: ComputeApp[];
}

/**
 * A sample as held: for the throttle signals its own source lacked, where they came from instead;
 * `profilingFrom` where its profiling activities (SM, tensor pipes, DRAM) did.
 */
export type HeldGpuSample = GpuSample & { filled?: FilledFrom; profilingFrom?: FillSource };

/** A reading from a second source, for the signals the GPU source lacks (the default DCGM exporter has no throttle reasons). */
interface Filler {
  sample: GpuSample;
  source: FillSource;
}

/**
 * A second source's reading fills a sample at most this far from it in time: clock-event reasons
 * change within seconds, so an older one would speak of another moment.
 */
export const FILL_STALE_MS = 5_000;

/** The physical GPU a sample is of (a MIG instance's parent): clocks, reasons and the power limit are the physical GPU's. */
const physicalUuid = (sample: Pick<GpuSample, 'uuid'> & Partial<Pick<GpuSample, 'parentUuid'>>) => sample.parentUuid ?? sample.uuid;

/**
 * `sample` with the throttle signals it lacks taken from `filler` (the same physical GPU, close in
 * time), each marked with where it came from; the sample itself when nothing is filled.
 */
export function fillThrottle(sample: GpuSample, filler: Filler | undefined): HeldGpuSample {
  if (!filler || Math.abs(filler.sample.at - sample.at) > FILL_STALE_MS) return sample;
  const filled: FilledFrom = {};
  const out: HeldGpuSample = { ...sample };
  if (sample.throttleReasons === null && filler.sample.throttleReasons !== null) {
    out.throttleReasons = filler.sample.throttleReasons;
    filled.reasons = filler.source;
  }
  if (sample.smClockMaxMHz === null && filler.sample.smClockMaxMHz !== null) {
    out.smClockMaxMHz = filler.sample.smClockMaxMHz;
    filled['max-sm-clock'] = filler.source;
  }
  if (sample.powerLimitW === null && filler.sample.powerLimitW !== null) {
    out.powerLimitW = filler.sample.powerLimitW;
    filled['power-limit'] = filler.source;
  }
  return Object.keys(filled).length === 0 ? sample : { ...out, filled };
}

const PROFILING = ['smActive', 'smOccupancy', 'tensorActive', 'dramActive'] as const;

/**
 * `sample` with the profiling activities it lacks (nvidia-smi has none, the default DCGM exporter
 * none) taken from `filler`: the hooks' NVML GPM readings of the same whole GPU, close in time. A MIG
 * instance is not filled: GPM of the physical GPU would speak of every slice.
 */
export function fillProfiling(sample: HeldGpuSample, filler: Filler | undefined): HeldGpuSample {
  if (!filler || (sample.parentUuid ?? null) !== null || Math.abs(filler.sample.at - sample.at) > FILL_STALE_MS) return sample;
  if (PROFILING.some((field) => sample[field] !== null) || PROFILING.every((field) => filler.sample[field] === null)) return sample;
  const out: HeldGpuSample = { ...sample, profilingFrom: filler.source };
  for (const field of PROFILING) out[field] = filler.sample[field];
  return out;
}

/** A reading of the processes older than this at a window's end is not shown as current. */
export const APPS_STALE_MS = 15_000;

/**
 * Whether a compute process listed under `gpuUuid` runs on `gpu`: on it, or on its physical GPU when
 * it is a MIG instance (nvidia-smi lists those by the physical GPU's UUID).
 */
function listedOn(gpuUuid: string, gpu: Pick<KnownGpu, 'uuid' | 'parentUuid'>): boolean {
  return (gpu.parentUuid !== null && gpuUuid === gpu.parentUuid) || (gpu.uuid !== null && gpuUuid === gpu.uuid);
}

/** The compute apps `apps` lists on `gpu` (a MIG instance: on its physical GPU); null where none were read. */
export function appsOn<T extends { gpuUuid: string }>(apps: readonly T[] | null, gpu: Pick<KnownGpu, 'uuid' | 'parentUuid'>): T[] | null {
  return apps === null ? null : apps.filter((app) => listedOn(app.gpuUuid, gpu));
}

/** Recent counter samples, by GPU and for the host, for matching against steps in time. */
export class CounterStore<Host extends { at: number } = { at: number }> {
  private readonly gpus = new Map<string, GpuEntry>();
  private readonly host: Ring<Host>;
  private readonly apps = new Ring<AppsReading>(60);
  /** By physical GPU UUID, the latest reading of a second source. */
  private readonly fillers = new Map<string, Filler>();

  /**
   * Readings of a second source (the sidecar's nvidia-smi beside DCGM, the hooks' NVML): not GPUs of
   * their own, only what fills the throttle signals the GPU source lacks. A MIG instance's readings
   * are left out: the physical GPU's carry the same signals.
   */
  addFillSamples(samples: readonly GpuSample[], source: FillSource): void {
    for (const sample of samples) {
      if (sample.uuid === null || (sample.parentUuid ?? null) !== null) continue;
      this.fillers.set(sample.uuid, { sample, source });
    }
  }

  constructor(private readonly historyPerGpu = 1200, hostHistory = 600) {
    this.host = new Ring(hostHistory);
  }

  /** A compute-apps reading: kept for the windows, and each GPU's processes summed into its slice for the summaries. */
  addApps(reading: AppsReading): void {
    this.apps.push(reading);
    for (const entry of this.gpus.values()) {
      addProcesses(sliceAt(entry, reading.at), appsOn(reading.apps, entry.known)!);
    }
  }

  /** The newest compute-apps reading in [to - APPS_STALE_MS, to]; null where none was read (no nvidia-smi). */
  appsAt(to: number): AppsReading | null {
    return this.apps.between(to - APPS_STALE_MS, to, sampleTime).at(-1) ?? null;
  }

  addGpuSamples(samples: readonly GpuSample[]): void {
    for (const given of samples) {
      const physical = physicalUuid(given);
      const filler = physical === null ? undefined : this.fillers.get(physical);
      const sample = physical === null ? given : fillProfiling(fillThrottle(given, filler), filler);
      const key = gpuKey(sample);
      let entry = this.gpus.get(key);
      if (!entry) {
        entry = {
          known: { key, index: sample.index, uuid: sample.uuid, name: sample.name, ...migOf(sample), latest: sample },
          history: new Ring(this.historyPerGpu),
          slices: new Map(),
          coarse: new Map(),
        };
        this.gpus.set(key, entry);
      }
      entry.known.latest = sample;
      entry.known.index = sample.index;
      entry.known.name = sample.name ?? entry.known.name;
      entry.history.push(sample);
      addSample(sliceAt(entry, sample.at), sample);
    }
  }

  /** Everything held, as plain data, for a checkpoint. */
  dump(this: CounterStore<HostSample>): CountersCheckpoint {
    return {
      gpus: [...this.gpus.values()].map((entry) => ({ known: entry.known, history: entry.history.toArray(), slices: [...entry.slices.entries()], coarse: [...entry.coarse.entries()] })),
      host: this.host.toArray(),
      apps: this.apps.toArray(),
      fillers: [...this.fillers],
    };
  }

  /** A store holding what `dump` gave. */
  static load(dump: CountersCheckpoint): CounterStore<HostSample> {
    const store = new CounterStore<HostSample>();
    for (const gpu of dump.gpus) {
      const entry: GpuEntry = { known: gpu.known, history: Ring.of(store.historyPerGpu, gpu.history), slices: new Map(gpu.slices), coarse: new Map(gpu.coarse) };
      while (entry.slices.size > SLICES_KEPT) fold(entry);
      store.gpus.set(gpu.known.key, entry);
    }
    for (const sample of dump.host) store.host.push(sample);
    for (const reading of dump.apps) store.apps.push(reading);
    for (const [uuid, filler] of dump.fillers) store.fillers.set(uuid, filler);
    return store;
  }

  /** Sums of one GPU's samples over [from, to], to the nearest slice. */
  gpuAggregate(key: string, from: number, to: number): GpuAggregate {
    const total = emptyAggregate();
    const entry = this.gpus.get(key);
    if (!entry) return total;
    const first = Math.floor(from / SLICE_MS);
    const last = Math.floor(to / SLICE_MS);
    for (const [slice, sums] of entry.slices) if (slice >= first && slice <= last) mergeAggregate(total, sums);
    const firstCoarse = Math.floor(from / COARSE_MS);
    const lastCoarse = Math.floor(to / COARSE_MS);
    for (const [slice, sums] of entry.coarse) if (slice >= firstCoarse && slice <= lastCoarse) mergeAggregate(total, sums);
    return total;
  }

  addHostSample(sample: Host): void {
    this.host.push(sample);
  }

  /** Copies: what a reader keeps (a frozen snapshot, say) never holds the store's own objects. */
  knownGpus(): KnownGpu[] {
    return [...this.gpus.values()].map((entry) => ({ ...entry.known })).sort((a, b) => a.index - b.index);
  }

  /** Samples of one GPU with `from <= at <= to`, oldest first. */
  gpuSamples(key: string, from: number, to: number): GpuSample[] {
    return this.gpus.get(key)?.history.between(from, to, sampleTime) ?? [];
  }

  hostSamples(from: number, to: number): Host[] {
    return this.host.between(from, to, sampleTime);
  }

  latestHost(): Host | null {
    return this.host.toArray().at(-1) ?? null;
  }
}

/** The sums of the 10 s slice holding `at`, made (folding the oldest away) where there is none yet. */
function sliceAt(entry: GpuEntry, at: number): GpuAggregate {
  const slice = Math.floor(at / SLICE_MS);
  let sums = entry.slices.get(slice);
  if (!sums) {
    sums = emptyAggregate();
    entry.slices.set(slice, sums);
    if (entry.slices.size > SLICES_KEPT) fold(entry);
  }
  return sums;
}

/** Moves the oldest 10 s slice into its 5 min slice, dropping 5 min slices older than a day. */
function fold(entry: GpuEntry): void {
  const [slice, sums] = entry.slices.entries().next().value!;
  entry.slices.delete(slice);
  const coarse = Math.floor((slice * SLICE_MS) / COARSE_MS);
  const into = entry.coarse.get(coarse);
  if (into) mergeAggregate(into, sums);
  else entry.coarse.set(coarse, sums);
  if (entry.coarse.size > COARSE_KEPT) entry.coarse.delete(entry.coarse.keys().next().value!);
}

type Identity = Pick<GpuSample, 'uuid' | 'index'> & Partial<Pick<GpuSample, 'parentUuid' | 'gpuInstanceId' | 'computeInstanceId'>>;

/**
 * What is really one device: its own UUID; else, for a MIG instance that DCGM names only by its
 * parent's UUID and instance ids, the parent and the ids (slices of one GPU must not merge); else
 * its index. Samples journaled before MIG fields existed lack them, hence `?? null`.
 */
export function gpuKey(sample: Identity): string {
  if (sample.uuid !== null) return sample.uuid;
  const device = sample.parentUuid ?? `index:${sample.index}`;
  const gi = sample.gpuInstanceId ?? null;
  if (gi === null) return device;
  const ci = sample.computeInstanceId ?? null;
  return `${device}/gi:${gi}${ci === null ? '' : `/ci:${ci}`}`;
}

function migOf(sample: Partial<GpuSample>): Pick<KnownGpu, 'parentUuid' | 'gpuInstanceId'> {
  return { parentUuid: sample.parentUuid ?? null, gpuInstanceId: sample.gpuInstanceId ?? null };
}

const sampleTime = (sample: { at: number }) => sample.at;
