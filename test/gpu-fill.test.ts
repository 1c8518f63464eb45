import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { rankWindow } from '../src/analysis/window.js';
import { CounterStore, FILL_STALE_MS, gpuKey } from '../src/counters/counter-store.js';
import type { HostSample } from '../src/counters/host.js';
import { filledText } from '../src/counters/coverage.js';
import { describeAggregate } from '../src/counters/gpu-aggregate.js';
import { emptyGpuSample, ThrottleReason, type GpuSample } from '../src/counters/types.js';
import { StepBuckets } from '../src/store/step-buckets.js';
import { ROOT } from './support/sidecar.js';
import { parseDcgmMetrics } from './support/counters.js';

const dcgm = (name: string, at: number) => parseDcgmMetrics(readFileSync(path.join(ROOT, 'test/fixtures/dcgm', name), 'utf8'), {}, at);

/** What nvidia-smi (or the hooks' NVML) says of one physical GPU: held at 1100 of 1590 MHz by SwPowerCap. */
const capped = (uuid: string, at: number): GpuSample => ({
  ...emptyGpuSample(at, 0),
  uuid,
  smClockMHz: 1100,
  smClockMaxMHz: 1590,
  powerLimitW: 70,
  throttleReasons: ThrottleReason.SwPowerCap,
});

const windowOf = (samples: GpuSample[]) =>
  rankWindow({ from: 0, to: 10_000, steps: new StepBuckets().between(0, 10_000), stepMs: [], gpu: { samples, matchedBy: 'uuid' }, host: [], process: [], memory: [] });

describe('throttle signals the DCGM exporter lacks, filled from a second source', () => {
  // The default counters (dcgm-exporter's etc/default-counters.csv): no reasons, no max clock, no power limit.
  const T4 = 'GPU-0f6d2e91-b4a8-37c5-d019-6a2e8b4c7f13';

  it('are taken from the same GPU (by UUID) close in time, each marked with where it came from', () => {
    const store = new CounterStore();
    store.addFillSamples([capped(T4, 1_000)], 'nvidia-smi');
    store.addGpuSamples(dcgm('3.x-default-counters.txt', 2_000));
    const [sample] = store.gpuSamples(T4, 0, 10_000);
    expect(sample).toMatchObject({ throttleReasons: ThrottleReason.SwPowerCap, smClockMaxMHz: 1590, powerLimitW: 70, smClockMHz: 1590, filled: { reasons: 'nvidia-smi', 'max-sm-clock': 'nvidia-smi', 'power-limit': 'nvidia-smi' } });
    const window = windowOf(store.gpuSamples(T4, 0, 10_000)).gpu!;
    expect(window).toMatchObject({
      throttle_unchecked: null,
      throttle_share: { SwPowerCap: 1 },
      throttle_filled: "the clock-event (throttle) reasons, the maximum SM clock and the power limit from the sidecar's nvidia-smi",
    });
    // The DCGM clock against nvidia-smi's maximum: 1590 of 1590 here, the exporter's own clock is kept.
    expect(window.sm_clock_frac_min).toBe(1);
    expect(describeAggregate(store.gpuAggregate(T4, 0, 10_000)).throttle_share).toEqual({ SwPowerCap: 1 });
  });

  it('never overwrite what the GPU source has, and not from a reading too old', () => {
    const store = new CounterStore();
    store.addFillSamples([capped(T4, 0)], 'hook');
    store.addGpuSamples(dcgm('3.x-default-counters.txt', FILL_STALE_MS + 1));
    expect(store.gpuSamples(T4, 0, 2 * FILL_STALE_MS)[0]).toMatchObject({ throttleReasons: null, smClockMaxMHz: null });
    expect(windowOf(store.gpuSamples(T4, 0, 2 * FILL_STALE_MS)).gpu).toMatchObject({ throttle_filled: null, throttle_unchecked: expect.stringContaining('neither') });

    const own: GpuSample = { ...capped(T4, 100), throttleReasons: 0, smClockMaxMHz: 2000 };
    store.addFillSamples([capped(T4, 100)], 'hook');
    store.addGpuSamples([own]);
    expect(store.gpuSamples(T4, 50, 150)[0]).toMatchObject({ throttleReasons: 0, smClockMaxMHz: 2000 });
  });

  it("fill a MIG instance from its physical GPU's reading, and only the instances of that GPU", () => {
    // Two A100s in MIG mode under DCGM: GPU 0 holds instances 1 and 2, GPU 1 instance 1; the instances carry their parent's UUID.
    const store = new CounterStore();
    const throttledParent = 'GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb';
    store.addFillSamples([capped(throttledParent, 1_000), { ...capped('GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167', 1_000), throttleReasons: 0, smClockMHz: 1590 }], 'hook');
    const slices = dcgm('1.x-names-mig-a100.txt', 1_500);
    store.addGpuSamples(slices);
    const reasons = Object.fromEntries(store.knownGpus().map((gpu) => [gpu.key, windowOf(store.gpuSamples(gpu.key, 0, 10_000)).gpu!.throttle_share]));
    expect(reasons).toEqual({
      [gpuKey({ uuid: null, index: 0, parentUuid: 'GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167', gpuInstanceId: 1 })]: {},
      [gpuKey({ uuid: null, index: 0, parentUuid: 'GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167', gpuInstanceId: 2 })]: {},
      [gpuKey({ uuid: null, index: 1, parentUuid: throttledParent, gpuInstanceId: 1 })]: { SwPowerCap: 1 },
    });
  });

  it('survive a checkpoint: the fillers are part of the dump', () => {
    const store = new CounterStore<HostSample>();
    store.addFillSamples([capped(T4, 1_000)], 'nvidia-smi');
    const loaded = CounterStore.load(JSON.parse(JSON.stringify(store.dump())));
    loaded.addGpuSamples(dcgm('3.x-default-counters.txt', 2_000));
    expect(loaded.gpuSamples(T4, 0, 10_000)[0]!.throttleReasons).toBe(ThrottleReason.SwPowerCap);
  });

  it('are named by source in words', () => {
    expect(filledText([{ reasons: 'hook' }, { reasons: 'hook', 'power-limit': 'nvidia-smi' }])).toBe("the clock-event (throttle) reasons from the hooks' NVML readings; the power limit from the sidecar's nvidia-smi");
    expect(filledText([])).toBeNull();
  });
});

describe("profiling activities the GPU source lacks, filled from the hooks' NVML GPM readings", () => {
  const H100 = 'GPU-3f1c2b7e-9a41-4e0b-8d7a-5c6e2f9a1b30';
  /** What the hook's GpmReader sends of a Hopper GPU running an FP32 model (fractions, as the `counters` frame carries them). */
  const gpm = (at: number): GpuSample => ({ ...capped(H100, at), smActive: 0.935, smOccupancy: 0.412, tensorActive: 0.031, dramActive: 0.227 });
  /** nvidia-smi has no profiling fields. */
  const smi = (at: number): GpuSample => ({ ...capped(H100, at), utilGpu: 99 });

  it('fill the samples of the same GPU, close in time, and say where they came from', () => {
    const store = new CounterStore();
    store.addFillSamples([gpm(1_000)], 'hook');
    store.addGpuSamples([smi(1_500)]);
    const window = windowOf(store.gpuSamples(H100, 0, 10_000)).gpu!;
    expect(window).toMatchObject({ sm_active_mean: 0.935, sm_occupancy_mean: 0.412, tensor_active_mean: 0.031, dram_active_mean: 0.227 });
    expect(window.profiling_filled).toBe("SM, tensor-pipe and memory activity from the hooks' NVML GPM readings");
  });

  it("never over the source's own, from a stale reading, a reading without them, or into a MIG instance", () => {
    const store = new CounterStore();
    store.addFillSamples([gpm(0)], 'hook');
    store.addGpuSamples([smi(FILL_STALE_MS + 1)]);
    expect(windowOf(store.gpuSamples(H100, 0, 2 * FILL_STALE_MS)).gpu).toMatchObject({ sm_active_mean: null, profiling_filled: null });

    store.addFillSamples([gpm(20_000)], 'hook');
    store.addGpuSamples([{ ...smi(20_100), smActive: 0.5 }]);
    expect(store.gpuSamples(H100, 20_000, 21_000)[0]).toMatchObject({ smActive: 0.5, tensorActive: null });

    store.addFillSamples([capped(H100, 30_000)], 'hook'); // an NVML reading without GPM (before Hopper)
    store.addGpuSamples([smi(30_100)]);
    expect(store.gpuSamples(H100, 30_000, 31_000)[0]!.smActive).toBeNull();

    store.addFillSamples([gpm(40_000)], 'hook');
    store.addGpuSamples([{ ...smi(40_100), uuid: null, parentUuid: H100, gpuInstanceId: 1 }]);
    expect(store.gpuSamples(gpuKey({ uuid: null, index: 0, parentUuid: H100, gpuInstanceId: 1 }), 40_000, 41_000)[0]!.smActive).toBeNull();
  });
});
