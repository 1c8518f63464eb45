import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CounterStore } from '../src/counters/counter-store.js';
import { anyMigEnabled, parseMigListing, parseMigQuery, withMigInstances, withQueryDetails } from '../src/counters/nvidia-smi-mig.js';
import { parseGpuLine } from '../src/counters/nvidia-smi-parse.js';
import { fieldsFromHeader } from './support/counters.js';
import { ThrottleReason } from '../src/counters/types.js';
import { ROOT } from './support/sidecar.js';

// Literal nvidia-smi output; test/fixtures/nvidia-smi/SOURCES.md says where each was captured.
const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'nvidia-smi');
const AT = 1_700_000_000_000;
const text = (name: string) => readFileSync(path.join(FIXTURES, name), 'utf8');

const H100 = 'GPU-00000000-0000-0000-0000-000000000000';

/** The MIG-enabled H100's --query-gpu row, as the collector reads it. */
function h100Row() {
  const [header, row] = text('h100-80gb-hbm3-mig_590.48.01_idle.csv').split('\n');
  const parsed = parseGpuLine(row!, fieldsFromHeader(header!), AT);
  if (!parsed.ok) throw new Error(parsed.problem);
  return parsed.sample;
}

describe('parseMigListing (nvidia-smi -L)', () => {
  it('lists the MIG devices of an H100 on driver 590, whose UUIDs no longer say their instance ids', () => {
    expect(parseMigListing(text('h100-80gb-hbm3-mig_590.48.01_list.txt'))).toEqual([
      { parentIndex: 0, parentUuid: H100, parentName: 'NVIDIA H100 80GB HBM3', device: 0, uuid: 'MIG-00000000-0000-0000-0000-000000000000', profile: '3g.40gb', gpuInstanceId: null, computeInstanceId: null, memTotalMiB: null },
      { parentIndex: 0, parentUuid: H100, parentName: 'NVIDIA H100 80GB HBM3', device: 1, uuid: 'MIG-00000001-0000-0000-0000-000000000001', profile: '2g.20gb', gpuInstanceId: null, computeInstanceId: null, memTotalMiB: null },
      { parentIndex: 0, parentUuid: H100, parentName: 'NVIDIA H100 80GB HBM3', device: 2, uuid: 'MIG-00000002-0000-0000-0000-000000000002', profile: '1g.10gb', gpuInstanceId: null, computeInstanceId: null, memTotalMiB: null },
      { parentIndex: 0, parentUuid: H100, parentName: 'NVIDIA H100 80GB HBM3', device: 3, uuid: 'MIG-00000003-0000-0000-0000-000000000003', profile: '1g.10gb', gpuInstanceId: null, computeInstanceId: null, memTotalMiB: null },
    ]);
  });

  it('reads the GPU and compute instance ids out of the pre-R470 UUIDs (MIG-GPU-<uuid>/<gi>/<ci>)', () => {
    const devices = parseMigListing(text('a100-sxm4-40gb_mig-legacy-uuid_list.txt'));
    expect(devices.map((d) => [d.device, d.profile, d.gpuInstanceId, d.computeInstanceId])).toEqual([
      [0, '1g.5gb', 7, 0],
      [1, '1g.5gb', 8, 0],
      [2, '1g.5gb', 9, 0],
      [3, '1g.5gb', 11, 0],
      [4, '1g.5gb', 12, 0],
      [5, '1g.5gb', 13, 0],
      [6, '1g.5gb', 14, 0],
    ]);
    expect(devices[2]!.uuid).toBe('MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/9/0');
  });

  it('finds no MIG device where there is none, or in what is not a listing', () => {
    expect(parseMigListing('GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2e6a1c-0000-4a8e-9c1e-000000000000)\n')).toEqual([]);
    expect(parseMigListing(text('driver-not-loaded.txt'))).toEqual([]);
  });
});

describe('parseMigQuery (nvidia-smi -q)', () => {
  it('reads each MIG device’s instance ids and memory, and the GPU they belong to', () => {
    expect(parseMigQuery(text('h100-80gb-hbm3-mig_590.48.01_query.txt'))).toEqual([
      { parentUuid: H100, device: 0, gpuInstanceId: 2, computeInstanceId: 0, memTotalMiB: 40448 },
      { parentUuid: H100, device: 1, gpuInstanceId: 3, computeInstanceId: 0, memTotalMiB: 20096 },
      { parentUuid: H100, device: 2, gpuInstanceId: 9, computeInstanceId: 0, memTotalMiB: 9984 },
      { parentUuid: H100, device: 3, gpuInstanceId: 10, computeInstanceId: 0, memTotalMiB: 9984 },
    ]);
  });
});

describe('withMigInstances', () => {
  const devices = withQueryDetails(parseMigListing(text('h100-80gb-hbm3-mig_590.48.01_list.txt')), parseMigQuery(text('h100-80gb-hbm3-mig_590.48.01_query.txt')));

  it('adds a device per MIG instance after its GPU, under the GPU’s clocks, power and reasons', () => {
    const round = withMigInstances([h100Row()], devices);
    expect(round.map((s) => [s.uuid, s.parentUuid, s.gpuInstanceId, s.computeInstanceId, s.name, s.memTotalMiB])).toEqual([
      [H100, null, null, null, 'NVIDIA H100 80GB HBM3', 81559],
      ['MIG-00000000-0000-0000-0000-000000000000', H100, 2, 0, 'NVIDIA H100 80GB HBM3 MIG 3g.40gb', 40448],
      ['MIG-00000001-0000-0000-0000-000000000001', H100, 3, 0, 'NVIDIA H100 80GB HBM3 MIG 2g.20gb', 20096],
      ['MIG-00000002-0000-0000-0000-000000000002', H100, 9, 0, 'NVIDIA H100 80GB HBM3 MIG 1g.10gb', 9984],
      ['MIG-00000003-0000-0000-0000-000000000003', H100, 10, 0, 'NVIDIA H100 80GB HBM3 MIG 1g.10gb', 9984],
    ]);
    for (const slice of round.slice(1)) {
      expect(slice).toMatchObject({ index: 0, smClockMHz: 345, powerW: 71.15, powerReading: 'average', tempC: 42, throttleReasons: ThrottleReason.GpuIdle, migProfile: expect.any(String) });
      // nvidia-smi has no per-instance utilization or memory in use: not the GPU's, not zero.
      expect([slice.utilGpu, slice.utilMem, slice.memUsedMiB]).toEqual([null, null, null]);
    }
  });

  it('gives every instance a key of its own in the counter store', () => {
    const store = new CounterStore();
    store.addGpuSamples(withMigInstances([h100Row()], devices));
    expect(store.knownGpus().map((gpu) => gpu.key)).toEqual([
      H100,
      'MIG-00000000-0000-0000-0000-000000000000',
      'MIG-00000001-0000-0000-0000-000000000001',
      'MIG-00000002-0000-0000-0000-000000000002',
      'MIG-00000003-0000-0000-0000-000000000003',
    ]);
  });

  it('leaves a round without MIG devices as it is', () => {
    const row = h100Row();
    expect(withMigInstances([row], [])).toEqual([row]);
  });
});

describe('anyMigEnabled', () => {
  it('reads mig.mode.current from the rows of a query', () => {
    const [header, ...rows] = text('h100-80gb-hbm3-mig_590.48.01_idle.csv').trim().split('\n');
    expect(anyMigEnabled(rows.join('\n'), fieldsFromHeader(header!))).toBe(true);
    const [plainHeader, ...plainRows] = text('h100-80gb-hbm3_590.48.01_load.csv').trim().split('\n');
    expect(anyMigEnabled(plainRows.join('\n'), fieldsFromHeader(plainHeader!))).toBe(false);
    expect(anyMigEnabled(rows.join('\n'), ['index'])).toBe(false);
  });
});
