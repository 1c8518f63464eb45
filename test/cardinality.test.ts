import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { GOLDEN } from './support/promql.js';
import { ROOT } from './support/sidecar.js';

/**
 * The cardinality budget docs/metrics.md states, held by the golden exposition (a real sidecar's
 * /metrics, test/metrics-sidecar.test.ts): series per rank, per GPU, per job and per sidecar. A new
 * family that breaks it fails here, and the budget (and the 1,024-rank figures) must be revisited.
 */

const BUDGET = { rank: 90, gpu: 30, job: 60, sidecar: 100 };

describe('the cardinality budget', () => {
  it('holds for the golden exposition, and docs/metrics.md states it', () => {
    const series = GOLDEN.split('\n').filter((line) => line && !line.startsWith('#'));
    const perRank = (rank: string) => series.filter((line) => line.includes(`training_job="golden"`) && line.includes(`rank="${rank}"`)).length;
    const perGpu = series.filter((line) => /\bgpu="0"/.test(line) && !line.includes('rank=')).length;
    const perJob = series.filter((line) => line.includes('training_job="golden"') && !line.includes('rank=')).length;
    const perSidecar = series.filter((line) => !line.includes('training_job=') && !/\bgpu="/.test(line)).length;
    expect(Math.max(perRank('0'), perRank('1'))).toBeLessThanOrEqual(BUDGET.rank);
    expect(perGpu).toBeLessThanOrEqual(BUDGET.gpu);
    expect(perJob).toBeLessThanOrEqual(BUDGET.job);
    expect(perSidecar).toBeLessThanOrEqual(BUDGET.sidecar);
    const docs = readFileSync(path.join(ROOT, 'docs', 'metrics.md'), 'utf8');
    for (const [what, n] of Object.entries(BUDGET)) expect(docs).toContain(`| ${what} | ${n} |`);
  });
});
