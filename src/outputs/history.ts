import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { compareTo, medianReference, msPerSample, referenceOf, type Reference } from '../analysis/compare.js';
import type { Regression, Summary } from '../protocol/summary.js';
import { RunRecordSchema, type RunRecord, type RunsReference } from '../protocol/runs.js';
import { SummarySchema } from '../protocol/summary.js';
import type { Comparison } from '../protocol/state.js';

/**
 * A job's run history, pure: what makes runs comparable (the fingerprint), the line kept for each
 * run, and what a new run is compared with. The files are history-store.ts's.
 */

export const HISTORY_SCHEMA = 'stepscope.history/v1' as const;

/** One history file: a run's line, and its summary (without the series: the charts are the report's). */
export const HistoryEntrySchema = Type.Object({
  schema: Type.Literal(HISTORY_SCHEMA),
  record: RunRecordSchema,
  summary: SummarySchema,
});
export type HistoryEntry = Static<typeof HistoryEntrySchema>;

/** Runs of the same job kept on disk, newest first (--history-keep). */
export const DEFAULT_HISTORY_KEEP = 20;
/** Comparable runs the median is taken over. */
export const REFERENCE_RUNS = 5;
export const DEFAULT_REGRESSION_THRESHOLD_PCT = 10;

export interface Fingerprint {
  key: string;
  gpuName: string | null;
  worldSize: number;
}

/**
 * Runs are comparable when they ran on the same GPU model with as many ranks: per-sample times of
 * an A10 and an H100, or of 8 and 64 ranks, say nothing about each other. Software versions and
 * loader settings are left out on purpose: they are what "changed since" reports.
 */
export function fingerprintOf(summary: Summary): Fingerprint {
  const fromEnv = summary.env.gpu_name;
  const gpuName = typeof fromEnv === 'string' && fromEnv ? fromEnv : (summary.gpus.find((g) => g.name)?.name ?? null);
  const key = createHash('sha256').update(JSON.stringify([gpuName, summary.world_size])).digest('hex').slice(0, 12);
  return { key, gpuName, worldSize: summary.world_size };
}

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
export function historyEntry(summary: Summary, record: RunRecord): HistoryEntry {
  const { series: _series, history: _history, ...kept } = summary;
  return { schema: HISTORY_SCHEMA, record, summary: kept };
}

/** `20261130T142501123Z-run3-1a2b3c4d5e6f.json`: sorts by when the run ended. */
export function entryFileName(record: RunRecord): string {
  const stamp = record.ended_at.replace(/[-:.]/g, '');
  return `${stamp}-run${record.run}-${record.fingerprint}.json`;
}

/**
 * What a run is compared with: the pinned baseline where there is one, else the median of the
 * job's last REFERENCE_RUNS runs with the current run's fingerprint (entries oldest first), else nothing.
 */
export function chooseReference(entries: readonly HistoryEntry[], current: Summary, pinned: Summary | null, next = false): Reference | null {
  const fingerprint = fingerprintOf(current);
  if (pinned) return referenceOf(pinned);
  // A run never is its own reference (a sidecar restarted after keeping it but before saying so);
  // `next`: what the run after `current` (an ended one) will be compared with.
  const self = (e: HistoryEntry) => !next && e.record.ended_at === current.ended_at && e.record.started_at === current.started_at;
  const comparable = entries
    .filter((e) => e.record.fingerprint === fingerprint.key && e.summary.steps > 0 && !self(e))
    .slice(-REFERENCE_RUNS);
  return medianReference(comparable.map((e) => e.summary));
}

export function describeReference(reference: Reference | null): RunsReference | null {
  return reference ? { kind: reference.kind, label: reference.label, runs: reference.runs, ms_per_sample: msPerSample(reference.summary) } : null;
}

/** The comparison, and the regression where it passes the threshold. */
export function judgeRun(reference: Reference | null, summary: Summary, thresholdPct: number, sinceS: number | null): { comparison: Comparison | null; regression: Regression | null } {
  if (!reference) return { comparison: null, regression: null };
  const comparison = compareTo(reference, summary);
  const change = comparison.change_pct;
  const regression =
    change !== null && change >= thresholdPct
      ? { change_pct: change, threshold_pct: thresholdPct, against: reference.label, since_s: sinceS, text: comparison.text.split('\n')[0]! }
      : null;
  return { comparison, regression };
}
