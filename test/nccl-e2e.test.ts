import { describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { ALL_E2E, expectScenario, RECORDING, recordings, recordScenario, slugOf, type ScenarioMeta } from './support/scenarios.js';
import { runWithSidecar } from './support/torch-runs.js';

/**
 * Communication on NCCL, where the CPU never sees a collective complete: two ranks on simulated GPUs
 * (test/fixtures/nccl_sim_job.py over python-hook/tests/simnccl.py: ProcessGroupNCCL's streams and
 * CUDA-aware futures, DDP's reducer), timed by the real hook through CUDA events only, against a real
 * sidecar. A slow rank is named; a slow link is told from it by every rank waiting alike, at the
 * link's bandwidth. What only a GPU can confirm (that real NCCL and real CUDA events behave as
 * simulated) is scripts/gpu-check.sh's.
 *
 * The live runs take seconds each and their timings are the machine's (a loaded one stretches the
 * simulated link's sleeps), so they run in .ci/run's framework stage (STEPSCOPE_TEST_FRAMEWORKS=1 or
 * STEPSCOPE_E2E=all); `npm test` checks the same on their recordings (test/fixtures/journals, made
 * with STEPSCOPE_RECORD=1), which test/verdicts-replay.test.ts also replays to the same summary.
 */

const python = findPython();
const LIVE = ALL_E2E || !!process.env.STEPSCOPE_TEST_FRAMEWORKS;
const TIMEOUT = 90_000;
const STEPS = 60;

const SCENARIOS = {
  'slow-rank': "a slow rank: the other's GPU waits for it in DDP's all-reduce, communication-bound, rank 1 named",
  'slow-link': 'a slow link: every rank waits alike, slow-collective, at the link bandwidth',
} as const;
type Scenario = keyof typeof SCENARIOS;

/** What the summary of each scenario must say, live or recorded. */
function check(scenario: Scenario, summary: any) {
  expect(summary).toMatchObject({ world_size: 2, steps: 2 * STEPS });
  // GPU-side times came through the explicit API's CUDA events on the same simulated devices.
  expect(summary.gpu_breakdown).not.toBeNull();
  if (scenario === 'slow-rank') {
    const [fast, slow] = summary.ranks;
    expect([fast.verdict, fast.cause], summary.headline).toEqual(['communication-bound', 'slow-rank']);
    expect(slow.verdict).toBe('compute-bound');
    if (summary.cause === 'slow-rank') expect(summary.evidence.rule).toMatch(/the collectives wait for rank 1$/);
  } else {
    for (const rank of summary.ranks) expect([rank.verdict, rank.cause], summary.headline).toEqual(['communication-bound', 'slow-collective']);
    // 40 MB of buckets a step, all-reduced whole on two ranks, over a 1 GB/s link: the bus bandwidth
    // measured while in collectives is the link's (over the whole step it would read about 0.7).
    const gbps = Number(/(\d+\.\d+) GB\/s while in collectives/.exec(summary.evidence.rule)?.[1]);
    expect(gbps).toBeGreaterThan(0.9);
    expect(gbps).toBeLessThan(1.1);
  }
}

function meta(scenario: Scenario, summary: any): ScenarioMeta {
  return {
    format: 'stepscope.scenario/v1',
    title: `NCCL ${SCENARIOS[scenario]}`,
    suite: 'collectives on NCCL (simulated GPUs)',
    test: 'test/nccl-e2e.test.ts',
    job: `nccl-${scenario}`,
    worldSize: 2,
    steps: 2 * STEPS,
    script: { loop: ['--scenario', scenario, '--steps', String(STEPS)], gpu: { simulated: 'python-hook/tests/simnccl.py' } },
    expect: {
      verdict: summary.verdict,
      cause: summary.cause,
      timeline: summary.timeline.filter((s: any) => s.verdict !== 'warming-up' && s.verdict !== 'idle').map((s: any) => [s.verdict, s.cause]),
      ranks: summary.ranks.map((r: any) => ({ rank: r.rank, verdict: r.verdict, cause: r.cause })),
    },
    recordedAt: new Date().toISOString(),
  };
}

async function live(scenario: Scenario) {
  const { summary, runs } = await runWithSidecar(
    (url) => Promise.all([runPython(python.python!, fixture('nccl_sim_job.py'), ['--scenario', scenario, '--steps', String(STEPS)], { STEPSCOPE_URL: url, STEPSCOPE_JOB: `nccl-${scenario}` }, TIMEOUT)]),
    [],
    (out, summary) => {
      if (RECORDING) {
        check(scenario, summary);
        recordScenario(out, meta(scenario, summary));
      }
    },
  );
  const [run] = runs;
  expect(run!.result.ranks.map((r: any) => [r.rank, r.exitcode, r.steps, r.closed, r.watched, r.host_syncs])).toEqual([
    [0, 0, STEPS, true, true, 0],
    [1, 0, STEPS, true, true, 0],
  ]);
  check(scenario, summary);
}

describe.skipIf(!python.python || !LIVE)(`collectives on NCCL (simulated GPUs), live${python.python ? '' : ` (skipped: ${python.why})`}`, () => {
  for (const scenario of Object.keys(SCENARIOS) as Scenario[]) it.concurrent(SCENARIOS[scenario], () => live(scenario), TIMEOUT);
});

describe('collectives on NCCL (simulated GPUs), recorded', () => {
  for (const scenario of Object.keys(SCENARIOS) as Scenario[]) {
    it(SCENARIOS[scenario], () => {
      const recording = recordings().find((r) => r.slug === slugOf(`NCCL ${SCENARIOS[scenario]}`));
      expect(recording, 'the recording (STEPSCOPE_RECORD=1 npx vitest run test/nccl-e2e.test.ts)').toBeDefined();
      check(scenario, recording!.summary);
      expectScenario(recording!.summary, recording!.meta);
    });
  }
});
