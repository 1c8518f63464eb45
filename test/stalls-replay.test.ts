import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STALL } from '../src/analysis/stall.js';
import type { Engine } from '../src/engine/engine.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { replayJournal, type ReplayReport } from '../src/journal/replay.js';
import { expectStop, expectStopSummary, HANGS, type HangMeta } from './support/hangs.js';
import { recordings, unpackJournal } from './support/scenarios.js';

/**
 * The detection of a job that stops, proven on what real jobs did: the journals test/hang-e2e.test.ts
 * recorded from real DDP ranks on gloo and a real sidecar (test/fixtures/hangs; STEPSCOPE_RECORD=1 with
 * STEPSCOPE_TEST_FRAMEWORKS=1 records them again). Each is replayed tick by tick on its own clock:
 *  - the journal replays whole, and the summary is the one the live sidecar wrote;
 *  - nothing is stalled, hung or gone before the rank stopped (a healthy job: never);
 *  - once the rank's threshold passed, the job's verdict names what the live test saw named — the
 *    rank, the function, what the others wait in — within the threshold and the wait for its stack;
 *  - the summary leads with it, its timeline runs forward with the stop in it.
 * No wall clock: milliseconds a recording.
 */

const RECORDINGS = recordings<HangMeta>(HANGS);

/** Scenarios that must have a recording. */
const REQUIRED = [
  'two-ddp-ranks-rank-1-stuck-in-a-named-function',
  'two-ddp-ranks-rank-1-holding-the-gil',
  'four-ddp-ranks-rank-2-s-dataloader-worker-never-returns',
  'two-ddp-ranks-rank-1-killed-with-sigkill',
  'two-ddp-ranks-of-1-s-steps',
];

const asWritten = (value: unknown) => JSON.parse(JSON.stringify(value));

describe('recorded jobs that stop', () => {
  it('every scenario of test/hang-e2e.test.ts has a recording', () => {
    expect(RECORDINGS.map((r) => r.slug)).toEqual(expect.arrayContaining(REQUIRED));
  });
});

for (const recording of RECORDINGS) describe(`replaying ${recording.slug}`, () => {
  const { meta } = recording;
  const e = meta.expect;
  let dir: string;
  let replay: { engine: Engine; report: ReplayReport };
  const ticks: EngineSnapshot[] = [];
  beforeAll(async () => {
    dir = unpackJournal(recording);
    replay = await replayJournal(dir, {
      publishTicks: true,
      onEntry: (entry, engine) => {
        if (entry.t === 'tick' && engine.snapshot().at === entry.at) ticks.push(engine.snapshot());
      },
    });
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const jobAt = (snapshot: EngineSnapshot) => snapshot.jobs.find((j) => j.job === meta.job);

  it('reads and applies the whole journal, to the summary the live sidecar wrote', () => {
    expect({ problems: replay.report.problems, skipped: replay.report.skipped }).toEqual({ problems: 0, skipped: 0 });
    const ended = ticks.flatMap((t) => t.ended).find((run) => run.job === meta.job);
    expect(asWritten(ended?.summary)).toStrictEqual(recording.summary);
  });

  it('calls nothing stalled, hung or gone before the rank stopped', () => {
    const before = ticks.filter((t) => meta.stoppedAt === null || t.at < meta.stoppedAt);
    expect(before.length).toBeGreaterThan(8);
    const stopped = before.flatMap((t) => {
      const job = jobAt(t);
      if (!job) return [];
      const ranks = job.ranks.filter((r) => r.stall?.state === 'stalled' || r.stall?.state === 'gone').map((r) => `rank ${r.rank} ${r.stall!.state} at ${t.at}`);
      return job.stop ? [`job ${job.stop.verdict} at ${t.at}`, ...ranks] : ranks;
    });
    expect(stopped).toEqual([]);
  });

  if (e.verdict !== null) {
    it(`names, tick by tick, what the live test saw: ${e.verdict} (${e.cause}), rank ${e.culprits.join(', ')}${e.function ? ` in ${e.function}` : ''}`, () => {
      const first = ticks.find((t) => jobAt(t)?.verdict?.verdict === e.verdict && jobAt(t)?.verdict?.cause === e.cause);
      expect(first, 'the verdict was reached').toBeDefined();
      expectStop(asWritten(jobAt(first!)), e);
      // Within the culprit's threshold, the wait for the stacks and a tick of its last step.
      const job = jobAt(first!)!;
      const culprit = job.ranks.find((r) => r.rank === e.culprits[0])!;
      const lastStep = job.stop!.since;
      const bound = (culprit.stall?.stall_after_s ?? 0) * 1000 + (e.verdict === 'gone' ? STALL.goneMs : STALL.captureWaitMs) + 1000;
      expect(first!.at - lastStep, `shown ${first!.at - lastStep} ms after the stop`).toBeLessThanOrEqual(bound);
      // And it holds until the ranks are stopped by the test.
      const after = ticks.filter((t) => t.at >= first!.at && jobAt(t) && !jobAt(t)!.ended);
      const held = after.findIndex((t) => jobAt(t)!.stop === null);
      expect(held === -1 || after[held]!.at - first!.at > 3_000, 'held for a while').toBe(true);
    });
  } else {
    it('never calls a rank of slow steps stalled while they step', () => {
      const stalled = ticks.flatMap((t) => (jobAt(t)?.ranks ?? []).filter((r) => r.stall?.state === 'stalled' || r.verdict?.verdict === 'stalled').map((r) => `rank ${r.rank} at ${t.at}`));
      expect(stalled).toEqual([]);
      expect(ticks.some((t) => jobAt(t)?.ranks.some((r) => r.stall?.state === 'stepping'))).toBe(true);
    });
  }

  it('leads its summary with the stop, its timeline running forward with the stop in it', () => {
    expectStopSummary(recording.summary, e);
  });
});
