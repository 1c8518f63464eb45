import type { StreamHistory } from '../../protocol/stream.js';

/** Values per slice from `from` (ms since the epoch) on, oldest first. */
export interface Series {
  from: number;
  values: Array<number | null>;
}

/** The sparkline figures a viewer holds for one sidecar, by rank and by GPU. */
export interface HistoryState {
  sliceMs: number;
  /** Slices kept per series: the length of the sidecar's snapshot history. */
  keep: number;
  /** Key: `job\u0000rank`. */
  stepMs: ReadonlyMap<string, Series>;
  /** Key: see gpuKey. */
  gpuUtil: ReadonlyMap<string, Series>;
  gpuClockPct: ReadonlyMap<string, Series>;
}

export const rankKey = (job: string, rank: number) => `${job}\u0000${rank}`;
/**
 * A GPU's series: by the sidecar's `key` where it sends one (it separates MIG instances that DCGM
 * names by their parent's UUID), else by UUID, else by index (sidecars before `key`).
 */
export const gpuKey = (gpu: { key?: string; uuid: string | null; index: number }) => gpu.key ?? legacyGpuKey(gpu);
export const legacyGpuKey = (gpu: { uuid: string | null; index: number }) => gpu.uuid ?? `index:${gpu.index}`;

/** The series of `gpu` in `series`: under its key, else where a sidecar that sends no key in its history put it. */
export function gpuSeries(series: ReadonlyMap<string, Series>, gpu: { key?: string; uuid: string | null; index: number }): Series | undefined {
  return series.get(gpuKey(gpu)) ?? series.get(legacyGpuKey(gpu));
}

/**
 * `incoming` written over `held` slice by slice (the newer figures win), keeping the last `keep`
 * slices. Only those are ever laid out: a series far older than the other (one from a snapshot of a
 * sidecar that had not ticked yet, dated 1970) costs no more than a recent one.
 */
export function mergeSeries(held: Series | undefined, incoming: Series, sliceMs: number, keep: number): Series {
  if (!held) return trim(incoming, sliceMs, keep);
  const end = Math.max(held.from + held.values.length * sliceMs, incoming.from + incoming.values.length * sliceMs);
  const from = Math.max(Math.min(held.from, incoming.from), end - keep * sliceMs);
  const slices = Math.round((end - from) / sliceMs);
  // A date the viewer could not read (NaN) lays out nothing, as before.
  const values = new Array<number | null>(Number.isFinite(slices) ? Math.max(0, slices) : 0).fill(null);
  const put = (series: Series) => {
    const offset = Math.round((series.from - from) / sliceMs);
    series.values.forEach((value, i) => {
      if (offset + i >= 0 && offset + i < values.length) values[offset + i] = value;
    });
  };
  put(held);
  put(incoming);
  return { from, values };
}

function trim(series: Series, sliceMs: number, keep: number): Series {
  const drop = Math.max(0, series.values.length - keep);
  return drop === 0 ? series : { from: series.from + drop * sliceMs, values: series.values.slice(drop) };
}

function entries(history: StreamHistory) {
  const from = Date.parse(history.from);
  return {
    stepMs: history.ranks.map((r) => [rankKey(r.job, r.rank), { from, values: r.step_ms }] as const),
    gpuUtil: history.gpus.map((g) => [gpuKey(g), { from, values: g.util }] as const),
    gpuClockPct: history.gpus.map((g) => [gpuKey(g), { from, values: g.sm_clock_pct }] as const),
  };
}

/**
 * The history of a snapshot, read at `at`: it replaces whatever was held. It keeps as many slices
 * as the snapshot spans, from `from` to `at`, whether or not it holds any series yet: a viewer
 * started before the first job (and with no GPU) must still keep every slice the job fills later.
 */
export function historyFromSnapshot(history: StreamHistory, at: number): HistoryState {
  const sliceMs = history.slice_s * 1000;
  const e = entries(history);
  const spanned = Number.isFinite(at) ? Math.ceil((at - Date.parse(history.from)) / sliceMs) : 0;
  const keep = Math.max(1, spanned, ...history.ranks.map((r) => r.step_ms.length), ...history.gpus.map((g) => g.util.length));
  return { sliceMs, keep, stepMs: new Map(e.stepMs), gpuUtil: new Map(e.gpuUtil), gpuClockPct: new Map(e.gpuClockPct) };
}

/** An update's few newest slices merged into the history held. */
export function mergeHistory(held: HistoryState, update: StreamHistory): HistoryState {
  const e = entries(update);
  const merge = (maps: ReadonlyMap<string, Series>, incoming: ReadonlyArray<readonly [string, Series]>) => {
    const next = new Map(maps);
    for (const [key, series] of incoming) next.set(key, mergeSeries(next.get(key), series, held.sliceMs, held.keep));
    return next;
  };
  return { ...held, stepMs: merge(held.stepMs, e.stepMs), gpuUtil: merge(held.gpuUtil, e.gpuUtil), gpuClockPct: merge(held.gpuClockPct, e.gpuClockPct) };
}

/** The values of `series` for the `count` slices starting at `from`, null where it has none. */
export function valuesBetween(series: Series | undefined, from: number, count: number, sliceMs: number): Array<number | null> {
  const out = new Array<number | null>(count).fill(null);
  if (!series) return out;
  const offset = Math.round((series.from - from) / sliceMs);
  series.values.forEach((value, i) => {
    const at = offset + i;
    if (at >= 0 && at < count) out[at] = value;
  });
  return out;
}
