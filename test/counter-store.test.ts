import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CounterStore, gpuKey } from '../src/counters/counter-store.js';
import type { HostSample } from '../src/counters/host.js';
import { signalsOf, throttleUnchecked } from '../src/counters/coverage.js';
import { addSample, emptyAggregate } from '../src/counters/gpu-aggregate.js';
import { emptyGpuSample, type GpuSample } from '../src/counters/types.js';
import { ROOT } from './support/sidecar.js';
import { parseDcgmMetrics } from './support/counters.js';

const T0 = Date.parse('2026-12-01T00:00:00Z');
const sample = (at: number, util: number) => ({ ...emptyGpuSample(at, 0), uuid: 'GPU-0', utilGpu: util });
const dcgm = (name: string) => parseDcgmMetrics(readFileSync(path.join(ROOT, 'test/fixtures/dcgm', name), 'utf8'), {}, T0);

describe('CounterStore GPU sums', () => {
  it('sums a day-long job in bounded memory: 10 s slices for the last hour, 5 min slices before', () => {
    const store = new CounterStore<HostSample>();
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

describe('CounterStore GPU keys', () => {
  it('keys a device by its own UUID, a DCGM MIG instance by its parent and instance, and else by index', () => {
    expect(gpuKey({ ...emptyGpuSample(T0, 3), uuid: 'MIG-00000001-0000-0000-0000-000000000001', parentUuid: 'GPU-x', gpuInstanceId: 3 })).toBe('MIG-00000001-0000-0000-0000-000000000001');
    expect(gpuKey({ ...emptyGpuSample(T0, 0), parentUuid: 'GPU-x', gpuInstanceId: 1 })).toBe('GPU-x/gi:1');
    expect(gpuKey({ ...emptyGpuSample(T0, 0), parentUuid: 'GPU-x', gpuInstanceId: 1, computeInstanceId: 0 })).toBe('GPU-x/gi:1/ci:0');
    expect(gpuKey({ ...emptyGpuSample(T0, 2), gpuInstanceId: 4 })).toBe('index:2/gi:4');
    expect(gpuKey(emptyGpuSample(T0, 2))).toBe('index:2');
  });

  // A checkpoint of before them is refused whole by its schema (test/checkpoint.test.ts), not patched here.
  it('keys samples journaled before the MIG fields existed as before', () => {
    const { parentUuid: _p, gpuInstanceId: _g, computeInstanceId: _c, migProfile: _m, ...old } = sample(T0, 50);
    const store = new CounterStore();
    store.addGpuSamples([old as GpuSample]);
    expect(store.knownGpus()).toMatchObject([{ key: 'GPU-0', parentUuid: null, gpuInstanceId: null }]);
  });
});

describe('throttleUnchecked', () => {
  const unchecked = (samples: GpuSample[]) => {
    const agg = emptyAggregate();
    for (const s of samples) addSample(agg, s);
    return throttleUnchecked(agg);
  };

  it('says why a GPU under the default dcgm-exporter counters cannot be checked for throttling', () => {
    expect(unchecked(dcgm('3.x-default-counters.txt'))).toBe("the GPU counters carry neither clock-event (throttle) reasons nor the maximum SM clock (add them to the DCGM exporter's counters: deploy/kubernetes)");
  });

  it('checks a GPU whose exporter has the fields the shipped counters add', () => {
    expect(unchecked(dcgm('3.x-h100-pods.txt'))).toBeNull();
  });

  it('counts the clock against its maximum as checkable without the reasons, and reads samples as well as sums', () => {
    const samples = [{ ...emptyGpuSample(T0, 0), smClockMHz: 1100, smClockMaxMHz: 1980, powerW: 300 }];
    expect(throttleUnchecked(signalsOf(samples))).toBeNull();
    expect(throttleUnchecked(signalsOf([{ ...samples[0]!, smClockMaxMHz: null }]))).toMatch(/^the GPU counters carry neither/);
    expect(throttleUnchecked(signalsOf([]))).toBe('no GPU counters were read for this GPU');
  });
});

