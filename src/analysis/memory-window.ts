import type { MemoryAt } from '../store/job-records.js';
import { round } from '../model/round.js';
import type { MemoryWindow } from '../protocol/state.js';

/** The trend needs this much history: shorter, a warm-up or one big batch reads as a leak. */
const TREND_MIN_MS = 120_000;
const TREND_MIN_SAMPLES = 30;
/** How much of the samples' spread the line must explain to be called growth. */
const TREND_MIN_R2 = 0.5;

const increase = (first: number | null | undefined, last: number | null | undefined) =>
  first == null || last == null ? null : Math.max(0, last - first);

export function memoryWindow(samples: MemoryAt[], from: number, to: number): MemoryWindow | null {
  const upTo = samples.filter((s) => s.at <= to);
  const last = upTo.at(-1);
  if (!last) return null;
  // The last sample before the window is the baseline for the cumulative counters.
  const before = upTo.filter((s) => s.at < from).at(-1) ?? upTo[0]!;
  const fit = trend(upTo.filter((s) => s.at >= to - 600_000 && s.allocated_bytes !== null));
  const growth = fit?.slope ?? null;
  // A forecast only for steady growth: the ups and downs of each step are no trend.
  const steady = fit !== null && fit.slope > 0 && fit.r2 >= TREND_MIN_R2;
  const headroom = last.total_bytes !== null && last.peak_allocated_bytes !== null ? last.total_bytes - last.peak_allocated_bytes : null;
  return {
    device: last.device,
    allocated_bytes: last.allocated_bytes,
    reserved_bytes: last.reserved_bytes,
    peak_allocated_bytes: last.peak_allocated_bytes,
    total_bytes: last.total_bytes,
    reserved_frac: last.reserved_bytes !== null && last.total_bytes ? round(last.reserved_bytes / last.total_bytes, 4) : null,
    fragmentation: last.inactive_split_bytes !== null && last.reserved_bytes ? round(last.inactive_split_bytes / last.reserved_bytes, 4) : null,
    alloc_retries: before === last ? null : increase(before.alloc_retries, last.alloc_retries),
    ooms: before === last ? null : increase(before.ooms, last.ooms),
    growth_bytes_per_s: growth === null ? null : Math.round(growth),
    exhausted_in_s: steady && headroom !== null ? Math.max(0, Math.round(headroom / growth!)) : null,
  };
}

/** Least-squares line of allocated bytes over time: slope (bytes/s) and r², or null without enough history. */
function trend(samples: MemoryAt[]): { slope: number; r2: number } | null {
  if (samples.length < TREND_MIN_SAMPLES || samples.at(-1)!.at - samples[0]!.at < TREND_MIN_MS) return null;
  const t0 = samples[0]!.at;
  const xs = samples.map((s) => (s.at - t0) / 1000);
  const ys = samples.map((s) => s.allocated_bytes!);
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
    syy += (ys[i]! - my) ** 2;
  }
  if (sxx === 0) return null;
  return { slope: sxy / sxx, r2: syy === 0 ? 0 : (sxy * sxy) / (sxx * syy) };
}
