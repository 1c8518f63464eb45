import { describe, expect, it } from 'vitest';
import { deviceHint, matchGpu } from '../src/analysis/gpu-match.js';
import type { KnownGpu } from '../src/counters/counter-store.js';
import { emptyGpuSample } from '../src/counters/types.js';

const gpu = (index: number, uuid: string | null): KnownGpu => ({ key: uuid ?? `index:${index}`, index, uuid, name: 'NVIDIA H100 80GB HBM3', latest: emptyGpuSample(0, index) });
const gpus = [
  gpu(0, 'GPU-1b2e6a1c-0000-4a8e-9c1e-000000000000'),
  gpu(1, 'GPU-7f3d9b20-1111-4c2d-8e6f-111111111111'),
  gpu(2, 'GPU-a0c4e8f2-2222-4b3a-9d7c-222222222222'),
  gpu(3, 'GPU-c9e1f3a4-3333-4e5f-8a9b-333333333333'),
];

describe('matchGpu', () => {
  it('matches by the UUID the hook reported, whatever the local rank', () => {
    const hint = deviceHint({ gpu_uuid: 'GPU-a0c4e8f2-2222-4b3a-9d7c-222222222222' }, 0);
    expect(matchGpu(hint, gpus)).toMatchObject({ gpu: { index: 2 }, by: 'uuid' });
  });

  it('accepts a UUID without the GPU- prefix and in another case', () => {
    const hint = deviceHint({ gpu_uuid: 'A0C4E8F2-2222-4B3A-9D7C-222222222222' }, 0);
    expect(matchGpu(hint, gpus)?.gpu.index).toBe(2);
  });

  it('falls back to the local rank (torchrun convention) without a UUID', () => {
    expect(matchGpu(deviceHint({}, 3), gpus)).toMatchObject({ gpu: { index: 3 }, by: 'local-rank' });
  });

  it('maps the logical device through CUDA_VISIBLE_DEVICES indices', () => {
    const hint = deviceHint({ cuda_visible_devices: '2,3', gpu_index: 1 }, 0);
    expect(matchGpu(hint, gpus)).toMatchObject({ gpu: { index: 3 }, by: 'cuda-visible-devices' });
  });

  it('maps through CUDA_VISIBLE_DEVICES UUID prefixes', () => {
    const hint = deviceHint({ cuda_visible_devices: 'GPU-c9e1f3a4,GPU-7f3d' }, 1);
    expect(matchGpu(hint, gpus)?.gpu.index).toBe(1);
  });

  it('does not guess when the visible-devices entry is missing or ambiguous', () => {
    expect(matchGpu(deviceHint({ cuda_visible_devices: '2' }, 1), gpus)).toBeNull();
    expect(matchGpu(deviceHint({ cuda_visible_devices: 'GPU-' }, 0), gpus)).toBeNull();
    expect(matchGpu(deviceHint({}, 7), gpus)).toBeNull();
  });
});
