import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { withNode } from '../src/analysis/summary.js';
import { readInventory } from '../src/counters/inventory.js';
import { coresPerGpu, inventoryOf, parseDriverBanner } from '../src/counters/inventory-parse.js';
import type { NodeInventory } from '../src/protocol/state.js';
import { Engine } from '../src/engine/engine.js';
import { parseEntry, type JournalEntry } from '../src/engine/entries.js';
import { emptyGpuSample } from '../src/counters/types.js';
import { parseInput } from '../src/protocol/parse.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { renderSummary } from '../src/outputs/summary-render.js';
import { environment } from '../src/outputs/report-html-tables.js';
import { hello, run, T0 } from './support/entries.js';
import { capturedLogger } from './support/logger.js';
import { ROOT } from './support/sidecar.js';

// Literal nvidia-smi output (test/fixtures/nvidia-smi/SOURCES.md).
const smi = (name: string) => readFileSync(path.join(ROOT, 'test/fixtures/nvidia-smi', name), 'utf8');
const XEON = { manufacturer: 'Intel', brand: 'Xeon® Platinum 8480+', cores: 224, physicalCores: 112 };

const H100_NODE: NodeInventory = {
  cpu_model: 'Intel Xeon® Platinum 8480+',
  cores_logical: 224,
  cores_physical: 112,
  memory_bytes: 2 * 1024 ** 4,
  gpu_models: [{ name: 'NVIDIA H100 80GB HBM3', count: 1 }],
  gpu_count: 1,
  driver_version: '590.48.01',
  cuda_version: '13.1',
};

describe('the node inventory, parsed', () => {
  it("takes the driver and CUDA versions from nvidia-smi's table banner, and from -q", () => {
    expect(parseDriverBanner(smi('h100-80gb-hbm3_590.48.01_table_idle.txt'))).toEqual({ driver: '590.48.01', cuda: '13.1' });
    expect(parseDriverBanner(smi('h100-80gb-hbm3-mig_590.48.01_query.txt'))).toEqual({ driver: '590.48.01', cuda: '13.1' });
    expect(parseDriverBanner(smi('driver-not-loaded.txt'))).toEqual({ driver: null, cuda: null });
  });

  it('counts GPU models from nvidia-smi -L, not their MIG devices', () => {
    const node = inventoryOf(XEON, 2 * 1024 ** 4, { listing: smi('h100-80gb-hbm3_590.48.01_list.txt'), banner: smi('h100-80gb-hbm3_590.48.01_table_idle.txt') });
    expect(node).toEqual(H100_NODE);
    expect(inventoryOf(XEON, null, { listing: smi('a100-sxm4-40gb_mig-legacy-uuid_list.txt'), banner: null })).toMatchObject({ gpu_models: [{ name: 'A100-SXM4-40GB', count: 1 }], gpu_count: 1 });
  });

  it('leaves null what could not be read: no nvidia-smi, no CPU facts, never a made-up zero', () => {
    expect(inventoryOf(null, null, { listing: null, banner: null })).toEqual({
      cpu_model: null, cores_logical: null, cores_physical: null, memory_bytes: null, gpu_models: null, gpu_count: null, driver_version: null, cuda_version: null,
    });
    expect(inventoryOf({ manufacturer: '', brand: '', cores: 0, physicalCores: 0 }, 0, { listing: '', banner: '' })).toMatchObject({ cpu_model: null, cores_logical: null, memory_bytes: null, gpu_models: [], gpu_count: 0 });
  });

  it('gives cores per GPU only where both are known', () => {
    expect(coresPerGpu({ cores_logical: 128 }, 8)).toBe(16);
    expect(coresPerGpu({ cores_logical: 10 }, 3)).toBe(3.33);
    expect(coresPerGpu({ cores_logical: null }, 8)).toBeNull();
    expect(coresPerGpu({ cores_logical: 8 }, 0)).toBeNull();
    expect(coresPerGpu({ cores_logical: 8 }, null)).toBeNull();
  });

  it('reads this machine through systeminformation, and nothing of GPUs without nvidia-smi', async () => {
    const node = await readInventory({ nvidiaSmi: path.join(ROOT, 'no-such-nvidia-smi'), log: capturedLogger().log });
    expect(node.cores_logical).toBeGreaterThanOrEqual(1);
    expect(node.memory_bytes).toBeGreaterThan(0);
    expect(node).toMatchObject({ gpu_models: null, gpu_count: null, driver_version: null, cuda_version: null });
  });
});

describe('the node inventory in the journal, the state and the summary', () => {
  const config = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000 };
  const gpu = (at: number): JournalEntry => ({ t: 'gpu', at: T0 + at, samples: [{ ...emptyGpuSample(T0 + at, 0), uuid: 'GPU-00000000-0000-0000-0000-000000000000', utilGpu: 97 }] });
  const job = (node: NodeInventory | null): JournalEntry[] => [
    { t: 'start', at: T0, config },
    ...(node ? [{ t: 'node' as const, at: T0, node }] : []),
    hello('s1'),
    { t: 'connect', at: T0, session: 's1' },
    gpu(500),
    ...run('s1', 0, 3, { compute: 10 }).entries,
    gpu(2_500),
    { t: 'end', at: T0 + 3_000, session: 's1', reason: 'done' },
    { t: 'stop', at: T0 + 3_100 },
  ];
  const summaryOf = (entries: JournalEntry[]) => {
    const engine = new Engine();
    let ended = null;
    for (const entry of entries) ended = engine.apply(entry)?.ended[0] ?? ended;
    return { engine, summary: ended!.summary };
  };

  it('is journaled, so the summary names the node, with cores per GPU over the GPUs the job ran on', () => {
    expect(parseEntry(JSON.parse(JSON.stringify({ t: 'node', at: T0, node: H100_NODE })))).toMatchObject({ t: 'node' });
    const { engine, summary } = summaryOf(job(H100_NODE));
    expect(engine.snapshot().node).toEqual(H100_NODE);
    // The job's one rank ran on the node's one GPU.
    expect(summary.gpus).toHaveLength(1);
    expect(summary.node).toEqual({ ...H100_NODE, cores_per_gpu: 224 });
    // No GPU matched to the job: cores per GPU is not known.
    expect(withNode({ ...summary, gpus: [] }, H100_NODE).node!.cores_per_gpu).toBeNull();
    expect(parseInput(SummarySchema, JSON.parse(JSON.stringify(summary)), 'summary')).toMatchObject({ node: { cores_logical: 224 } });
  });

  it('is one line of the text, Markdown and HTML summaries', () => {
    const { summary } = summaryOf(job(H100_NODE));
    const line = 'Node: Intel Xeon® Platinum 8480+, 224 cores (112 physical), 2048 GiB, 1 × NVIDIA H100 80GB HBM3, driver 590.48.01, CUDA 13.1; 224 cores per GPU.';
    expect(renderSummary(summary, 'text')).toContain(line);
    expect(renderSummary(summary, 'md')).toContain(line);
    expect(environment(summary)).toContain('Node: Intel Xeon® Platinum 8480+, 224 cores');
    expect(renderSummary(summaryOf(job(null)).summary, 'text')).not.toContain('Node:');
  });

  it('is left out of summaries of recordings before it, which still read', () => {
    const { summary } = summaryOf(job(null));
    expect(summary).not.toHaveProperty('node');
    expect(() => parseInput(SummarySchema, JSON.parse(JSON.stringify(summary)), 'summary')).not.toThrow();
  });

  it('survives a checkpoint', () => {
    const engine = new Engine();
    for (const entry of job(H100_NODE).slice(0, 4)) engine.apply(entry);
    expect(Engine.fromCheckpoint(JSON.parse(JSON.stringify(engine.toCheckpoint()))).snapshot().node).toEqual(H100_NODE);
  });
});
