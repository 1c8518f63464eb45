import { LIMITER_OF, type Level, type Limiter, type Verdict } from './verdict.js';

/**
 * What limiters cost and what fixing a cause would buy, in words: one wording for the summary, the
 * HTML report and the viewer. Structural inputs (the state's and the summary's LimiterCost and
 * FixEstimate), so that the model stays a leaf.
 */

/** A limiter as what costs the time ("loading costs 18%"). */
export const LIMITER_WORDS: Record<Limiter, string> = {
  input: 'loading',
  transfer: 'copies to the GPU',
  host: 'work outside the phases',
  communication: 'waiting in collectives',
  throttle: 'low GPU clocks',
};

const pct = (x: number) => `${Math.round(x * 100)}%`;

/** "loading 18% (moderate)". */
export function limiterText(cost: { limiter: Limiter; share: number; level: Level }): string {
  return `${LIMITER_WORDS[cost.limiter]} ${pct(cost.share)} (${cost.level})`;
}

/** "contention: 59% of step time back: …", or "io-wait: up to 75% of step time back, unknown: …; …". */
export function fixText(fix: { cause: string | null; limiter: Limiter; gain: number | null; upto: number; basis: string; unknown: string | null }): string {
  const name = fix.cause ?? LIMITER_WORDS[fix.limiter];
  const bought = fix.gain === null ? `up to ${pct(fix.upto)} of step time back (unknown: ${fix.unknown})` : `${pct(fix.gain)} of step time back`;
  return `${name}: ${bought}${fix.basis ? `; ${fix.basis}` : ''}`;
}

/** "Also costing time: loading 18% (moderate)." — the limiters beside the verdict's own; null where there are none. */
export function alsoCosting(limiters: ReadonlyArray<{ limiter: Limiter; share: number; level: Level }>, verdict: Verdict): string | null {
  const others = limiters.filter((l) => l.limiter !== LIMITER_OF[verdict]);
  return others.length ? `Also costing time: ${others.map(limiterText).join(', ')}.` : null;
}
