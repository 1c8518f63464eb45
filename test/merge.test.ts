import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mergeSummaries } from '../src/analysis/merge-summaries.js';
import { readPodSummaries } from '../src/merge-command.js';
import { writeSummaryFiles } from '../src/outputs/summary-files.js';
import { renderSummary } from '../src/outputs/summary-render.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { parseInput } from '../src/protocol/parse.js';
import { replayAsPods } from './support/pod-replay.js';
import { unpackJournal } from './support/scenarios.js';
import { CLI, ROOT } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * `stepscope merge`: the recorded two-rank job whose rank 1 has a slow loader (test/straggler-e2e),
 * replayed as two pods whose sidecars each saw one rank, merged back into one summary, against the
 * one sidecar that saw both. Neither pod alone can name the straggler.
 */

const RECORDING = unpackJournal({ fixture: path.join(ROOT, 'test', 'fixtures', 'journals', 'names-rank-1-whose-loader-is-slow-though-both-ranks-steps-take') });
const tempDir = useTempDirs('stepscope-merge-');

describe('stepscope merge', () => {
  it('names the straggler no pod could see, with the job verdict and excess of the sidecar that saw every rank', async () => {
    const [[whole], pods] = await Promise.all([replayAsPods(RECORDING, [[0, 1]]), replayAsPods(RECORDING, [[0], [1]])]);
    expect(whole!.straggler).toMatchObject({ rank: 1, reason: 'data' });
    // Alone, neither pod has a straggler to name.
    expect(pods.map((p) => p.straggler)).toEqual([null, null]);
    const dirs = ['pod-a', 'pod-b'].map((name) => path.join(tempDir(), name));
    await Promise.all(pods.map((summary, i) => writeSummaryFiles(dirs[i]!, summary)));
    const { parts, missing } = await readPodSummaries(dirs, 'ddp-slow-loader');
    const merged = mergeSummaries(parts, missing);
    // A pod given twice (a second path to it, and its summary file by name) counts once.
    const twice = await readPodSummaries([...dirs, `${dirs[0]}/`, path.join(dirs[1]!, 'summary.json')], 'ddp-slow-loader');
    expect(mergeSummaries(twice.parts, twice.missing)).toEqual(merged);

    expect(merged.straggler).toMatchObject({ rank: whole!.straggler!.rank, reason: whole!.straggler!.reason });
    expect(Math.abs(merged.straggler!.excess_ms - whole!.straggler!.excess_ms) / whole!.straggler!.excess_ms).toBeLessThan(0.05);
    expect([merged.verdict, merged.cause]).toEqual([whole!.verdict, whole!.cause]);
    expect(merged.ranks.map((r) => [r.rank, r.verdict, r.straggler])).toEqual(whole!.ranks.map((r) => [r.rank, r.verdict, r.straggler]));
    expect(merged).toMatchObject({ job: whole!.job, world_size: 2, steps: whole!.steps });
    expect(merged.step_ms.mean!).toBeCloseTo(whole!.step_ms.mean!, 0);
    expect(parseInput(SummarySchema, merged, 'summary')).toEqual(merged);
    expect(merged.job_wide).toEqual({ from: 'summaries', pods: [{ pod: 'pod-a', ranks: [0] }, { pod: 'pod-b', ranks: [1] }], missing_ranks: [], missing_pods: [] });
    // The charts' series: the pods' steps add up to the one sidecar's, each rank's own line kept.
    const total = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(total(merged.series!.steps)).toBe(total(whole!.series!.steps));
    expect(merged.series!.ranks.map((r) => r.rank)).toEqual([0, 1]);
    expect(merged.series!.gpus.length).toBe(whole!.series!.gpus.length);
    // GPU time lost adds up over the pods to what the one sidecar counted.
    expect(merged.waste!.lost_gpu_seconds).toBeCloseTo(whole!.waste!.lost_gpu_seconds, -1);
    const text = renderSummary(merged);
    expect(text).toContain('The job across 2 pods, from their summaries (pod-a: rank 0; pod-b: rank 1). None missing.');
    expect(text).toContain('Straggler: rank 1 waits longer for data');

    // The command: the job's HTML report, by the renderer a sidecar's report gets.
    const html = path.join(tempDir(), 'job.html');
    const run = spawnSync(process.execPath, [CLI, 'merge', ...dirs, '--job', 'ddp-slow-loader', '--html', '-o', html], { encoding: 'utf8', timeout: 30_000 });
    expect(run.status, run.stderr).toBe(0);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain('id="job-wide"');
    expect(page).toContain('rank 1 waits longer for data');
    const json = spawnSync(process.execPath, [CLI, 'merge', ...dirs, '--format', 'json'], { encoding: 'utf8', timeout: 30_000 });
    expect(JSON.parse(json.stdout)).toMatchObject({ job: 'ddp-slow-loader', straggler: { rank: 1 }, job_wide: { from: 'summaries' } });
  });

  it('says which pods and ranks are missing', async () => {
    const pods = await replayAsPods(RECORDING, [[0], [1]]);
    const root = tempDir();
    const [a, empty] = [path.join(root, 'pod-a'), path.join(root, 'pod-c')];
    await writeSummaryFiles(a, pods[0]!);
    mkdirSync(empty);
    const { parts, missing } = await readPodSummaries([a, empty], 'ddp-slow-loader');
    const merged = mergeSummaries(parts, missing);
    expect(merged.job_wide).toMatchObject({ missing_ranks: [1], missing_pods: [{ pod: 'pod-c', why: 'no summary of job ddp-slow-loader' }] });
    expect(renderSummary(merged)).toContain('Missing: rank 1 of 2; pod pod-c (no summary of job ddp-slow-loader).');
    await expect(readPodSummaries([a], 'another-job').then(({ parts }) => mergeSummaries(parts))).rejects.toThrow('no summary of the job to merge');
  });
});
