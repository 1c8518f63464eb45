import { isStop } from './model/verdict.js';
import { compareTo, samplesPerStep, type Reference } from './analysis/compare.js';
import { fingerprintOf } from './engine/runs.js';
import type { Summary } from './protocol/summary.js';
import type { Comparison } from './protocol/state.js';
import { GATE_DEFAULTS, type GateOutcome } from './gate-defaults.js';

export { GATE_DEFAULTS, type GateOutcome } from './gate-defaults.js';

/**
 * `stepscope gate`'s judgement, pure: is this run's steady-state time per sample within the noise
 * of its reference? Steady state is the run's series slices after warm-up, inside the stretches it
 * was stepping (not warming up, idle or stopped); its figure is the median of the slices' times per
 * sample, weighted by their steps, and its noise the slices' spread (1.4826 × the weighted median
 * absolute deviation, the standard deviation of normal noise). A history entry has no series: its
 * figure is its step-time median per sample and the noise is the spread between the runs.
 */


export interface GateOptions {
  /** Bounds at this many times the reference's spread. */
  sigma: number;
  /** ... and never tighter than this, percent (slices of one run are closer than runs are). */
  minChangePct: number;
  /** Fewer steady steps than this in the run (or its reference) cannot be judged. */
  minSteps: number;
}

export interface Steady {
  /** Median time per sample over the steady slices (per step where samples are unknown), ms. */
  ms: number | null;
  /** 1.4826 × weighted MAD of the slices, ms; null from one slice or without a series. */
  spread_ms: number | null;
  slices: number;
  steps: number;
  /** Seconds from the run's start that warm-up ended (null: it never did). */
  warmup_end_s: number | null;
  basis: 'series' | 'median step';
}


export interface GateResult {
  outcome: GateOutcome;
  job: string;
  /** Why it could not judge, in words; null when it judged. */
  reason: string | null;
  per: 'sample' | 'step';
  current: Steady;
  reference: { label: string; runs: number; ms: number | null; spread_ms: number | null } | null;
  change_pct: number | null;
  /** The bound the change was held to, percent. */
  limit_pct: number | null;
  /** What the comparison blames: the verdict and its cause now, the phase that grew most, what changed. */
  cause: string | null;
  verdict: string;
  phase: { name: string; delta_ms: number } | null;
  drift: string[];
  comparison: Comparison | null;
  text: string;
}

const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits;

function weightedMedian(values: ReadonlyArray<{ v: number; w: number }>): number {
  const sorted = values.slice().sort((a, b) => a.v - b.v);
  const total = sorted.reduce((a, x) => a + x.w, 0);
  let seen = 0;
  for (const x of sorted) {
    seen += x.w;
    if (seen >= total / 2) return x.v;
  }
  return sorted.at(-1)!.v;
}

/** The run's steady stretch: after its first warm-up, while it was stepping and judged. */
function activeSpans(summary: Summary): { spans: Array<[number, number]>; warmupEnd: number | null } {
  const spans = summary.timeline.filter((s) => s.verdict !== 'warming-up' && s.verdict !== 'idle' && !isStop(s.verdict)).map((s): [number, number] => [s.start_s, s.end_s]);
  const warm = summary.timeline.find((s) => s.verdict === 'warming-up');
  const warmupEnd = spans.length === 0 ? null : (warm?.end_s ?? spans[0]![0]);
  return { spans, warmupEnd };
}

export function steadyOf(summary: Summary, perSample: boolean): Steady {
  const samples = perSample ? samplesPerStep(summary) : null;
  const divide = samples ?? 1;
  const { spans, warmupEnd } = activeSpans(summary);
  const series = summary.series;
  if (!series) {
    const p50 = summary.step_ms.p50;
    return { ms: p50 === null || spans.length === 0 ? null : round(p50 / divide, 6), spread_ms: null, slices: 0, steps: summary.steps, warmup_end_s: warmupEnd, basis: 'median step' };
  }
  const offset = (Date.parse(series.from) - Date.parse(summary.started_at)) / 1000;
  const slices: Array<{ v: number; w: number }> = [];
  series.steps.forEach((steps, i) => {
    const ms = series.step_ms[i];
    if (steps === 0 || ms === null || ms === undefined) return;
    const start = offset + i * series.slice_s;
    const middle = start + series.slice_s / 2;
    // A slice counts whole once warm-up is over by its start and the run was stepping at its middle.
    if (warmupEnd === null || start < warmupEnd - 1e-9) return;
    if (!spans.some(([from, to]) => middle >= from && middle <= to + series.slice_s / 2)) return;
    slices.push({ v: ms / divide, w: steps });
  });
  const steps = slices.reduce((a, x) => a + x.w, 0);
  if (slices.length === 0) return { ms: null, spread_ms: null, slices: 0, steps: 0, warmup_end_s: warmupEnd, basis: 'series' };
  const median = weightedMedian(slices);
  const mad = weightedMedian(slices.map((x) => ({ v: Math.abs(x.v - median), w: x.w })));
  return { ms: round(median, 6), spread_ms: slices.length > 1 ? round(1.4826 * mad, 6) : null, slices: slices.length, steps, warmup_end_s: warmupEnd, basis: 'series' };
}

/** What a run is judged against: one baseline run, or several comparable runs of the job's history (oldest first). */
export interface GateReference {
  label: string;
  runs: readonly Summary[];
  /** The run compareTo reads phases and "what changed" against. */
  reference: Reference;
}

const fmt = (ms: number | null, per: string) => (ms === null ? 'n/a' : `${ms >= 100 ? ms.toFixed(1) : ms >= 1 ? ms.toFixed(3) : ms.toPrecision(3)} ms a ${per}`);

function cannot(job: string, reason: string, current: Steady, per: GateResult['per'], verdict: string, reference: GateResult['reference'] = null): GateResult {
  return { outcome: 'cannot-judge', job, reason, per, current, reference, change_pct: null, limit_pct: null, cause: null, verdict, phase: null, drift: [], comparison: null, text: `cannot judge ${job}: ${reason}` };
}

/** Judges `current` against `reference`; null reference: nothing to judge against (says so). */
export function gate(current: Summary, reference: GateReference | null, options: GateOptions = GATE_DEFAULTS): GateResult {
  const refs = reference?.runs ?? [];
  // Per sample when every run says its samples a step (a batch-size change is then no slowdown).
  const perSample = samplesPerStep(current) !== null && refs.every((r) => samplesPerStep(r) !== null);
  const per = perSample ? 'sample' : 'step';
  const now = steadyOf(current, perSample);
  if (!reference || refs.length === 0) return cannot(current.job, 'no reference: give --baseline, or --history with earlier runs of this job on the same GPU model and rank count', now, per, current.verdict);
  const fp = fingerprintOf(current);
  const other = refs.find((r) => fingerprintOf(r).key !== fp.key);
  if (other) {
    const them = fingerprintOf(other);
    return cannot(current.job, `the reference ran on ${them.gpuName ?? 'no GPU named'} × ${them.worldSize} ranks and this run on ${fp.gpuName ?? 'no GPU named'} × ${fp.worldSize}: times per sample are not comparable`, now, per, current.verdict);
  }
  const figures = refs.map((r) => steadyOf(r, perSample));
  const measured = figures.filter((f): f is Steady & { ms: number } => f.ms !== null && f.steps >= options.minSteps);
  // One run: its slices' spread; several: the spread between their medians, never less than the runs' own.
  const refMs = measured.length ? round(weightedMedian(measured.map((f) => ({ v: f.ms, w: 1 }))), 6) : null;
  const within = measured.map((f) => f.spread_ms).filter((s): s is number => s !== null);
  const between = measured.length > 1 && refMs !== null ? 1.4826 * weightedMedian(measured.map((f) => ({ v: Math.abs(f.ms - refMs), w: 1 }))) : null;
  const spreads = [...(within.length ? [weightedMedian(within.map((v) => ({ v, w: 1 })))] : []), ...(between === null ? [] : [between])];
  const spread = spreads.length ? round(Math.max(...spreads), 6) : null;
  const described = { label: reference.label, runs: refs.length, ms: refMs, spread_ms: spread };
  if (refMs === null) return cannot(current.job, `the reference has fewer than ${options.minSteps} steady steps (after warm-up) to judge against`, now, per, current.verdict, described);
  if (now.ms === null || now.steps < options.minSteps) {
    return cannot(current.job, `this run has ${now.steps} steady steps (after warm-up${now.warmup_end_s === null ? ', which never ended' : ` at ${now.warmup_end_s.toFixed(1)} s`}), fewer than the ${options.minSteps} needed: run the canary longer`, now, per, current.verdict, described);
  }
  const limit = round(Math.max(options.minChangePct, spread === null ? 0 : (options.sigma * spread * 100) / refMs), 1);
  const change = round(((now.ms - refMs) / refMs) * 100, 1);
  const comparison = compareTo(reference.reference, current);
  const phase = comparison.grew_most === null ? null : { name: comparison.grew_most, delta_ms: comparison.delta_ms[comparison.grew_most]! };
  const drift = comparison.env_changes.slice(0, 3).map((d) => `${d.key}: ${d.baseline ?? 'none'} → ${d.current ?? 'none'}${d.effect ? ` (${d.effect})` : ''}`);
  // The run's verdict's own first cause (the summary lists every verdict's, folded over its time).
  const cause = current.causes?.find((c) => (c.verdict ?? current.verdict) === current.verdict)?.cause ?? current.cause;
  const outcome: GateOutcome = change > limit ? 'regression' : 'pass';
  const head =
    outcome === 'regression'
      ? `REGRESSION: ${current.job} is ${change.toFixed(1)}% slower a ${per} than ${reference.label} (bound ${limit.toFixed(1)}%)`
      : `pass: ${current.job} is within bounds of ${reference.label}: ${change >= 0 ? '+' : ''}${change.toFixed(1)}% a ${per} (bound ${limit.toFixed(1)}%)`;
  const lines = [
    head,
    `  steady state: ${fmt(now.ms, per)} over ${now.steps} steps in ${now.slices} slices (warm-up ended at ${now.warmup_end_s?.toFixed(1) ?? '?'} s); reference ${fmt(refMs, per)}, spread ${fmt(spread, per)} (bound: ${options.sigma}× spread, at least ${options.minChangePct}%)`,
  ];
  if (outcome === 'regression') {
    lines.push(`  verdict now: ${current.verdict}${cause ? ` (${cause})` : ''}; it was ${comparison.verdict.baseline}${comparison.verdict.baseline_cause ? ` (${comparison.verdict.baseline_cause})` : ''}`);
    lines.push(phase ? `  phase that grew most: ${phase.name} (+${phase.delta_ms.toFixed(1)} ms a step)` : '  no phase grew');
    lines.push(drift.length ? `  environment drift: ${drift.join('; ')}` : '  environment drift: none seen');
  }
  return { outcome, job: current.job, reason: null, per, current: now, reference: described, change_pct: change, limit_pct: limit, cause, verdict: current.verdict, phase, drift, comparison, text: lines.join('\n') };
}
