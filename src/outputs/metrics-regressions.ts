import type { Registry } from 'prom-client';
import type { EngineSnapshot } from '../engine/snapshot.js';
import { gaugeFamily } from './metrics-family.js';

/**
 * Per running job compared with a reference (its --baseline, or the median of its recent runs):
 * how much slower per sample it is, and whether that is a regression (past --regression-threshold
 * and held past warm-up). As the engine compares them (src/engine/runs.ts).
 */
export function registerRegressionFamilies(registry: Registry, snapshot: () => Pick<EngineSnapshot, 'regressions'>): void {
  const regressions = () => snapshot().regressions;
  gaugeFamily(registry, {
    name: 'stepscope_job_slowdown_ratio',
    help: "Time per sample against the job's reference (its --baseline, or the median of its recent comparable runs), as a ratio: 0.14 is 14% slower, -0.05 5% faster. Absent without a reference.",
    labelNames: ['training_job'],
    *samples() {
      for (const r of regressions()) yield [{ training_job: r.job }, r.change_pct === null ? null : r.change_pct / 100];
    },
  });
  gaugeFamily(registry, {
    name: 'stepscope_job_regression',
    help: 'Whether the job is in a regression (1) or not (0): slower per sample than its reference by --regression-threshold or more, held past warm-up. Absent without a reference.',
    labelNames: ['training_job'],
    *samples() {
      for (const r of regressions()) yield [{ training_job: r.job }, Number(r.regressed)];
    },
  });
}
