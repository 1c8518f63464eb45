import type { GpuSample } from '../counters/types.js';
import type { World } from '../store/replay.js';
import type { StreamHistory } from './stream-frames.js';

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

function meanPerSlice(samples: GpuSample[], from: number, sliceMs: number, slices: number, pick: (s: GpuSample) => number | null): Array<number | null> {
  const total = new Array<number>(slices).fill(0);
  const count = new Array<number>(slices).fill(0);
  for (const sample of samples) {
    const value = pick(sample);
    const slice = Math.floor((sample.at - from) / sliceMs);
    if (value === null || !Number.isFinite(value) || slice < 0 || slice >= slices) continue;
    total[slice]! += value;
    count[slice]! += 1;
  }
  return total.map((sum, i) => (count[i] ? round(sum / count[i]!, 1) : null));
}

/**
 * What sparklines need over [from, to): each rank's mean step time and each GPU's utilization and
 * SM clock (percent of its maximum) per slice. Ranks with no step since `from` are left out.
 */
export function streamHistory(world: World, from: number, to: number, sliceMs: number): StreamHistory {
  const slices = Math.max(0, Math.ceil((to - from) / sliceMs));
  const ranks = world.jobs
    .rankViews()
    .filter((view) => (view.lastStepEndAt() ?? -Infinity) >= from)
    .map((view) => ({
      job: view.job,
      rank: view.rank,
      step_ms: view.buckets.series(from, to, sliceMs).map((sums) => (sums.steps ? round(sums.durNs / sums.steps / 1e6, 3) : null)),
    }));
  const gpus = world.counters.knownGpus().map((gpu) => {
    const samples = world.counters.gpuSamples(gpu.key, from, to);
    return {
      index: gpu.index,
      uuid: gpu.uuid,
      util: meanPerSlice(samples, from, sliceMs, slices, (s) => s.utilGpu),
      sm_clock_pct: meanPerSlice(samples, from, sliceMs, slices, (s) =>
        s.smClockMHz !== null && s.smClockMaxMHz ? (100 * s.smClockMHz) / s.smClockMaxMHz : null,
      ),
    };
  });
  return { from: new Date(from).toISOString(), slice_s: sliceMs / 1000, ranks, gpus };
}
