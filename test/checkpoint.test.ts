import { readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CHECKPOINT_FORMAT, type Checkpoint } from '../src/engine/checkpoint.js';
import { Engine } from '../src/engine/engine.js';
import { REFERENCE_ENTRY_VERSION, type EngineConfig, type JournalEntry } from '../src/engine/entries.js';
import { checkpointName, encodeLine } from '../src/journal/wal-files.js';
import { replayJournal } from '../src/journal/replay.js';
import { emptyGpuSample } from '../src/model/gpu.js';
import type { Summary } from '../src/protocol/summary.js';
import { emptyHostSample } from './support/counters.js';
import { hello, run, T0 } from './support/entries.js';
import { feed, recorderOn } from './support/journaled.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * The checkpoint is one versioned document, checked whole against its schema before any of it is
 * used: it reads back as it was written; a checkpoint of another version, or one that does not hold
 * what this version writes, is refused with the reason, and the replay falls back to what the
 * journal's segments still hold.
 */

const tempDir = useTempDirs('stepscope-checkpoint-');

const config: EngineConfig = { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000, regressionThresholdPct: 10, regressionHoldMs: 5_000 };

function baseline(): Summary {
  const engine = new Engine();
  for (const entry of [{ t: 'start', at: T0, config } as const, hello('b0'), { t: 'connect', at: T0, session: 'b0' } as const, ...run('b0', 0, 10, { data: 2, compute: 8 }).entries]) engine.apply(entry);
  return engine.analyst.summary('train', T0 + 10_000, { series: false })!;
}

/** A job with every part of the state in use: the node, GPU and host samples, the compute apps, a pinned reference, a run that ends. */
function story(): JournalEntry[] {
  const steps = run('s0', 0, 30, { data: 12, compute: 8 }).entries;
  const counters: JournalEntry[] = Array.from({ length: 30 }, (_, s) => s * 1_000 + 500).flatMap((ms): JournalEntry[] => [
    { t: 'gpu', at: T0 + ms, samples: [{ ...emptyGpuSample(T0 + ms, 0), uuid: 'GPU-0', name: 'NVIDIA H100', utilGpu: 60, smClockMHz: 1_980, smClockMaxMHz: 1_980 }] },
    { t: 'host', at: T0 + ms, sample: { ...emptyHostSample(T0 + ms), cpuPct: 40 } },
    { t: 'apps', at: T0 + ms, apps: [{ gpuUuid: 'GPU-0', pid: 100, name: 'python', usedMiB: 2_048 }] },
  ]);
  return [
    { t: 'start', at: T0, config },
    { t: 'node', at: T0, node: { cpu_model: 'a CPU', cores_logical: 8, cores_physical: 4, memory_bytes: 64e9, gpu_models: [{ name: 'NVIDIA H100', count: 1 }], gpu_count: 1, driver_version: '550.54', cuda_version: '12.4' } },
    { t: 'source', at: T0, gpu: 'nvml', reason: 'NVML answered' },
    hello('s0'),
    { t: 'connect', at: T0, session: 's0' },
    { t: 'reference', at: T0, v: REFERENCE_ENTRY_VERSION, job: 'train', pinned: baseline(), past: [] },
    ...[...steps, ...counters].sort((a, b) => a.at - b.at),
    { t: 'end', at: T0 + 30_000, session: 's0', reason: 'close' },
    { t: 'tick', at: T0 + 30_250 },
  ];
}

const entries = story();
const half = entries.findIndex((e) => e.at >= T0 + 15_000);
const fed = (list: JournalEntry[], engine = new Engine()) => {
  for (const entry of list) engine.apply(entry);
  return engine;
};
const uninterrupted = fed(entries);
const endedSummary = () => uninterrupted.snapshot().ended[0]?.summary ?? null;
const checkpointAtHalf = (): Checkpoint => JSON.parse(JSON.stringify(fed(entries.slice(0, half)).toCheckpoint()));
type RankHeld = Checkpoint['jobs'][number]['ranks'][number];
/** The checkpoint with its one rank changed. */
const withRank = (c: Checkpoint, rank: (held: RankHeld) => Record<string, unknown>) => ({ ...c, jobs: [{ ...c.jobs[0]!, ranks: [{ ...c.jobs[0]!.ranks[0]!, ...rank(c.jobs[0]!.ranks[0]!) }] }] });

/** Writes `value` as checkpoint `number` in `dir`, in the journal's own line format. */
const writeCheckpoint = (dir: string, number: number, value: unknown) => writeFile(path.join(dir, checkpointName(number)), encodeLine(value));

describe('the checkpoint', () => {
  it('is of this version, and reads back as it was written: the same checkpoint, the same snapshot, and the run goes on the same', () => {
    const checkpoint = checkpointAtHalf();
    expect(checkpoint.format).toBe(CHECKPOINT_FORMAT);
    // Every part in use, so that the round trip is a round trip of each.
    expect(checkpoint.jobs[0]!.ranks[0]!.sessions).toHaveLength(1);
    expect(checkpoint.counters.gpus).toHaveLength(1);
    expect(checkpoint.counters.host.length).toBeGreaterThan(0);
    expect(checkpoint.counters.apps.length).toBeGreaterThan(0);
    expect(checkpoint.analyses[0]!.series).not.toBeNull();
    expect(checkpoint.runs.references).toHaveLength(1);
    expect(checkpoint.node).not.toBeNull();
    const restored = Engine.fromCheckpoint(checkpoint);
    expect(JSON.parse(JSON.stringify(restored.toCheckpoint()))).toEqual(checkpoint);
    // The stalls judged at the latest tick are not held (the next tick makes them again): compared after one.
    const tick: JournalEntry = { t: 'tick', at: entries[half - 1]!.at };
    expect(fed([tick], restored).snapshot()).toEqual(fed([...entries.slice(0, half), tick]).snapshot());
    expect(fed(entries.slice(half), Engine.fromCheckpoint(checkpoint)).snapshot().ended[0]!.summary).toEqual(endedSummary());
  });

  it.each([
    ['of the version before (v1)', (c: Checkpoint) => ({ ...c, format: 'stepscope.checkpoint/v1' }), /^checkpoint\.format: a checkpoint of stepscope\.checkpoint\/v1: this sidecar reads stepscope\.checkpoint\/v2 only$/],
    ['that is not one', () => [1, 2, 3], /^checkpoint\.format: not a checkpoint: this sidecar reads/],
    ['without a part', (c: Checkpoint) => ({ ...c, runs: undefined }), /^checkpoint\.runs: missing$/],
    [
      'with a field of the wrong type, deep in a part',
      (c: Checkpoint) => withRank(c, (held) => ({ sessions: [{ ...held.sessions[0]!, pid: 'x' }] })),
      /^checkpoint\.jobs\.0\.ranks\.0\.sessions\.0\.pid: must be integer \(got "x"\)$/,
    ],
    ['whose step buckets lack a sum (the rows of v1, before the evaluation sums)', (c: Checkpoint) => withRank(c, (held) => ({ buckets: held.buckets.map((row) => row.slice(0, -2)) })), /^checkpoint\.jobs\.0\.ranks\.0\.buckets\.0: must NOT have fewer than 20 items/],
    ['whose rank names a latest session it does not hold', (c: Checkpoint) => withRank(c, () => ({ latest: 'gone' })), /latest session gone is not among its sessions/],
  ])('is refused, with the reason, when it is %s', (_title, spoil, reason) => {
    expect(() => Engine.fromCheckpoint(JSON.parse(JSON.stringify(spoil(checkpointAtHalf()))))).toThrow(reason);
  });

  it('refused, is not used: the replay falls back to the segments, and where they are all kept it gives the state of a run that never stopped', async () => {
    const dir = tempDir();
    const clock = { now: T0 };
    const first = await recorderOn(dir, new Engine(), clock);
    await feed(first, clock, entries.slice(0, half));
    await first.close();
    // A checkpoint of the version before, standing for segment 1 (left behind: deleting it had failed).
    await writeCheckpoint(dir, 2, { ...checkpointAtHalf(), format: 'stepscope.checkpoint/v1' });
    const second = await recorderOn(dir, fed(entries.slice(0, half)), clock);
    await feed(second, clock, entries.slice(half));
    await second.close();
    expect((await readdir(dir)).sort()).toEqual([checkpointName(2), 'wal-00000001.log', 'wal-00000002.log']);

    const { engine, report } = await replayJournal(dir);
    expect(report).toMatchObject({ checkpoint: null, problems: 1, skipped: 0 });
    expect(report.examples).toEqual([{ file: checkpointName(2), offset: 0, reason: expect.stringMatching(/^checkpoint not usable: checkpoint\.format: a checkpoint of stepscope\.checkpoint\/v1/) }]);
    expect(engine.snapshot().ended.map((e) => e.summary)).toEqual([endedSummary()]);
    expect(engine.toCheckpoint()).toEqual(uninterrupted.toCheckpoint());
  });

  it('refused where the segments it stood for are gone: reported with them, and the replay holds what the segments after it do', async () => {
    const dir = tempDir();
    const clock = { now: T0 };
    const recorder = await recorderOn(dir, new Engine(), clock);
    await feed(recorder, clock, entries.slice(0, half));
    await recorder.checkpoint();
    await feed(recorder, clock, entries.slice(half));
    await recorder.close();
    const [written] = (await readdir(dir)).filter((name) => name.startsWith('checkpoint-'));
    // Damaged where no crc sees it: a line that reads, holding a checkpoint this version does not write.
    const spoiled = checkpointAtHalf();
    (spoiled.analyses[0]!.waste as { steady: unknown }).steady = 'lost';
    await writeCheckpoint(dir, Number(/\d+/.exec(written!)![0]), spoiled);

    const { engine, report } = await replayJournal(dir);
    expect(report.checkpoint).toBeNull();
    expect(report.examples.map((e) => e.reason)).toEqual([
      expect.stringMatching(/^checkpoint not usable: checkpoint\.analyses\.0\.waste\.steady: must be array/),
      expect.stringMatching(/^segment 1 is missing$/),
    ]);
    // What came before the checkpoint is lost: the steps after it are of a session the engine never heard of.
    expect(report.skipped).toBeGreaterThan(0);
    expect(engine.stats.skipped['unknown-session']).toBeGreaterThan(0);
    expect(engine.snapshot().jobs).toEqual([]);
  });
});
