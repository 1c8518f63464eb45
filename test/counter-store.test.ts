import { describe, expect, it } from 'vitest';
import { CounterStore } from '../src/counters/counter-store.js';
import { emptyGpuSample } from '../src/counters/types.js';

const T0 = Date.parse('2026-12-01T00:00:00Z');
const sample = (at: number, util: number) => ({ ...emptyGpuSample(at, 0), uuid: 'GPU-0', utilGpu: util });

describe('CounterStore GPU sums', () => {
  it('sums a day-long job in bounded memory: 10 s slices for the last hour, 5 min slices before', () => {
    const store = new CounterStore();
    // 30 hours at one sample every 5 s: busy 90% for the first 29 hours, 30% in the last one.
    for (let t = 0; t < 30 * 3600_000; t += 5_000) store.addGpuSamples([sample(T0 + t, t < 29 * 3600_000 ? 90 : 30)]);
    const dump = store.dump();
    expect(dump.gpus[0]!.slices.length).toBe(360);
    expect(dump.gpus[0]!.coarse!.length).toBe(288);
    // The last hour, exactly.
    const lastHour = store.gpuAggregate('GPU-0', T0 + 29 * 3600_000, T0 + 30 * 3600_000 - 1);
    expect(lastHour.samples).toBe(720);
    expect(lastHour.util.total / lastHour.util.n).toBe(30);
    // The day before it, to the nearest 5 minutes; what is older than a day is gone.
    const day = store.gpuAggregate('GPU-0', T0, T0 + 30 * 3600_000);
    expect(day.samples).toBe(25 * 720);
    // A checkpoint gives back the same sums.
    const restored = CounterStore.load(JSON.parse(JSON.stringify(dump)));
    expect(restored.gpuAggregate('GPU-0', T0, T0 + 30 * 3600_000)).toEqual(day);
  });
});
