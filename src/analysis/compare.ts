import { envDrifts, nodeDrifts, rankDrifts, type Drift } from './stack.js';
import type { Summary } from '../protocol/summary.js';
import type { Comparison } from '../protocol/state.js';

/**
 * "Is it really slower, and where?": a run's summary against a reference — a baseline run's
 * summary, or the median of the job's recent comparable runs. Pure.
 *
 * Normalised per sample: where both runs say how many samples a step takes (the hook's
 * `samples`, else the loader's batch size), the reference's step is scaled to this run's samples
 * a step, so that a batch-size change is not a slowdown. Every per-step figure below is then the
 * reference's at this run's batch, and `change_pct` is the change of the time per sample.
 */

const PHASES = ['data', 'h2d', 'compute', 'other'] as const;
type Phase = (typeof PHASES)[number];

const PHASE_WORDS: Record<Phase, string> = { data: 'data wait', h2d: 'host-to-device copies', compute: 'compute', other: 'time outside the phases' };

/** What a run is compared with: one run's figures, or the median run of several, named for people. */
export interface Reference {
  kind: 'baseline' | 'history';
  /** "baseline (run of 2026-11-30)", "the median of the last 5 runs (newest 2026-12-01)". */
  label: string;
  runs: number;
  summary: Summary;
  /** The environment "what changed since" is read against: the newest run's. */
  env: Summary['env'];
  /** The node "what changed since" is read against: the newest run's (absent in summaries before the inventory). */
  node?: Summary['node'];
}

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const day = (iso: string) => iso.slice(0, 10);

/** Samples one rank's step takes: counted by the hook, else the loader's batch size; null when unknown. */
export function samplesPerStep(summary: Summary): number | null {
  if (summary.samples_per_step !== undefined && summary.samples_per_step !== null && summary.samples_per_step > 0) return summary.samples_per_step;
  const loader = summary.env.loader;
  const batch = loader !== null && typeof loader === 'object' && !Array.isArray(loader) ? (loader as Record<string, unknown>).batch_size : undefined;
  return typeof batch === 'number' && batch > 0 ? batch : null;
}

/** A rank's mean step time per sample, ms; null when samples are not known. */
export function msPerSample(summary: Summary): number | null {
  const samples = samplesPerStep(summary);
  return summary.step_ms.mean !== null && samples ? round(summary.step_ms.mean / samples, 6) : null;
}

export function referenceOf(summary: Summary, kind: Reference['kind'] = 'baseline'): Reference {
  return { kind, label: `${kind} (run of ${day(summary.ended_at)})`, runs: 1, summary, env: summary.env, node: summary.node };
}

/**
 * The median of several runs (oldest first): the run whose time per sample (else per step) is the
 * median, so that its phases and GPU figures belong together; "what changed since" against the newest.
 */
export function medianReference(runs: readonly Summary[]): Reference | null {
  const measured = runs.filter((run) => run.step_ms.mean !== null && run.steps > 0);
  if (measured.length === 0) return null;
  const cost = (run: Summary) => msPerSample(run) ?? run.step_ms.mean!;
  const sorted = measured.slice().sort((a, b) => cost(a) - cost(b));
  const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
  const newest = measured.at(-1)!;
  const label = measured.length === 1 ? `the previous run (${day(newest.ended_at)})` : `the median of the last ${measured.length} runs (newest ${day(newest.ended_at)})`;
  return { kind: 'history', label, runs: measured.length, summary: median, env: newest.env, node: newest.node };
}

/** How much to scale the reference's per-step figures to this run's samples a step (1 when unknown). */
function batchScale(reference: Summary, current: Summary): { scale: number; perSample: boolean } {
  const before = samplesPerStep(reference);
  const after = samplesPerStep(current);
  return before && after ? { scale: after / before, perSample: true } : { scale: 1, perSample: false };
}

function phaseMs(summary: Summary, scale: number): Record<Phase, number | null> {
  const mean = summary.step_ms.mean;
  return Object.fromEntries(PHASES.map((phase) => [phase, mean === null ? null : round(summary.breakdown[phase] * mean * scale, 3)])) as Record<Phase, number | null>;
}

function meanOver(summary: Summary, pick: (gpu: Summary['gpus'][number]) => number | null): number | null {
  const values = summary.gpus.map(pick).filter((v): v is number => v !== null);
  return values.length ? round(values.reduce((a, b) => a + b, 0) / values.length, 4) : null;
}

export function compare(baseline: Summary, current: Summary): Comparison {
  return compareTo(referenceOf(baseline), current);
}

/** Environment and node drifts, ranked by their usual effect, those going the way the runs went first. */
function changesOf(reference: Reference, current: Summary, changePct: number | null): Drift[] {
  const observed = changePct === null ? null : changePct > 2 ? 'slower' : changePct < -2 ? 'faster' : null;
  return rankDrifts([...envDrifts(reference.env, current.env), ...nodeDrifts(reference.node, current.node)], observed);
}

export function compareTo(reference: Reference, current: Summary): Comparison {
  const base = reference.summary;
  const { scale, perSample } = batchScale(base, current);
  const before = phaseMs(base, scale);
  const after = phaseMs(current, 1);
  const delta = Object.fromEntries(
    PHASES.map((phase) => [phase, before[phase] === null || after[phase] === null ? null : round(after[phase]! - before[phase]!, 3)]),
  ) as Record<Phase, number | null>;
  const grown = PHASES.filter((phase) => delta[phase] !== null).sort((x, y) => delta[y]! - delta[x]!);
  const grewMost = grown.length && delta[grown[0]!]! > 0 ? grown[0]! : null;
  const b = base.step_ms.mean === null ? null : round(base.step_ms.mean * scale, 3);
  const c = current.step_ms.mean;
  const changePct = b && c !== null ? round(((c - b) / b) * 100, 1) : null;
  const comparison: Omit<Comparison, 'text'> = {
    step_ms: { baseline: b, current: c },
    change_pct: changePct,
    delta_ms: delta,
    phase_ms: { baseline: before, current: after },
    grew_most: grewMost,
    gpu: {
      util_mean: { baseline: meanOver(base, (g) => g.util_mean), current: meanOver(current, (g) => g.util_mean) },
      sm_clock_frac_mean: { baseline: meanOver(base, (g) => g.sm_clock_frac_mean), current: meanOver(current, (g) => g.sm_clock_frac_mean) },
    },
    verdict: { baseline: base.verdict, current: current.verdict, baseline_cause: base.cause, current_cause: current.cause },
    env_changes: changesOf(reference, current, changePct),
  };
  return { ...comparison, text: [headline(comparison, reference.label, perSample), ...describeComparison(comparison)].join('\n') };
}

const ms = (x: number | null) => (x === null ? 'n/a' : `${x.toFixed(1)} ms`);
const signed = (x: number | null) => (x === null ? 'n/a' : `${x >= 0 ? '+' : ''}${x.toFixed(1)} ms`);
const pct = (x: number | null) => (x === null ? 'n/a' : `${Math.round(x * 100)}%`);
const shortValue = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value));

/**
 * One sentence, the comparison's first line: "14% slower per sample than the median of the last 5
 * runs (newest 2026-11-30): 11 of 14 points from data wait; changed since: torch 2.4→2.5".
 */
function headline(c: Omit<Comparison, 'text'>, against: string, perSample: boolean): string {
  const unit = perSample ? 'per sample' : 'per step';
  if (c.change_pct === null) return `No step time to compare with ${against}.`;
  const slower = c.change_pct > 2;
  const faster = c.change_pct < -2;
  let text = slower ? `${c.change_pct}% slower ${unit} than ${against}` : faster ? `${-c.change_pct}% faster ${unit} than ${against}` : `About as fast ${unit} as ${against}`;
  const base = c.step_ms.baseline;
  if (slower && c.grew_most && base) {
    const points = Math.round((c.delta_ms[c.grew_most]! / base) * 100);
    const total = Math.round(c.change_pct);
    // Where other phases shrank, the one that grew accounts for more than the whole change.
    text += points < total ? `: ${points} of ${total} points from ${PHASE_WORDS[c.grew_most]}` : `: all of it from ${PHASE_WORDS[c.grew_most]} (+${points} points)`;
  }
  if (c.env_changes.length) {
    const shown = c.env_changes.slice(0, 3).map((e) => `${e.key} ${shortValue(e.baseline)}→${shortValue(e.current)}`);
    text += `; changed since: ${shown.join(', ')}${c.env_changes.length > 3 ? ` and ${c.env_changes.length - 3} more` : ''}`;
  }
  return `${text}.`;
}

function describeComparison(c: Omit<Comparison, 'text'>): string[] {
  const lines: string[] = [];
  const direction = c.change_pct === null ? 'changed' : c.change_pct > 2 ? `is ${c.change_pct}% slower` : c.change_pct < -2 ? `is ${-c.change_pct}% faster` : 'is about as fast';
  lines.push(`Step time ${direction}: ${ms(c.step_ms.baseline)} → ${ms(c.step_ms.current)} a step (mean).`);
  if (c.grew_most) lines.push(`Most of the change is ${c.grew_most}: ${signed(c.delta_ms[c.grew_most])} a step.`);
  lines.push(`Per phase: ${PHASES.map((p) => `${p} ${signed(c.delta_ms[p])}`).join(', ')}.`);
  const verdictChanged = c.verdict.baseline !== c.verdict.current || c.verdict.baseline_cause !== c.verdict.current_cause;
  const cause = (v: string, k: string | null) => (k ? `${v} (${k})` : v);
  lines.push(
    verdictChanged
      ? `Verdict: ${cause(c.verdict.baseline, c.verdict.baseline_cause)} → ${cause(c.verdict.current, c.verdict.current_cause)}.`
      : `Verdict unchanged: ${cause(c.verdict.current, c.verdict.current_cause)}.`,
  );
  const util = c.gpu.util_mean;
  const clock = c.gpu.sm_clock_frac_mean;
  if (util.baseline !== null || util.current !== null) {
    const busy = (x: number | null) => (x === null ? 'n/a' : `${Math.round(x)}%`);
    lines.push(`GPU utilization ${busy(util.baseline)} → ${busy(util.current)}; SM clock ${pct(clock.baseline)} → ${pct(clock.current)} of its maximum.`);
  }
  if (c.env_changes.length) {
    lines.push('What changed in the environment, the likeliest to matter first:');
    for (const change of c.env_changes) {
      const why = change.effect && change.reason ? ` (${change.effect}: ${change.reason})` : '';
      lines.push(`  ${change.key}: ${JSON.stringify(change.baseline)} → ${JSON.stringify(change.current)}${why}`);
    }
  } else {
    lines.push('No change in the environment fingerprint (Python, torch, CUDA, cuDNN, NCCL, GPU, loader, precision and compile settings).');
  }
  return lines;
}
