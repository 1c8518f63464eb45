import path from 'node:path';
import { expect } from 'vitest';
import { ROOT } from './sidecar.js';

/**
 * Jobs that stop (test/hang-e2e.test.ts, real ranks on gloo) and their recordings
 * (test/fixtures/hangs/<slug>/, replayed by test/stalls-replay.test.ts): what each expects of the
 * job's state once it stopped and of its summary, checked the same way live and on the replay.
 */

export const HANGS = path.join(ROOT, 'test', 'fixtures', 'hangs');

export interface HangExpectations {
  /** The job's verdict once it stopped; null: it must never stop (a slow, healthy job). */
  verdict: 'hung' | 'stalled' | 'gone' | null;
  cause: string | null;
  /** The ranks the others wait for. */
  culprits: number[];
  /** The function of the script's own code the first culprit is stuck in; null where none can be named (gone, unresponsive). */
  function: string | null;
  waiting: number[];
  /** The waiting ranks' collective, as a pattern; null where not seen. */
  waitsIn: string | null;
  /** Verdict and cause of ranks, as [rank, verdict, cause]. */
  rankVerdicts: Array<[number, string, string | null]>;
}

export interface HangMeta {
  format: 'stepscope.hang-scenario/v1';
  title: string;
  test: string;
  job: string;
  worldSize: number;
  /** hang_loop.py's --how, --stop-rank, --stop-step and --step-ms. */
  script: { how: string; stopRank: number; stopStep: number; stepMs: number; torch: string };
  /** When the rank stopped (its marker file's time), ms since the epoch; null where none did. */
  stoppedAt: number | null;
  expect: HangExpectations;
  recordedAt: string;
}

/** The job's state (GET /v1/state's, or a replayed snapshot's) once it stopped: who, where, on what. */
export function expectStop(job: any, e: HangExpectations): void {
  const shown = JSON.stringify({ verdict: job.verdict?.evidence?.rule, stop: job.stop }, null, 1);
  expect(job.verdict?.verdict, shown).toBe(e.verdict);
  expect(job.verdict?.cause, shown).toBe(e.cause);
  expect(job.stop?.verdict, shown).toBe(e.verdict);
  expect(job.stop.culprits, shown).toEqual(e.culprits);
  expect(job.stop.waiting, shown).toEqual(e.waiting);
  if (e.function) {
    expect(job.stop.where[0]?.function, shown).toBe(e.function);
    expect(job.verdict.evidence.rule, shown).toContain(e.function);
  }
  if (e.waitsIn) expect(job.stop.waits_in, shown).toMatch(new RegExp(e.waitsIn));
  for (const [rank, verdict, cause] of e.rankVerdicts) {
    const state = job.ranks.find((r: any) => r.rank === rank);
    expect([state?.verdict?.verdict, state?.verdict?.cause], `rank ${rank}: ${state?.verdict?.evidence?.rule}`).toEqual([verdict, cause]);
  }
  // The rule names the rank the others wait for.
  for (const rank of e.culprits) expect(job.verdict.evidence.rule, shown).toMatch(new RegExp(`rank ${rank}\\b`));
}

/** The summary of a run that stopped leads with it; every timeline row runs forward and the stop is in it. */
export function expectStopSummary(summary: any, e: HangExpectations): void {
  for (const row of summary.timeline) expect(row.end_s, JSON.stringify(summary.timeline)).toBeGreaterThanOrEqual(row.start_s);
  for (let i = 1; i < summary.timeline.length; i++) expect(summary.timeline[i].start_s).toBe(summary.timeline[i - 1].end_s);
  if (e.verdict === null) {
    expect(summary.stops, summary.headline).toBeUndefined();
    expect(summary.timeline.map((s: any) => s.verdict)).not.toContain('stalled');
    expect(summary.timeline.map((s: any) => s.verdict)).not.toContain('hung');
    return;
  }
  const lead = summary.stops.find((s: any) => s.verdict === e.verdict);
  expect(lead, JSON.stringify(summary.stops)).toBeDefined();
  expect(lead.culprits).toEqual(e.culprits);
  expect(summary.timeline.map((s: any) => s.verdict), JSON.stringify(summary.timeline)).toContain(e.verdict);
  const heads = { hung: /^Hung at step \d+ for /, stalled: /^Ranks? [\d, –]+ stalled at step/, gone: /^Ranks? [\d, –]+ gone after step \d+/ };
  expect(summary.headline).toMatch(heads[e.verdict]);
  if (e.function) expect(summary.headline).toContain(e.function);
  // The stop is in the run's time: a hung run lasts at least as long as its hang.
  expect(summary.duration_s + 0.05).toBeGreaterThanOrEqual(lead.since_s + lead.seconds);
}
