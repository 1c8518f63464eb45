import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { emptyGpuSample, type GpuSample } from '../src/counters/types.js';
import type { JournalEntry } from '../src/engine/entries.js';
import type { Hello } from '../src/protocol/messages.js';
import { buildView, gpuLabel } from '../src/viewer/model/job-view.js';
import { gpuOfWindow } from '../src/viewer/model/rows.js';
import { applyFrame, initialSource } from '../src/viewer/model/source.js';
import { hello, run, T0 } from './support/entries.js';
import { ROOT } from './support/sidecar.js';
import { EngineStream } from './support/viewer-stream.js';
import { parseDcgmMetrics } from './support/counters.js';

/**
 * Which GPU row lists which ranks, where GPUs share an index: the MIG instances of one A100 as the
 * DCGM exporter names them (a literal capture: by the parent's UUID and index, and GPU_I_ID), read
 * by the sidecar's own parser and engine, the ranks' hooks naming their instance as NVML does.
 */

const PARENT_0 = 'GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167';
const PARENT_1 = 'GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb';
const CAPTURE = readFileSync(path.join(ROOT, 'test/fixtures/dcgm/1.x-names-mig-a100.txt'), 'utf8');

/** Three ranks, each on its own GPU (`env` says which, as its hook would), 10 s of steps, GPU samples each second. */
function gpuRowsOf(samplesAt: (at: number) => GpuSample[], envs: Array<Hello['env']>) {
  const stream = new EngineStream();
  const entries: JournalEntry[] = [];
  envs.forEach((env, rank) => {
    entries.push(hello(`s${rank}`, { rank, local_rank: rank, world_size: envs.length, env }), { t: 'connect', at: T0, session: `s${rank}` });
    entries.push(...run(`s${rank}`, 0, 10, { data: 2, compute: 8 }).entries.filter((e) => e.t === 'steps'));
  });
  for (let s = 0; s <= 10; s++) entries.push({ t: 'gpu', at: T0 + s * 1000, samples: samplesAt(T0 + s * 1000) }, { t: 'tick', at: T0 + s * 1000 + 1 });
  stream.apply(entries.sort((a, b) => a.at - b.at));
  const frame = stream.frame('snapshot', T0 + 10_500);
  const job = buildView([applyFrame(initialSource('ws://node-a/v1/stream'), frame, T0 + 10_500)], null, T0 + 10_500).job!;
  return { job, state: frame.type === 'snapshot' ? frame.state : null };
}

const rowsByLabel = (job: ReturnType<typeof gpuRowsOf>['job'], gpus: Array<{ index: number; gpu_instance_id: number | null }>) => job.gpus.map((g, i) => [gpuLabel(gpus[i]!), g.ranks]);

describe('ranks on GPU rows', () => {
  it('puts each rank on its own MIG instance where the state names the instance by UUID (DCGM with DRA labels)', () => {
    // The exporter run with DRA labels names each instance by its own MIG UUID.
    const migUuid = (parent: string, gi: string) => `MIG-${parent.slice(4, 12)}-0000-0000-0000-00000000000${gi}`;
    const labelled = CAPTURE.replace(/uuid="(GPU-[0-9a-f-]+)",(.*?)GPU_I_ID="(\d+)"/g, (_all, parent: string, between: string, gi: string) => `uuid="${parent}",${between}GPU_I_ID="${gi}",dra_mig_device_uuid="${migUuid(parent, gi)}"`);
    const { job, state } = gpuRowsOf((at) => parseDcgmMetrics(labelled, {}, at), [
      { gpu_uuid: migUuid(PARENT_0, '1') },
      { gpu_uuid: migUuid(PARENT_0, '2') },
      { gpu_uuid: migUuid(PARENT_1, '1') },
    ]);
    expect(state!.counters.gpus.map((g) => g.uuid)).toEqual([migUuid(PARENT_0, '1'), migUuid(PARENT_0, '2'), migUuid(PARENT_1, '1')]);
    expect(rowsByLabel(job, state!.counters.gpus)).toEqual([
      ['gpu 0 gi 1', [0]],
      ['gpu 0 gi 2', [1]],
      ['gpu 1 gi 1', [2]],
    ]);
  });

  it('puts each rank on its own slice by the window\'s key where DCGM gives the slices no UUID (no DRA labels)', () => {
    const { job, state } = gpuRowsOf((at) => parseDcgmMetrics(CAPTURE, {}, at), [
      { gpu_parent_uuid: PARENT_0, gpu_instance_id: 1 },
      { gpu_parent_uuid: PARENT_0, gpu_instance_id: 2 },
      { gpu_parent_uuid: PARENT_1, gpu_instance_id: 1 },
    ]);
    // By index and UUID ranks 0 and 1 read alike (these instances have no UUID of their own); the key tells them apart.
    const windows = state!.jobs[0]!.ranks.map((r) => r.window.gpu && { index: r.window.gpu.index, uuid: r.window.gpu.uuid, matched_by: r.window.gpu.matched_by });
    expect(windows).toEqual([
      { index: 0, uuid: null, matched_by: 'uuid' },
      { index: 0, uuid: null, matched_by: 'uuid' },
      { index: 1, uuid: null, matched_by: 'uuid' },
    ]);
    const keys = state!.jobs[0]!.ranks.map((r) => r.window.gpu?.key);
    expect(new Set(keys).size).toBe(3);
    expect(rowsByLabel(job, state!.counters.gpus)).toEqual([
      ['gpu 0 gi 1', [0]],
      ['gpu 0 gi 2', [1]],
      ['gpu 1 gi 1', [2]],
    ]);
  });

  it('from a sidecar that sends no key, puts a rank on no row rather than on every slice of its GPU', () => {
    const { state } = gpuRowsOf((at) => parseDcgmMetrics(CAPTURE, {}, at), [
      { gpu_parent_uuid: PARENT_0, gpu_instance_id: 1 },
      { gpu_parent_uuid: PARENT_0, gpu_instance_id: 2 },
      { gpu_parent_uuid: PARENT_1, gpu_instance_id: 1 },
    ]);
    const gpus = state!.counters.gpus;
    const placed = state!.jobs[0]!.ranks.map((r) => {
      const { key: _key, ...older } = r.window.gpu!;
      return gpuOfWindow(older, gpus)?.index ?? null;
    });
    // Ranks 0 and 1 on one of two slices of GPU 0: neither; rank 2 on the only GPU with index 1.
    expect(placed).toEqual([null, null, 1]);
  });

  it('falls back to the index where neither GPU nor window has a UUID', () => {
    const { job, state } = gpuRowsOf((at) => [0, 1].map((index) => ({ ...emptyGpuSample(at, index), name: 'NVIDIA A10', utilGpu: 90 })), [{}, {}]);
    expect(state!.counters.gpus.map((g) => g.uuid)).toEqual([null, null]);
    expect(job.gpus.map((g) => [g.index, g.ranks])).toEqual([
      [0, [0]],
      [1, [1]],
    ]);
  });
});
