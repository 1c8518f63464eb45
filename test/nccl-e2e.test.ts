import { describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { runWithSidecar } from './support/torch-runs.js';

/**
 * Communication on NCCL, where the CPU never sees a collective complete: two ranks on simulated GPUs
 * (test/fixtures/nccl_sim_job.py over python-hook/tests/simnccl.py: ProcessGroupNCCL's streams and
 * CUDA-aware futures, DDP's reducer), timed by the real hook through CUDA events only, against a real
 * sidecar. A slow rank is named; a slow link is told from it by every rank waiting alike, at the
 * link's bandwidth. What only a GPU can confirm (that real NCCL and real CUDA events behave as
 * simulated) is scripts/gpu-check.sh's.
 */

const python = findPython();
const TIMEOUT = 90_000;

async function job(scenario: string) {
  const { summary, runs } = await runWithSidecar((url) =>
    Promise.all([runPython(python.python!, fixture('nccl_sim_job.py'), ['--scenario', scenario, '--steps', '60'], { STEPSCOPE_URL: url, STEPSCOPE_JOB: `nccl-${scenario}` }, TIMEOUT)]),
  );
  const [run] = runs;
  expect(run!.result.ranks.map((r: any) => [r.rank, r.exitcode, r.steps, r.closed, r.watched, r.host_syncs])).toEqual([
    [0, 0, 60, true, true, 0],
    [1, 0, 60, true, true, 0],
  ]);
  expect(summary).toMatchObject({ world_size: 2, steps: 120 });
  // GPU-side times came through the explicit API's CUDA events on the same simulated devices.
  expect(summary.gpu_breakdown).not.toBeNull();
  return summary;
}

describe.skipIf(!python.python)(`collectives on NCCL (simulated GPUs)${python.python ? '' : ` (skipped: ${python.why})`}`, () => {
  it.concurrent("a slow rank: the other's GPU waits for it in DDP's all-reduce, communication-bound, rank 1 named", async () => {
    const summary = await job('slow-rank');
    const [fast, slow] = summary.ranks;
    expect([fast.verdict, fast.cause], summary.headline).toEqual(['communication-bound', 'slow-rank']);
    expect(slow.verdict).toBe('compute-bound');
    if (summary.cause === 'slow-rank') expect(summary.evidence.rule).toMatch(/the collectives wait for rank 1$/);
  }, TIMEOUT);

  it.concurrent('a slow link: every rank waits alike, slow-collective, at the link bandwidth', async () => {
    const summary = await job('slow-link');
    for (const rank of summary.ranks) expect([rank.verdict, rank.cause], summary.headline).toEqual(['communication-bound', 'slow-collective']);
    // 40 MB of buckets a step, all-reduced whole on two ranks, over a 1 GB/s link: the bus bandwidth
    // measured while in collectives is the link's.
    const gbps = Number(/(\d+\.\d+) GB\/s while in collectives/.exec(summary.evidence.rule)?.[1]);
    expect(gbps).toBeGreaterThan(0.9);
    expect(gbps).toBeLessThan(1.1);
  }, TIMEOUT);
});
