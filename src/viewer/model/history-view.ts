import type { Verdict } from '../../model/verdict.js';
import type { TimelineSegment } from '../../protocol/state.js';
import { gpuKey, gpuSeries, rankKey, valuesBetween, type HistoryState, type Series } from './history.js';

export interface SparkRow {
  key: string;
  label: string;
  /** The rank, for step-time rows. */
  rank?: number;
  values: Array<number | null>;
  /** The newest value shown. */
  latest: number | null;
}

/** Sparklines of one job on one time axis: complete slices from the job's start (or as far back as kept) to now. */
export interface HistoryView {
  from: number;
  sliceMs: number;
  slices: number;
  stepMs: SparkRow[];
  gpuUtil: SparkRow[];
  gpuClockPct: SparkRow[];
  /** The job's verdict in each slice, from its timeline. */
  verdicts: Array<Verdict | null>;
  /** Whether a regression held during each slice (as the sidecar told it; all false where it tells none). */
  regressed: boolean[];
}

export interface HistoryPart {
  history: HistoryState;
  /** The sidecar's clock at its newest state (ms). */
  at: number;
  job: string;
  jobStartedAt: number;
  timeline: readonly TimelineSegment[];
  ranks: Array<{ rank: number; label: string }>;
  gpus: Array<{ key?: string; index: number; uuid: string | null; label: string }>;
  /** The run's regressions: from when to when (ms; `to` null while it holds, or held when the run ended). */
  regressions: ReadonlyArray<{ from: number; to: number | null }>;
}

const latestOf = (values: ReadonlyArray<number | null>) => {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i]!;
  return null;
};

/** The verdict in force at `t` (ms) by a timeline whose seconds count from `startedAt`. */
export function verdictAt(timeline: readonly TimelineSegment[], startedAt: number, t: number): Verdict | null {
  let found: Verdict | null = null;
  for (const segment of timeline) {
    if (startedAt + segment.start_s * 1000 > t) break;
    found = segment.verdict;
  }
  return found;
}

/**
 * The job's sparklines across the sidecars that report it. The slice still filling is left out, so a
 * sparkline never shows a half-counted slice.
 */
export function historyView(parts: readonly HistoryPart[]): HistoryView | null {
  const first = parts[0];
  if (!first) return null;
  const sliceMs = first.history.sliceMs;
  const end = Math.max(...parts.map((p) => Math.floor(p.at / sliceMs) * sliceMs));
  const jobStart = Math.min(...parts.map((p) => Math.floor(p.jobStartedAt / sliceMs) * sliceMs));
  const from = Math.max(end - first.history.keep * sliceMs, jobStart);
  const slices = Math.max(0, Math.round((end - from) / sliceMs));
  const row = (key: string, label: string, series: Series | undefined): SparkRow => {
    const values = valuesBetween(series, from, slices, sliceMs);
    return { key, label, values, latest: latestOf(values) };
  };
  const stepMs = parts.flatMap((p) => p.ranks.map((r) => ({ ...row(rankKey(p.job, r.rank), r.label, p.history.stepMs.get(rankKey(p.job, r.rank))), rank: r.rank })));
  const gpuUtil = parts.flatMap((p) => p.gpus.map((g) => row(gpuKey(g), g.label, gpuSeries(p.history.gpuUtil, g))));
  const gpuClockPct = parts.flatMap((p) => p.gpus.map((g) => row(gpuKey(g), g.label, gpuSeries(p.history.gpuClockPct, g))));
  // A slice shows the verdict in force at its end, the newest moment it covers.
  const verdicts = Array.from({ length: slices }, (_, i) => verdictAt(first.timeline, first.jobStartedAt, from + (i + 1) * sliceMs));
  // A slice is marked where any part of it was regressed: a short regression is not lost between columns.
  const spans = parts.flatMap((p) => p.regressions);
  const regressed = Array.from({ length: slices }, (_, i) => {
    const start = from + i * sliceMs;
    return spans.some((r) => r.from < start + sliceMs && (r.to === null || r.to > start));
  });
  return { from, sliceMs, slices, stepMs: stepMs.sort((a, b) => a.rank - b.rank), gpuUtil, gpuClockPct, verdicts, regressed };
}
