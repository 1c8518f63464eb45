import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { EndedRun, EngineSnapshot } from '../src/engine/snapshot.js';
import { Ingest } from '../src/ingest/ingest.js';
import { Recorder } from '../src/journal/recorder.js';
import { replayJournal, type ReplayReport } from '../src/journal/replay.js';
import { createLogger } from '../src/log/log.js';
import { buildServer } from '../src/http-server.js';
import { expectScenario, recordings, unpackJournal, type Recording } from './support/scenarios.js';

/**
 * Every verdict, proven by replaying what a real job did: the journals that the end-to-end tests
 * (test/verdicts-e2e.test.ts, test/straggler-e2e.test.ts) recorded from a real sidecar fed by the
 * real hook (test/fixtures/journals, `npm run record:scenarios`). For each recording:
 *  - the journal replays whole: nothing unreadable, nothing the engine could not apply;
 *  - replayed = live: the summary of the run that ended is, field for field, the summary.json the
 *    live sidecar wrote;
 *  - the summary meets what the scenario's test expected of it (meta.json): the same checks;
 *  - replaying twice gives the same state (the engine is deterministic);
 *  - where the test watched the verdict as it went (how soon a change shows, warming-up before the
 *    first step), the same is checked tick by tick on the replay, on the recording's own clock.
 * No wall clock, no sleeps: a replay takes milliseconds.
 */

const RECORDINGS = recordings();

/** Scenarios that must have a recording (those that need PyTorch may not: it is not everywhere). */
const REQUIRED = [
  'compute-bound-a-healthy-loop',
  'input-bound-few-workers-data-loaded-in-the-training-process',
  'input-bound-contention-the-host-cpu-at-95-none-of-it-this-job-s',
  'input-bound-io-wait-the-host-30-in-iowait',
  'transfer-bound-slow-host-to-device-copies',
  'host-bound-outside-phases-logging-between-steps',
  'host-bound-evaluation-scope-phase-eval-in-each-step-little',
  'host-bound-gpu-idle-in-compute-compute-with-the-gpu-20-busy',
  'throttled-thermal-sm-clock-1100-of-1980-mhz-hwthermalslowdown',
  'throttled-power-sm-clock-1300-of-1980-mhz-swpowercap',
  'throttled-hw-slowdown-sm-clock-1300-of-1980-mhz-hwslowdown',
  'throttled-clocks-low-sm-clock-at-50-with-no-reason-98-busy',
  'input-bound-unknown-sleeping-loader-workers-with-the-host-cpu',
  'names-the-container-cpu-limit-when-a-loop-that-burns-cpu-for',
  'goes-from-compute-bound-to-input-bound-recommends-fixing-the',
  'is-summarized-by-the-verdict-that-held-longest-compute-bound',
  'is-warming-up-not-idle-while-its-first-step-takes-3-s',
  'compute-bound-with-a-known-flop-count-1e13-flops-a-step-under',
];

/** Golden /metrics output for these recordings (fixtures/journals/<slug>/metrics.prom). */
const GOLDEN = ['compute-bound-a-healthy-loop', 'goes-from-compute-bound-to-input-bound-recommends-fixing-the'];

/** As summary.json holds it: through JSON, as the sidecar wrote it. */
const asWritten = (value: unknown) => JSON.parse(JSON.stringify(value));

const withoutTime = ({ ms: _ms, ...report }: ReplayReport) => report;

function endedRun(snapshot: EngineSnapshot, recording: Recording): EndedRun {
  const runs = snapshot.ended.filter((run) => run.job === recording.meta.job);
  expect(runs.map((run) => run.run), 'exactly one run of the job ended').toEqual([1]);
  return runs[0]!;
}

/**
 * /metrics of a server built around a replayed engine, without prom-client's process_ and nodejs_
 * families (they describe the test process, not the job).
 */
async function metricsOf(engine: Engine): Promise<string> {
  const log = createLogger('silent');
  const at = () => engine.snapshot().at;
  const recorder = new Recorder(engine, null, { checkpointBytes: 1 << 20, checkpointMs: 60_000, samplesGiveUpShare: 0.75, now: at, log });
  const source = engine.snapshot().source ?? { gpu: 'none', reason: '' };
  const app = await buildServer({
    ingest: new Ingest(engine.world.jobs, recorder, { now: at, nvml: engine.world.hookGpu }),
    log,
    snapshot: () => engine.snapshot(),
    fresh: async () => engine.snapshot(),
    onSnapshot: () => () => undefined,
    journal: () => null,
    maxFrameBytes: 1 << 20,
    windowMs: engine.config.windowMs,
    sources: () => ({ gpu: { source: source.gpu, reason: source.reason, health: null }, host: null, collectors: [] }),
    now: at,
  });
  try {
    const response = await app.inject({ url: '/metrics' });
    expect(response.statusCode).toBe(200);
    return normaliseMetrics(response.body);
  } finally {
    await app.close();
  }
}

function normaliseMetrics(text: string): string {
  const processFamily = /^(?:# (?:HELP|TYPE) )?stepscope_(?:process|nodejs)_/;
  return (
    text
      .split('\n')
      .filter((line) => line.trim() !== '' && !processFamily.test(line))
      .join('\n') + '\n'
  );
}

describe('recorded verdict scenarios', () => {
  it('every verdict scenario of test/verdicts-e2e.test.ts has a recording (npm run record:scenarios)', () => {
    expect(RECORDINGS.map((r) => r.slug)).toEqual(expect.arrayContaining(REQUIRED));
  });
});

// One describe each, named in full (describe.for would shorten long names).
for (const recording of RECORDINGS) describe(`replaying ${recording.slug}`, () => {
  let dir: string;
  let first: { engine: Engine; report: ReplayReport };
  let second: { engine: Engine; report: ReplayReport };
  beforeAll(async () => {
    dir = unpackJournal(recording);
    first = await replayJournal(dir);
    second = await replayJournal(dir);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('reads and applies the whole journal', () => {
    expect(first.report.entries).toBeGreaterThan(0);
    expect({ problems: first.report.problems, skipped: first.report.skipped, examples: first.report.examples }).toEqual({ problems: 0, skipped: 0, examples: [] });
  });

  it('replayed = live: the summary is, field for field, the summary.json the live sidecar wrote', () => {
    const { summary } = endedRun(first.engine.snapshot(), recording);
    expect(asWritten(summary)).toStrictEqual(recording.summary);
  });

  it(`meets what its test expects: ${recording.meta.expect.verdict}${recording.meta.expect.cause ? `/${recording.meta.expect.cause}` : ''}`, () => {
    expectScenario(asWritten(endedRun(first.engine.snapshot(), recording).summary), recording.meta);
  });

  it('replays the same way twice', () => {
    expect(withoutTime(second.report)).toEqual(withoutTime(first.report));
    expect(second.engine.snapshot()).toEqual(first.engine.snapshot());
    expect(second.engine.toCheckpoint()).toEqual(first.engine.toCheckpoint());
  });

  const { change, warmingUpUntilFirstStep } = recording.meta.expect;
  // Only where the test watched the verdict live (the A10 case, the slow first step).
  if (change?.withinMs !== undefined || warmingUpUntilFirstStep) it('shows, tick by tick, what the test watched live', async () => {
    // Paced: every tick publishes its snapshot, as the live sidecar's did.
    const ticks: EngineSnapshot[] = [];
    const { report } = await replayJournal(dir, {
      publishTicks: true,
      onEntry: (entry, engine) => {
        if (entry.t === 'tick' && engine.snapshot().at === entry.at) ticks.push(engine.snapshot());
      },
    });
    expect(report.problems + report.skipped).toBe(0);
    const job = (snapshot: EngineSnapshot) => snapshot.jobs.find((j) => j.job === recording.meta.job);
    // Published tick by tick or at once, the run ends with the same summary.
    expect(asWritten(ticks.flatMap((t) => t.ended).find((run) => run.job === recording.meta.job)?.summary)).toStrictEqual(recording.summary);

    if (change?.withinMs !== undefined) {
      const shown = ticks.find((t) => t.at >= change.atMs && job(t)?.verdict?.verdict === change.to[0]);
      expect(shown, `${change.to[0]} shown at a tick after the change`).toBeDefined();
      expect(ticks.some((t) => t.at < change.atMs && job(t)?.verdict?.verdict === change.to[0]), `${change.to[0]} not shown before the change`).toBe(false);
      expect(shown!.at - change.atMs, `${change.to[0]} shown within ${change.withinMs} ms of the change`).toBeLessThanOrEqual(change.withinMs!);
    }
    if (warmingUpUntilFirstStep) {
      const beforeFirstStep = ticks.map(job).filter((j) => j && j.steps === 0);
      expect(beforeFirstStep.length, 'ticks between hello and the first step').toBeGreaterThanOrEqual(4);
      expect(beforeFirstStep.map((j) => j!.verdict?.verdict ?? null).filter((v) => v !== 'warming-up' && v !== null)).toEqual([]);
    }
  });

  if (GOLDEN.includes(recording.slug)) it('serves the same /metrics as ever (golden file)', async () => {
    const { engine } = await replayJournal(dir);
    const text = await metricsOf(engine);
    expect(await metricsOf((await replayJournal(dir)).engine)).toBe(text);
    await expect(text).toMatchFileSnapshot(`./fixtures/journals/${recording.slug}/metrics.prom`);
  });
});
