import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { expect } from 'vitest';
import type { HostLoad } from './fake-proc.js';
import { ROOT, tempDir } from './sidecar.js';

/**
 * Verdict scenarios: what the end-to-end tests (test/verdicts-e2e.test.ts, test/straggler-e2e.test.ts)
 * expect of a job's summary, and their recordings. With STEPSCOPE_RECORD set, each of those tests
 * copies its sidecar's journal (segments gzipped) and summary.json into
 * test/fixtures/journals/<slug>/, with a meta.json holding what the test expected; then
 * test/verdicts-replay.test.ts replays each recording and checks the same expectations, in
 * milliseconds and without a clock. `npm run record:scenarios` records them all again; a recording
 * replaces its folder whole, golden metrics.prom included, which the next local run of
 * test/verdicts-replay.test.ts writes again (look at its diff before committing it).
 */

export const JOURNALS = path.join(ROOT, 'test', 'fixtures', 'journals');
/** Set: the end-to-end tests record what they ran (and all of them run). */
export const RECORDING = !!process.env.STEPSCOPE_RECORD;
/** Every end-to-end verdict test, not only the smoke tests that `npm test` runs by default. */
export const ALL_E2E = RECORDING || process.env.STEPSCOPE_E2E === 'all';

export type Phases = { data?: number; h2d?: number; compute?: number; other?: number };
export type Shares = { data: number; h2d: number; compute: number; other: number };
export type Segment = { start_s: number; end_s: number; verdict: string; cause: string | null };
const PHASES = ['data', 'h2d', 'compute', 'other'] as const;

export const ACTIVE = (verdict: string) => verdict !== 'warming-up' && verdict !== 'idle';

export const phaseArgs = (phases: Phases, prefix = '') => Object.entries(phases).flatMap(([phase, ms]) => [`--${prefix}${phase}-ms`, String(ms)]);

/** The shares of step time the script implies. */
export function scriptedShares(phases: Phases): Shares {
  const total = (phases.data ?? 0) + (phases.h2d ?? 0) + (phases.compute ?? 0) + (phases.other ?? 0);
  return { data: (phases.data ?? 0) / total, h2d: (phases.h2d ?? 0) / total, compute: (phases.compute ?? 0) / total, other: (phases.other ?? 0) / total };
}

/**
 * The timeline is what the script implies: nothing but warming-up ahead of the first real verdict,
 * then exactly `expected`, in order, and nothing else. (A leading "idle" is let through here: the
 * sidecar calls a rank with no step yet idle, which the slow-first-step scenario pins down.)
 */
export function expectTimeline(summary: any, expected: Array<[string, string | null]>) {
  const timeline: Segment[] = summary.timeline;
  const shown = JSON.stringify(timeline);
  const first = timeline.findIndex((segment) => ACTIVE(segment.verdict));
  expect(first, shown).toBeGreaterThanOrEqual(0);
  expect(first, `at most idle then warming-up before the first verdict: ${shown}`).toBeLessThanOrEqual(2);
  expect(timeline.slice(0, first).every((segment) => segment.verdict === 'warming-up' || segment.verdict === 'idle'), shown).toBe(true);
  expect(timeline.slice(first).map((segment) => [segment.verdict, segment.cause]), shown).toEqual(expected);
  for (let i = 1; i < timeline.length; i++) expect(timeline[i]!.start_s, shown).toBe(timeline[i - 1]!.end_s);
}

/** The summary's breakdown matches the loop's own measurement closely, and the script's loosely. */
export function expectBreakdown(summary: any, measured: Shares, scripted?: Shares, phases: ReadonlyArray<keyof Shares> = PHASES) {
  for (const phase of phases) {
    expect(Math.abs(summary.breakdown[phase] - measured[phase]), `${phase}: summary ${summary.breakdown[phase]}, loop measured ${measured[phase]}`).toBeLessThanOrEqual(0.02);
    if (scripted) expect(Math.abs(summary.breakdown[phase] - scripted[phase]), `${phase}: summary ${summary.breakdown[phase]}, scripted ${scripted[phase].toFixed(3)}`).toBeLessThanOrEqual(0.08);
  }
}

/** What a scenario's test expects of the summary; every key but verdict, cause and timeline is optional. */
export interface ScenarioExpectations {
  verdict: string;
  cause: string | null;
  /** The timeline after warming up (see expectTimeline). */
  timeline: Array<[string, string | null]>;
  /** The whole timeline's verdicts, warming-up included, where the test pins that down. */
  timelineVerdicts?: string[];
  /** The recommendation that must come first. */
  firstRecommendation?: string;
  /** Recommendations that must be there, anywhere… */
  recommendations?: string[];
  /** …and among the first three. */
  topRecommendations?: string[];
  /** Exactly this share, or strictly between [min, max]. */
  verdictShare?: number | [number, number];
  headlineMatches?: string;
  /** null: no straggler; else who and why. */
  straggler?: { rank: number; reason: string } | null;
  ranks?: Array<Record<string, unknown>>;
  gpus?: Array<Record<string, unknown>>;
  /** GPU 0's mean utilization strictly between [min, max]. */
  gpuUtilMean?: [number, number];
  /** The breakdown within 0.02 of what the loop measured and within 0.08 of the script (in `phases`, default all). */
  breakdown?: { measured: Shares; scripted?: Shares; phases?: Array<keyof Shares> };
  /** Shares of the breakdown that must be exceeded, e.g. { data: 0.6 }. */
  breakdownAbove?: Partial<Shares>;
  loader?: Record<string, unknown>;
  evidenceRuleContains?: string;
  /** Evidence figures that must be exceeded. */
  evidenceAbove?: Record<string, number>;
  /**
   * The job's behaviour changed at `atMs` (epoch ms, as the loop measured it): the `to` verdict
   * begins after it, and (checked on the replay's ticks) is shown within `withinMs`.
   */
  change?: { atMs: number; to: [string, string | null]; withinMs?: number };
  /** Until the first step ended, every verdict shown (at each tick) was warming-up. */
  warmingUpUntilFirstStep?: boolean;
  /** Exactly these limiters, with these levels, listed beside the summary's verdict (over the job). */
  limiters?: Array<{ limiter: string; level: string }>;
  /** These causes among the summary's, each with an estimate, ranked by what fixing each buys. */
  causesRanked?: string[];
}

export interface ScenarioMeta {
  format: 'stepscope.scenario/v1';
  /** The test's title, and the file and describe block it is in. */
  title: string;
  suite: string;
  test: string;
  job: string;
  worldSize: number;
  /** Steps the loop made, in all ranks. */
  steps: number;
  /** What was scripted: the loop's arguments, the phases, the stand-ins' scenarios; and where measured, the truth (the share of time the ablated cost took). */
  script: { loop: string[]; phases?: Phases; thenPhases?: Phases; host?: HostLoad | null; gpu?: object | null; truth?: { lost: number } };
  expect: ScenarioExpectations;
  recordedAt: string;
}

/** The test's title as a folder name: lower case, [a-z0-9-], at most 64 characters. */
export function slugOf(title: string): string {
  let slug = title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  if (slug.length > 64) slug = slug.slice(0, 64).replace(/-[^-]*$/, '');
  return slug;
}

/** The summary meets what the scenario expects: the same checks, live in the e2e test and on the replay. */
export function expectScenario(summary: any, meta: Pick<ScenarioMeta, 'job' | 'worldSize' | 'steps' | 'expect'>) {
  const e = meta.expect;
  expect(summary).toMatchObject({ schema: 'stepscope.summary/v1', job: meta.job, world_size: meta.worldSize, steps: meta.steps });
  expect([summary.verdict, summary.cause], summary.headline).toEqual([e.verdict, e.cause]);
  expectTimeline(summary, e.timeline);
  if (e.timelineVerdicts) expect(summary.timeline.map((s: Segment) => s.verdict)).toEqual(e.timelineVerdicts);
  const ids: string[] = summary.recommendations.map((r: any) => r.id);
  if (e.firstRecommendation !== undefined) expect(ids[0], JSON.stringify(ids)).toBe(e.firstRecommendation);
  for (const id of e.recommendations ?? []) expect(ids, JSON.stringify(ids)).toContain(id);
  if (e.topRecommendations) expect(ids.slice(0, 3), JSON.stringify(ids)).toEqual(expect.arrayContaining(e.topRecommendations));
  if (typeof e.verdictShare === 'number') expect(summary.verdict_share).toBe(e.verdictShare);
  else if (e.verdictShare) {
    expect(summary.verdict_share).toBeGreaterThan(e.verdictShare[0]);
    expect(summary.verdict_share).toBeLessThan(e.verdictShare[1]);
  }
  if (e.headlineMatches) expect(summary.headline).toMatch(new RegExp(e.headlineMatches));
  if (e.straggler === null) expect(summary.straggler).toBeNull();
  else if (e.straggler) {
    expect(summary.straggler, summary.headline).toMatchObject(e.straggler);
    expect(summary.ranks.map((r: any) => [r.rank, r.straggler])).toEqual(summary.ranks.map((r: any) => [r.rank, r.rank === e.straggler!.rank]));
  }
  if (e.ranks) {
    expect(summary.ranks).toHaveLength(e.ranks.length);
    expect(summary.ranks).toMatchObject(e.ranks);
  }
  if (e.gpus) expect(summary.gpus).toMatchObject(e.gpus);
  if (e.gpuUtilMean) {
    expect(summary.gpus[0].util_mean).toBeGreaterThan(e.gpuUtilMean[0]);
    expect(summary.gpus[0].util_mean).toBeLessThan(e.gpuUtilMean[1]);
  }
  if (e.breakdown) expectBreakdown(summary, e.breakdown.measured, e.breakdown.scripted, e.breakdown.phases);
  for (const [phase, above] of Object.entries(e.breakdownAbove ?? {})) expect(summary.breakdown[phase], JSON.stringify(summary.breakdown)).toBeGreaterThan(above);
  if (e.loader) expect(summary.env.loader).toMatchObject(e.loader);
  if (e.evidenceRuleContains) expect(summary.evidence.rule).toContain(e.evidenceRuleContains);
  for (const [figure, above] of Object.entries(e.evidenceAbove ?? {})) expect(summary.evidence.figures[figure]).toBeGreaterThan(above);
  if (e.limiters) expect((summary.limiters ?? []).map((l: any) => ({ limiter: l.limiter, level: l.level })), summary.headline).toEqual(e.limiters);
  if (e.causesRanked) {
    const causes: Array<{ cause: string; gain: number | null; upto: number }> = summary.causes;
    expect(causes.map((c) => c.cause), JSON.stringify(causes)).toEqual(expect.arrayContaining(e.causesRanked));
    const bought = causes.map((c) => c.gain ?? c.upto);
    expect(bought, 'ranked by what fixing each buys').toEqual([...bought].sort((a, b) => b - a));
    expect(summary.cause).toBe(causes[0]!.cause);
  }
  if (e.change) {
    const segment = (summary.timeline as Segment[]).find((s) => s.verdict === e.change!.to[0] && s.cause === e.change!.to[1]);
    expect(segment, JSON.stringify(summary.timeline)).toBeDefined();
    expect(Date.parse(summary.started_at) + segment!.start_s * 1000, `${e.change.to.join('/')} begins after the change`).toBeGreaterThan(e.change.atMs);
  }
}

const SEGMENT = /^wal-\d{8,}\.log$/;
const CHECKPOINT = /^checkpoint-\d{8,}\.json$/;

/**
 * Copies a finished job's journal (segments gzipped, checkpoints as they are) and summary.json from
 * its --out folder into test/fixtures/journals/<slug>/ (or `root`/<slug>/), with meta.json; replaces
 * an older recording.
 */
export function recordScenario<M extends { title: string } = ScenarioMeta>(out: string, meta: M, root = JOURNALS): string {
  const dir = path.join(root, slugOf(meta.title));
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const name of readdirSync(out).sort()) {
    if (SEGMENT.test(name)) writeFileSync(path.join(dir, `${name}.gz`), gzipSync(readFileSync(path.join(out, name)), { level: 9 }));
    else if (CHECKPOINT.test(name)) copyFileSync(path.join(out, name), path.join(dir, name));
  }
  copyFileSync(path.join(out, 'summary.json'), path.join(dir, 'summary.json'));
  writeFileSync(path.join(dir, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
  return dir;
}

export interface Recording<M = ScenarioMeta> {
  slug: string;
  /** The folder of the recording, in test/fixtures/journals. */
  fixture: string;
  meta: M;
  /** The summary.json the live sidecar wrote. */
  summary: any;
}

/** The recordings in test/fixtures/journals (or `root`), by slug. */
export function recordings<M = ScenarioMeta>(root = JOURNALS): Array<Recording<M>> {
  if (!existsSync(root)) return [];
  return readdirSync(root)
    .sort()
    .filter((slug) => existsSync(path.join(root, slug, 'meta.json')))
    .map((slug) => {
      const fixture = path.join(root, slug);
      return {
        slug,
        fixture,
        meta: JSON.parse(readFileSync(path.join(fixture, 'meta.json'), 'utf8')) as M,
        summary: JSON.parse(readFileSync(path.join(fixture, 'summary.json'), 'utf8')),
      };
    });
}

/** The recording's journal as the sidecar wrote it (segments gunzipped), in a new temp folder. */
export function unpackJournal(recording: Pick<Recording<unknown>, 'fixture'>): string {
  const dir = tempDir('stepscope-replay-');
  for (const name of readdirSync(recording.fixture)) {
    const from = path.join(recording.fixture, name);
    if (name.endsWith('.log.gz') && SEGMENT.test(name.slice(0, -3))) writeFileSync(path.join(dir, name.slice(0, -3)), gunzipSync(readFileSync(from)));
    else if (CHECKPOINT.test(name)) copyFileSync(from, path.join(dir, name));
  }
  return dir;
}
