import { Ring } from '../store/ring.js';
import { addSample, emptyAggregate, mergeAggregate, type GpuAggregate } from './gpu-aggregate.js';
import type { GpuSample } from './types.js';

/** GPU sums are kept per slice of this length, for a day, so any job's span can be summed. */
const SLICE_MS = 10_000;
const SLICES_KEPT = 8_640;

export interface KnownGpu {
  key: string;
  index: number;
  uuid: string | null;
  name: string | null;
  latest: GpuSample;
}

export interface CountersDump<Host> {
  gpus: Array<{ known: KnownGpu; history: GpuSample[]; slices: Array<[number, GpuAggregate]> }>;
  host: Host[];
}

/** Recent counter samples, by GPU and for the host, for matching against steps in time. */
export class CounterStore<Host extends { at: number } = { at: number }> {
  private readonly gpus = new Map<string, { known: KnownGpu; history: Ring<GpuSample>; slices: Map<number, GpuAggregate> }>();
  private readonly host: Ring<Host>;

  constructor(private readonly historyPerGpu = 1200, hostHistory = 600) {
    this.host = new Ring(hostHistory);
  }

  addGpuSamples(samples: readonly GpuSample[]): void {
    for (const sample of samples) {
      const key = gpuKey(sample);
      let entry = this.gpus.get(key);
      if (!entry) {
        entry = {
          known: { key, index: sample.index, uuid: sample.uuid, name: sample.name, latest: sample },
          history: new Ring(this.historyPerGpu),
          slices: new Map(),
        };
        this.gpus.set(key, entry);
      }
      entry.known.latest = sample;
      entry.known.index = sample.index;
      entry.known.name = sample.name ?? entry.known.name;
      entry.history.push(sample);
      const slice = Math.floor(sample.at / SLICE_MS);
      let sums = entry.slices.get(slice);
      if (!sums) {
        sums = emptyAggregate();
        entry.slices.set(slice, sums);
        if (entry.slices.size > SLICES_KEPT) entry.slices.delete(entry.slices.keys().next().value!);
      }
      addSample(sums, sample);
    }
  }

  /** Everything held, as plain data, for a checkpoint. */
  dump(): CountersDump<Host> {
    return {
      gpus: [...this.gpus.values()].map((entry) => ({ known: entry.known, history: entry.history.toArray(), slices: [...entry.slices.entries()] })),
      host: this.host.toArray(),
    };
  }

  static load<Host extends { at: number }>(dump: CountersDump<Host>): CounterStore<Host> {
    const store = new CounterStore<Host>();
    for (const gpu of dump.gpus) {
      store.gpus.set(gpu.known.key, { known: { ...gpu.known }, history: Ring.of(store.historyPerGpu, gpu.history), slices: new Map(gpu.slices.slice(-SLICES_KEPT)) });
    }
    for (const sample of dump.host) store.host.push(sample);
    return store;
  }

  /** Sums of one GPU's samples over [from, to], to the nearest slice. */
  gpuAggregate(key: string, from: number, to: number): GpuAggregate {
    const total = emptyAggregate();
    const slices = this.gpus.get(key)?.slices;
    if (!slices) return total;
    const first = Math.floor(from / SLICE_MS);
    const last = Math.floor(to / SLICE_MS);
    for (const [slice, sums] of slices) if (slice >= first && slice <= last) mergeAggregate(total, sums);
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

export function gpuKey(sample: Pick<GpuSample, 'uuid' | 'index'>): string {
  return sample.uuid ?? `index:${sample.index}`;
}

const sampleTime = (sample: { at: number }) => sample.at;
