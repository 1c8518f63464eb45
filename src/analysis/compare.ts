import type { Summary } from './summary.js';

/** "Is it really slower, and where?": a run's summary against a baseline's. Pure. */

const PHASES = ['data', 'h2d', 'compute', 'other'] as const;
type Phase = (typeof PHASES)[number];

export interface EnvChange {
  key: string;
  baseline: unknown;
  current: unknown;
}

export interface Comparison {
  step_ms: { baseline: number | null; current: number | null };
  /** Change of the mean step time, in percent of the baseline's. */
  change_pct: number | null;
  /** ms per step of each phase, current minus baseline. */
  delta_ms: Record<Phase, number | null>;
  phase_ms: { baseline: Record<Phase, number | null>; current: Record<Phase, number | null> };
  /** The phase that grew most. */
  grew_most: Phase | null;
  gpu: {
    util_mean: { baseline: number | null; current: number | null };
    sm_clock_frac_mean: { baseline: number | null; current: number | null };
  };
  verdict: { baseline: string; current: string; baseline_cause: string | null; current_cause: string | null };
  env_changes: EnvChange[];
  text: string;
}

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

function phaseMs(summary: Summary): Record<Phase, number | null> {
  const mean = summary.step_ms.mean;
  return Object.fromEntries(PHASES.map((phase) => [phase, mean === null ? null : round(summary.breakdown[phase] * mean, 3)])) as Record<Phase, number | null>;
}

function meanOver(summary: Summary, pick: (gpu: Summary['gpus'][number]) => number | null): number | null {
  const values = summary.gpus.map(pick).filter((v): v is number => v !== null);
  return values.length ? round(values.reduce((a, b) => a + b, 0) / values.length, 4) : null;
}

/** Env keys flattened one level (loader.num_workers), the ones that say what ran and how. */
function flatEnv(env: Record<string, unknown>): Map<string, unknown> {
  const flat = new Map<string, unknown>();
  for (const [key, value] of Object.entries(env)) {
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      for (const [inner, v] of Object.entries(value as Record<string, unknown>)) flat.set(`${key}.${inner}`, v);
    } else {
      flat.set(key, value);
    }
  }
  return flat;
}

/** Keys that differ between any two runs and say nothing about the environment. */
const NOISE = new Set(['pid', 'host', 'session', 'hook']);

export function envChanges(baseline: Record<string, unknown>, current: Record<string, unknown>): EnvChange[] {
  const a = flatEnv(baseline);
  const b = flatEnv(current);
  const keys = [...new Set([...a.keys(), ...b.keys()])].filter((key) => !NOISE.has(key)).sort();
  return keys
    .filter((key) => JSON.stringify(a.get(key) ?? null) !== JSON.stringify(b.get(key) ?? null))
    .map((key) => ({ key, baseline: a.get(key) ?? null, current: b.get(key) ?? null }));
}

export function compare(baseline: Summary, current: Summary): Comparison {
  const before = phaseMs(baseline);
  const after = phaseMs(current);
  const delta = Object.fromEntries(
    PHASES.map((phase) => [phase, before[phase] === null || after[phase] === null ? null : round(after[phase]! - before[phase]!, 3)]),
  ) as Record<Phase, number | null>;
  const grown = PHASES.filter((phase) => delta[phase] !== null).sort((x, y) => delta[y]! - delta[x]!);
  const grewMost = grown.length && delta[grown[0]!]! > 0 ? grown[0]! : null;
  const b = baseline.step_ms.mean;
  const c = current.step_ms.mean;
  const changePct = b && c !== null ? round(((c - b) / b) * 100, 1) : null;
  const comparison: Omit<Comparison, 'text'> = {
    step_ms: { baseline: b, current: c },
    change_pct: changePct,
    delta_ms: delta,
    phase_ms: { baseline: before, current: after },
    grew_most: grewMost,
    gpu: {
      util_mean: { baseline: meanOver(baseline, (g) => g.util_mean), current: meanOver(current, (g) => g.util_mean) },
      sm_clock_frac_mean: { baseline: meanOver(baseline, (g) => g.sm_clock_frac_mean), current: meanOver(current, (g) => g.sm_clock_frac_mean) },
    },
    verdict: { baseline: baseline.verdict, current: current.verdict, baseline_cause: baseline.cause, current_cause: current.cause },
    env_changes: envChanges(baseline.env, current.env),
  };
  return { ...comparison, text: describeComparison(comparison) };
}

const ms = (x: number | null) => (x === null ? 'n/a' : `${x.toFixed(1)} ms`);
const signed = (x: number | null) => (x === null ? 'n/a' : `${x >= 0 ? '+' : ''}${x.toFixed(1)} ms`);
const pct = (x: number | null) => (x === null ? 'n/a' : `${Math.round(x * 100)}%`);

function describeComparison(c: Omit<Comparison, 'text'>): string {
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
    lines.push(`GPU utilization ${util.baseline ?? 'n/a'}% → ${util.current ?? 'n/a'}%; SM clock ${pct(clock.baseline)} → ${pct(clock.current)} of its maximum.`);
  }
  if (c.env_changes.length) {
    lines.push('What changed in the environment:');
    for (const change of c.env_changes) lines.push(`  ${change.key}: ${JSON.stringify(change.baseline)} → ${JSON.stringify(change.current)}`);
  } else {
    lines.push('No change in the environment fingerprint (Python, torch, CUDA, cuDNN, GPU, loader settings).');
  }
  return lines.join('\n');
}
