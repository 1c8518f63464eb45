import { LIMITERS, type Level, type Limiter } from '../model/verdict.js';
import type { Cause, Verdict } from '../model/verdict.js';

/**
 * The numbers of stepscope_rank_verdict_code and stepscope_job_verdict_code. Dashboards map them
 * back to names (deploy/grafana/stepscope.json), so a verdict's number never changes.
 */
export const VERDICT_CODES = {
  'compute-bound': 0,
  'input-bound': 1,
  'transfer-bound': 2,
  'host-bound': 3,
  throttled: 4,
  'warming-up': 5,
  idle: 6,
  'communication-bound': 7,
  'memory-bound': 8,
  stalled: 9,
  hung: 10,
  gone: 11,
} as const satisfies Record<Verdict, number>;

/** Every cause each verdict can have (null: none), so that the verdict state set keeps the same series. */
export const VERDICT_CAUSES = {
  'compute-bound': [null, 'launch-bound', 'memory-bandwidth', 'tensor-cores-idle', 'gpu-shared', 'recompiles'],
  'input-bound': ['cgroup-throttled', 'memory-pressure', 'io-wait', 'contention', 'cpu-saturated', 'workers-starve-step', 'few-workers', 'unknown'],
  'transfer-bound': [null],
  'host-bound': ['evaluation', 'outside-phases', 'gpu-idle-in-compute', 'recompiles'],
  throttled: ['thermal', 'power', 'hw-slowdown', 'clocks-low'],
  'communication-bound': ['slow-rank', 'slow-collective'],
  'memory-bound': ['fragmentation', 'near-capacity', 'allocator-thrash'],
  'warming-up': [null],
  idle: [null],
  stalled: [null, 'collective', 'data-loader', 'code', 'busy', 'unresponsive'],
  hung: [null, 'collective', 'data-loader', 'code', 'unresponsive', 'rank-gone'],
  gone: ['connection-closed', 'no-answer', 'not-reconnected'],
} as const satisfies Record<Verdict, readonly Cause[]>;

// Fails to compile when src/analysis/verdict.ts gains a cause that is not listed above.
type Unlisted = Exclude<NonNullable<Cause>, (typeof VERDICT_CAUSES)[Verdict][number]>;
const everyCauseListed: [Unlisted] extends [never] ? true : Unlisted = true;
void everyCauseListed;

export interface VerdictSeries {
  verdict: Verdict;
  cause: string;
  value: 0 | 1;
}

/**
 * The verdict as a state set: one series per verdict and cause, 1 for the one in force and 0 for
 * the others. A pair outside the list (a verdict kept through a window without steps has no cause)
 * still gets its series while it holds.
 */
export function verdictStateSet(current: { verdict: Verdict; cause: Cause } | null): VerdictSeries[] {
  const series: VerdictSeries[] = [];
  let listed = false;
  for (const [verdict, causes] of Object.entries(VERDICT_CAUSES) as [Verdict, readonly Cause[]][]) {
    for (const cause of causes) {
      const on = current !== null && current.verdict === verdict && current.cause === cause;
      listed ||= on;
      series.push({ verdict, cause: cause ?? '', value: on ? 1 : 0 });
    }
  }
  if (current && !listed) series.push({ verdict: current.verdict, cause: current.cause ?? '', value: 1 });
  return series;
}

/** The number of a limiter's level in stepscope_*_limiter_level: 0 under 5% of step time (not listed). */
export const LEVEL_CODES = { moderate: 1, high: 2 } as const satisfies Record<Level, number>;

/** Every limiter with its level's code: the listed ones' levels, 0 for the others. */
export function limiterLevels(listed: ReadonlyArray<{ limiter: Limiter; level: Level }>): Array<{ limiter: Limiter; level: number }> {
  return LIMITERS.map((limiter) => {
    const found = listed.find((l) => l.limiter === limiter);
    return { limiter, level: found ? LEVEL_CODES[found.level] : 0 };
  });
}
