import { describe, expect, it } from 'vitest';
import { deviceHint, matchGpu } from '../src/analysis/gpu-match.js';
import type { KnownGpu } from '../src/counters/counter-store.js';
import { emptyGpuSample } from '../src/counters/types.js';

const gpu = (index: number, uuid: string | null): KnownGpu => ({ key: uuid ?? `index:${index}`, index, uuid, name: 'NVIDIA H100 80GB HBM3', parentUuid: null, gpuInstanceId: null, latest: emptyGpuSample(0, index) });
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

describe('matchGpu on MIG instances', () => {
  const parent = 'GPU-00000000-0000-0000-0000-000000000000';
  const mig = (gi: number, uuid: string | null): KnownGpu => ({
    key: uuid ?? `${parent}/gi:${gi}`,
    index: 0,
    uuid,
    name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
    parentUuid: parent,
    gpuInstanceId: gi,
    latest: emptyGpuSample(0, 0),
  });
  // As nvidia-smi gives them (test/fixtures/nvidia-smi/h100-80gb-hbm3-mig_590.48.01_list.txt): masked
  // UUIDs, so the GPU and its first instance share everything after the prefix.
  const smi = [gpu(0, parent), mig(2, 'MIG-00000000-0000-0000-0000-000000000000'), mig(3, 'MIG-00000001-0000-0000-0000-000000000001'), mig(9, 'MIG-00000002-0000-0000-0000-000000000002')];

  it('matches CUDA_VISIBLE_DEVICES=MIG-… to that instance, not to its GPU', () => {
    expect(matchGpu(deviceHint({ cuda_visible_devices: 'MIG-00000002-0000-0000-0000-000000000002' }, 0), smi)).toMatchObject({ gpu: { gpuInstanceId: 9 }, by: 'cuda-visible-devices' });
    expect(matchGpu(deviceHint({ cuda_visible_devices: 'MIG-00000000-0000-0000-0000-000000000000' }, 0), smi)?.gpu.gpuInstanceId).toBe(2);
  });

  it('matches the UUID the hook reports, whichever prefix torch gave it', () => {
    expect(matchGpu(deviceHint({ gpu_uuid: 'MIG-00000001-0000-0000-0000-000000000001' }, 0), smi)).toMatchObject({ gpu: { gpuInstanceId: 3 }, by: 'uuid' });
    expect(matchGpu(deviceHint({ gpu_uuid: 'GPU-00000001-0000-0000-0000-000000000001' }, 0), smi)?.gpu.gpuInstanceId).toBe(3);
  });

  it('takes the whole GPU, not a guess between its slices, for a local rank without CUDA_VISIBLE_DEVICES', () => {
    expect(matchGpu(deviceHint({}, 0), smi)).toMatchObject({ gpu: { uuid: parent }, by: 'local-rank' });
  });

  // As DCGM gives them (test/fixtures/dcgm/2.x-mig-a30.txt): no instance UUID, the parent's and GPU_I_ID.
  const dcgm = [mig(1, null), mig(2, null)];

  it('matches a pre-R470 MIG-GPU-<uuid>/<gi>/<ci> entry by parent and instance', () => {
    expect(matchGpu(deviceHint({ cuda_visible_devices: `MIG-${parent}/2/0` }, 0), dcgm)?.gpu.gpuInstanceId).toBe(2);
  });

  it('matches by the parent and instance id the hook reports, where the source does not name instances', () => {
    expect(matchGpu(deviceHint({ gpu_parent_uuid: parent, gpu_instance_id: 1, gpu_uuid: 'MIG-9f3e1c20-aaaa-5b6c-8d7e-0123456789ab' }, 0), dcgm)).toMatchObject({ gpu: { gpuInstanceId: 1 }, by: 'uuid' });
  });

  it('takes the one MIG instance the exporter maps to the pod for a MIG-… entry, and does not guess among two', () => {
    const hint = deviceHint({ cuda_visible_devices: 'MIG-9f3e1c20-aaaa-5b6c-8d7e-0123456789ab' }, 0);
    expect(matchGpu(hint, [dcgm[1]!])).toMatchObject({ gpu: { gpuInstanceId: 2 }, by: 'cuda-visible-devices' });
    expect(matchGpu(hint, dcgm)).toBeNull();
    expect(matchGpu(deviceHint({}, 0), [dcgm[0]!])).toMatchObject({ gpu: { gpuInstanceId: 1 }, by: 'local-rank' });
  });
});
