import { Type, type Static } from '@sinclair/typebox';
import type { CounterStore, KnownGpu } from '../counters/counter-store.js';
import { Keys, Nullable } from '../protocol/schema.js';
import type { RankView } from '../store/rank-history.js';
import { emptySums, mergeSums, STEP_SUM_FIELDS, type StepSums } from '../store/step-buckets.js';
import { addGpuSample, describeGpuSlice, emptyGpuSlice, mergeGpuSlice, type GpuSlice } from './series-gpu.js';
import { sig3 } from './series-round.js';
import type { SummarySeries } from '../protocol/summary.js';

export { sig3 };

/**
 * A run's figures over its whole length, for the report's charts: steps and their phases per rank,
 * and the run's GPUs, in at most SERIES_MAX_SLICES slices of time. A slice starts at 1 s and doubles
 * (neighbours merged) whenever the run outgrows them, so a day-long run keeps ~ 4 min slices and the
 * series stays the same size. Pure: the engine's ticks feed it from the step buckets and GPU samples
 * it already keeps, so a replay of the journal builds the same series.
 */

export const SERIES_MAX_SLICES = 360;
export const SERIES_MAX_RANKS = 16;
const FIRST_SLICE_MS = 1000;
/** A step is counted once it ended this long ago: the hooks send steps in batches, a little late. */
export const SERIES_LAG_MS = 2000;

interface Slice {
  sums: StepSums;
  ranks: Map<number, { steps: number; durNs: number }>;
  gpus: Map<string, GpuSlice>;
}

/** A GPU of the run, as the series names it. */
export type SeriesGpu = Pick<KnownGpu, 'key' | 'index' | 'uuid' | 'name'>;


const emptySlice = (): Slice => ({ sums: emptySums(), ranks: new Map(), gpus: new Map() });

function mergeSlice(into: Slice, from: Slice): void {
  mergeSums(into.sums, from.sums);
  for (const [rank, r] of from.ranks) {
    const held = into.ranks.get(rank) ?? { steps: 0, durNs: 0 };
    into.ranks.set(rank, { steps: held.steps + r.steps, durNs: held.durNs + r.durNs });
  }
  for (const [key, g] of from.gpus) {
    const held = into.gpus.get(key) ?? emptyGpuSlice();
    mergeGpuSlice(held, g);
    into.gpus.set(key, held);
  }
}

function cloneSlice(slice: Slice): Slice {
  const copy = emptySlice();
  mergeSlice(copy, slice);
  return copy;
}


// The series in a checkpoint (docs/journal.md): a long run's early slices are no longer in the step
// buckets a restart would rebuild it from. Bounded as the series is: SERIES_MAX_SLICES slices, each
// with the job's ranks (--max-ranks) and GPUs.

const Float = Type.Number();
const SumSchema = Type.Object({ total: Float, n: Type.Integer({ minimum: 0 }) });
const GpuSliceSchema = Type.Object({
  util: SumSchema,
  clockPct: SumSchema,
  powerW: SumSchema,
  tempMaxC: Nullable(Float),
  memMaxMiB: Nullable(Float),
  reasonSamples: Type.Integer({ minimum: 0 }),
  harmful: Type.Integer({ minimum: 0 }),
});
export const SeriesDumpSchema = Type.Object({
  run: Type.Integer({ minimum: 1 }),
  sliceMs: Type.Integer({ minimum: FIRST_SLICE_MS }),
  first: Nullable(Type.Integer()),
  accountedTo: Float,
  startedAt: Float,
  gpus: Type.Array(Type.Object({ key: Type.String(), index: Type.Integer({ minimum: 0 }), uuid: Nullable(Type.String()), name: Nullable(Type.String()) })),
  slices: Type.Array(
    Type.Object({
      sums: Keys(STEP_SUM_FIELDS, Float),
      ranks: Type.Array(Type.Tuple([Type.Integer({ minimum: 0 }), Type.Integer({ minimum: 0 }), Float])),
      gpus: Type.Array(Type.Tuple([Type.String(), GpuSliceSchema])),
    }),
    { maxItems: SERIES_MAX_SLICES },
  ),
});
export type SeriesDump = Static<typeof SeriesDumpSchema>;


export class RunSeries {
  sliceMs = FIRST_SLICE_MS;
  /** Index (time / sliceMs) of slices[0]; null before the first slice. */
  private first: number | null = null;
  private slices: Slice[] = [];
  private readonly gpus = new Map<string, SeriesGpu>();

  /** The run's start: its first slice is only partly the run's. */
  private startedAt: number;

  constructor(
    readonly run: number,
    /** Counted up to here: steps that ended before it are in the series. */
    private accountedTo: number,
  ) {
    this.startedAt = accountedTo;
  }

  /**
   * Counts what ended in [accounted, upTo): each rank's steps (from its step buckets, which keep
   * the last minutes) and the samples of the run's GPUs. `final` counts the bucket slice `upTo` falls in too.
   */
  advance(upTo: number, views: readonly RankView[], gpus: readonly SeriesGpu[], counters: CounterStore<{ at: number }>, final = false): void {
    const quantum = views[0]?.buckets.sliceMs ?? 250;
    const kept = (views[0]?.buckets.slices ?? 0) * quantum;
    // Live, only whole bucket slices (more steps may still land in the newest); at the end, all.
    const end = (final ? Math.ceil(upTo / quantum) : Math.floor(upTo / quantum)) * quantum;
    // What the buckets no longer hold cannot be counted (a restart resumes a long run).
    let from = Math.max(this.accountedTo, end - kept + quantum);
    for (const gpu of gpus) this.gpus.set(gpu.key, { key: gpu.key, index: gpu.index, uuid: gpu.uuid, name: gpu.name });
    while (from < end) {
      const index = Math.floor(from / this.sliceMs);
      const to = Math.min(end, (index + 1) * this.sliceMs);
      const slice = this.sliceAt(index);
      for (const view of views) {
        const sums = view.buckets.between(from, to);
        if (sums.steps === 0) continue;
        mergeSums(slice.sums, sums);
        const held = slice.ranks.get(view.rank) ?? { steps: 0, durNs: 0 };
        slice.ranks.set(view.rank, { steps: held.steps + sums.steps, durNs: held.durNs + sums.durNs });
      }
      for (const gpu of gpus) {
        const samples = counters.gpuSamples(gpu.key, from, to).filter((s) => s.at < to);
        if (samples.length === 0) continue;
        const held = slice.gpus.get(gpu.key) ?? emptyGpuSlice();
        for (const sample of samples) addGpuSample(held, sample);
        slice.gpus.set(gpu.key, held);
      }
      from = to;
      this.fit();
    }
    this.accountedTo = Math.max(this.accountedTo, end);
  }

  /** Before its first slice, the run's start may still move earlier (steps a hook buffered arrive). */
  startNoLaterThan(at: number): void {
    if (this.first === null) {
      this.accountedTo = Math.min(this.accountedTo, at);
      this.startedAt = this.accountedTo;
    }
  }

  /** As plain data, for a checkpoint. */
  dump(): SeriesDump {
    return {
      run: this.run,
      sliceMs: this.sliceMs,
      first: this.first,
      accountedTo: this.accountedTo,
      startedAt: this.startedAt,
      gpus: [...this.gpus.values()].map(({ key, index, uuid, name }) => ({ key, index, uuid, name })),
      // A copy, as clone() makes it, so the checkpoint does not change under a later tick.
      slices: this.slices.map(cloneSlice).map((slice) => ({
        sums: slice.sums,
        ranks: [...slice.ranks].map(([rank, r]): [number, number, number] => [rank, r.steps, r.durNs]),
        gpus: [...slice.gpus],
      })),
    };
  }

  /** A series holding what `dump` gave (checked with the rest of its checkpoint, src/engine/checkpoint.ts). */
  static load(dump: SeriesDump): RunSeries {
    const series = new RunSeries(dump.run, dump.accountedTo);
    series.startedAt = dump.startedAt;
    series.sliceMs = dump.sliceMs;
    series.first = dump.first;
    series.slices = dump.slices.map((slice) => ({
      sums: { ...slice.sums },
      ranks: new Map(slice.ranks.map(([rank, steps, durNs]) => [rank, { steps, durNs }])),
      gpus: new Map(slice.gpus.map(([key, g]) => [key, { ...g, util: { ...g.util }, clockPct: { ...g.clockPct }, powerW: { ...g.powerW } }])),
    }));
    for (const gpu of dump.gpus) series.gpus.set(gpu.key, gpu);
    return series;
  }

  /** A copy, to count a run's last steps for a summary without moving this series on. */
  clone(): RunSeries {
    const copy = new RunSeries(this.run, this.accountedTo);
    copy.startedAt = this.startedAt;
    copy.sliceMs = this.sliceMs;
    copy.first = this.first;
    copy.slices = this.slices.map(cloneSlice);
    for (const [key, gpu] of this.gpus) copy.gpus.set(key, gpu);
    return copy;
  }

  /** The series up to `endAt`, its ranks picked as SummarySeries.ranks says. */
  describe(endAt: number, straggler: number | null): SummarySeries | null {
    if (this.first === null) return null;
    const last = Math.max(this.first, Math.floor((endAt - 1) / this.sliceMs));
    const slices = Array.from({ length: last - this.first + 1 }, (_, i) => this.slices[i] ?? emptySlice());
    const sliceS = this.sliceMs / 1000;
    const perStep = (pick: (s: StepSums) => number) => slices.map((s) => (s.sums.steps ? sig3(pick(s.sums) / s.sums.steps / 1e6) : null));
    const totals = new Map<number, { steps: number; durNs: number }>();
    for (const slice of slices) {
      for (const [rank, r] of slice.ranks) {
        const held = totals.get(rank) ?? { steps: 0, durNs: 0 };
        totals.set(rank, { steps: held.steps + r.steps, durNs: held.durNs + r.durNs });
      }
    }
    return {
      from: new Date(this.first * this.sliceMs).toISOString(),
      slice_s: sliceS,
      steps: slices.map((s) => s.sums.steps),
      step_ms: perStep((s) => s.durNs),
      phase_ms: { data: perStep((s) => s.dataNs), h2d: perStep((s) => s.h2dNs), compute: perStep((s) => s.computeNs), other: perStep((s) => s.otherNs) },
      // The first and last slices are only partly the run's: a rate over the part that was.
      samples_per_s: slices.map((s, i) => {
        const start = Math.max((this.first! + i) * this.sliceMs, this.startedAt);
        const seconds = (Math.min((this.first! + i + 1) * this.sliceMs, endAt) - start) / 1000;
        return s.sums.samplesSteps && seconds > 0 ? sig3(s.sums.samples / seconds) : null;
      }),
      ranks: pickRanks(totals, straggler).map((rank) => ({
        rank,
        step_ms: slices.map((s) => {
          const r = s.ranks.get(rank);
          return r && r.steps ? sig3(r.durNs / r.steps / 1e6) : null;
        }),
      })),
      ranks_total: totals.size,
      gpus: [...this.gpus.values()]
        .sort((a, b) => a.index - b.index || (a.uuid ?? '').localeCompare(b.uuid ?? ''))
        .map((gpu) => {
          const described = slices.map((s) => {
            const g = s.gpus.get(gpu.key);
            return g ? describeGpuSlice(g) : null;
          });
          const per = (pick: (g: ReturnType<typeof describeGpuSlice>) => number | null) => described.map((g) => (g ? pick(g) : null));
          return {
            index: gpu.index,
            uuid: gpu.uuid,
            name: gpu.name,
            util_pct: per((g) => g.util_pct),
            sm_clock_pct: per((g) => g.sm_clock_pct),
            power_w: per((g) => g.power_w),
            temp_c_max: per((g) => g.temp_c_max),
            mem_used_mib_max: per((g) => g.mem_used_mib_max),
            throttled: per((g) => g.throttled),
          };
        }),
    };
  }

  private sliceAt(index: number): Slice {
    if (this.first === null) this.first = index;
    if (index < this.first) {
      this.slices.unshift(...Array.from({ length: this.first - index }, emptySlice));
      this.first = index;
    }
    while (this.slices.length <= index - this.first) this.slices.push(emptySlice());
    return this.slices[index - this.first]!;
  }

  /** Doubles the slices until they fit, merging neighbours (slices stay aligned to their length). */
  private fit(): void {
    while (this.first !== null && this.slices.length > SERIES_MAX_SLICES) {
      const first = Math.floor(this.first / 2);
      const merged: Slice[] = [];
      this.slices.forEach((slice, i) => {
        const at = Math.floor((this.first! + i) / 2) - first;
        if (merged[at]) mergeSlice(merged[at]!, slice);
        else merged[at] = slice;
      });
      this.first = first;
      this.slices = Array.from({ length: merged.length }, (_, i) => merged[i] ?? emptySlice());
      this.sliceMs *= 2;
    }
  }
}

/** Every rank for a small job; for a big one the straggler, then the slowest and the fastest in turn. */
export function pickRanks(totals: Map<number, { steps: number; durNs: number }>, straggler: number | null): number[] {
  const ranks = [...totals.keys()];
  if (ranks.length <= SERIES_MAX_RANKS) return ranks.sort((a, b) => a - b);
  const mean = (rank: number) => totals.get(rank)!.durNs / Math.max(1, totals.get(rank)!.steps);
  const bySpeed = ranks.slice().sort((a, b) => mean(b) - mean(a) || a - b);
  const picked = new Set<number>(straggler !== null && totals.has(straggler) ? [straggler] : []);
  for (let i = 0; picked.size < SERIES_MAX_RANKS; i++) {
    picked.add(bySpeed[i]!);
    if (picked.size < SERIES_MAX_RANKS) picked.add(bySpeed[bySpeed.length - 1 - i]!);
  }
  return [...picked].sort((a, b) => a - b);
}
