import { Type, type Static } from '@sinclair/typebox';
import { msPerSample, type Reference } from '../analysis/compare.js';
import type { Comparison } from '../protocol/state.js';
import { fingerprintOf, REFERENCE_RUNS, type RunReferences } from '../engine/runs.js';
import { RunRecordSchema, type RunRecord, type RunsReference } from '../protocol/runs.js';
import { SummarySchema, type Regression, type Summary } from '../protocol/summary.js';

/**
 * A job's past runs as kept on disk, pure: the line and the file kept for each run, and what the
 * journal's `reference` entry holds of them. The files are runs-store.ts's; what a run is compared
 * with, and what makes runs comparable, the engine's (src/engine/runs.ts).
 */

export const PAST_RUN_SCHEMA = 'stepscope.history/v1' as const;

/** One history file: a run's line, and its summary (without the series: the charts are the report's). */
export const PastRunEntrySchema = Type.Object({
  schema: Type.Literal(PAST_RUN_SCHEMA),
  record: RunRecordSchema,
  summary: SummarySchema,
});
export type PastRunEntry = Static<typeof PastRunEntrySchema>;

export { DEFAULT_HISTORY_KEEP } from './past-runs-defaults.js';

export function runRecord(summary: Summary, run: number, comparison: Comparison | null, regression: Regression | null): RunRecord {
  const fingerprint = fingerprintOf(summary);
  return {
    job: summary.job,
    run,
    started_at: summary.started_at,
    ended_at: summary.ended_at,
    fingerprint: fingerprint.key,
    gpu_name: fingerprint.gpuName,
    world_size: summary.world_size,
    steps: summary.steps,
    duration_s: summary.duration_s,
    samples_per_s: summary.samples_per_s,
    ms_per_sample: msPerSample(summary),
    step_ms_mean: summary.step_ms.mean,
    verdict: summary.verdict,
    cause: summary.cause,
    change_pct: comparison?.change_pct ?? null,
    regression: regression !== null,
  };
}

/** What is kept of a summary in the history: all but the series (and any history of its own). */
export function pastRunEntry(summary: Summary, record: RunRecord): PastRunEntry {
  const { series: _series, history: _history, ...kept } = summary;
  return { schema: PAST_RUN_SCHEMA, record, summary: kept };
}

/** `20261130T142501123Z-run3-1a2b3c4d5e6f.json`: sorts by when the run ended. */
export function entryFileName(record: RunRecord): string {
  const stamp = record.ended_at.replace(/[-:.]/g, '');
  return `${stamp}-run${record.run}-${record.fingerprint}.json`;
}

/**
 * What the journal's `reference` entry holds for the job: the pinned summary, or the newest
 * REFERENCE_RUNS past runs with steps of each fingerprint (entries oldest first), oldest first.
 */
export function referencesFor(job: string, entries: readonly PastRunEntry[], pinned: Summary | null): RunReferences {
  if (pinned) return { job, pinned: withoutSeries(pinned), past: [] };
  const byFingerprint = new Map<string, number>();
  const kept = entries
    .filter((e) => e.summary.steps > 0)
    .reverse()
    .filter((e) => {
      const n = byFingerprint.get(e.record.fingerprint) ?? 0;
      byFingerprint.set(e.record.fingerprint, n + 1);
      return n < REFERENCE_RUNS;
    })
    .reverse();
  return { job, pinned: null, past: kept.map((e) => e.summary) };
}

/** A summary as a reference: its charts say nothing a comparison reads. */
function withoutSeries(summary: Summary): Summary {
  const { series: _series, history: _history, ...kept } = summary;
  return kept;
}

export function describeReference(reference: Reference | null): RunsReference | null {
  return reference ? { kind: reference.kind, label: reference.label, runs: reference.runs, ms_per_sample: msPerSample(reference.summary) } : null;
}
