import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { startFakeProc, type FakeProc, type HostLoad } from './support/fake-proc.js';
import { findPython } from './support/python.js';
import { fixture, runPython, type PythonRun } from './support/run-python.js';
import {
  ALL_E2E,
  expectScenario,
  phaseArgs,
  RECORDING,
  recordScenario,
  scriptedShares,
  type Phases,
  type ScenarioMeta,
} from './support/scenarios.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * Every verdict and cause, reached end to end: the real sidecar, the real hook in a loop whose
 * phase times are scripted (test/fixtures/verdict_loop.py), a stand-in nvidia-smi on PATH for the
 * GPU and a stand-in procfs for the host, so that nothing depends on what else this machine runs.
 * Each test reads the summary.json the sidecar writes when the job ends.
 *
 * These runs take seconds of wall clock each and depend on the machine keeping up, so `npm test`
 * runs none of them live: every verdict is proven by test/verdicts-replay.test.ts, which replays the
 * journals these tests recorded (test/fixtures/journals). STEPSCOPE_E2E=all runs them all (.ci/run's
 * framework stage runs the cgroup one, under a real CFS quota); STEPSCOPE_RECORD=1 (npm run
 * record:scenarios) runs them all and records each passing one again.
 */

const plain = findPython();
const torch = findPython(['torch']);
const LOOP = fixture('verdict_loop.py');
const FILE = 'test/verdicts-e2e.test.ts';

type Defer = (cleanup: () => unknown) => void;

/**
 * What a test started, undone when it finishes, pass or fail, last started first: processes killed,
 * stand-ins stopped, directories and cgroups removed. Per test, so that concurrent tests keep theirs.
 */
function deferrer({ onTestFinished }: TestContext): Defer {
  const cleanups: Array<() => unknown> = [];
  onTestFinished(async () => {
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch {
        // keep cleaning up
      }
    }
  });
  return (cleanup) => cleanups.push(cleanup);
}

/**
 * At most `n` jobs at once in the concurrent suites: each is a sidecar, a stand-in nvidia-smi and a
 * Python loop, and this machine may have two cores shared with other test files.
 */
function limit(n: number) {
  let active = 0;
  const waiting: Array<() => void> = [];
  return async <T>(work: () => Promise<T>): Promise<T> => {
    if (active < n) active++;
    else await new Promise<void>((resolve) => waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = waiting.shift();
      if (next) next();
      else active--;
    }
  };
}
const slot = limit(2);

/** Kills the process whose pid a fixture wrote to `pidFile`, if it is still there. */
function killByPidFile(pidFile: string) {
  if (!existsSync(pidFile)) return;
  try {
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // already gone
  }
}

interface JobOptions {
  name: string;
  defer: Defer;
  /** Stand-in nvidia-smi scenario (see fake-nvidia-smi.mjs); one default H100 when omitted. */
  gpu?: object;
  host?: HostLoad;
  /** Arguments of verdict_loop.py. */
  loop: string[];
  python?: string;
  /** Runs the loop through another command, e.g. a shell that first moves itself into a cgroup. */
  wrap?: (python: string, script: string, args: string[]) => { command: string; args: string[] };
  sidecarArgs?: string[];
  /** Runs alongside the loop, with the sidecar and the stand-in procfs. */
  during?: (job: { sidecar: RunningSidecar; proc: FakeProc }) => Promise<unknown>;
}

interface JobResult {
  summary: any;
  run: PythonRun;
  during: unknown;
  /** The sidecar's --out folder (journal, summaries), removed when the test finishes. */
  out: string;
}

/**
 * One job from start to summary: stand-in procfs and nvidia-smi, the sidecar with --exit-on-end,
 * the loop through the hook; resolves once the sidecar has written summary.json and exited.
 */
async function runJob(options: JobOptions): Promise<JobResult> {
  const { defer } = options;
  const proc = startFakeProc(options.host ?? { cpuPct: 20 });
  defer(() => proc.stop());
  const out = tempDir();
  const gpu = fakeNvidiaSmiEnv(options.gpu ?? { gpus: 1 });
  defer(() => rmSync(out, { recursive: true, force: true }));
  defer(() => rmSync(gpu.dir, { recursive: true, force: true }));
  const sidecar = await startSidecar(
    ['--gpu-source', 'nvidia-smi', '--proc-root', proc.root, '--out', out, '--exit-on-end', '--end-grace', '1', ...(options.sidecarArgs ?? ['--hold', '1'])],
    gpu.env,
  );
  defer(() => sidecar.stop('SIGKILL'));
  const pidFile = path.join(out, 'loop.pid');
  defer(() => killByPidFile(pidFile));

  const python = options.python ?? plain.python!;
  const args = [...options.loop, '--pid-file', pidFile];
  const env = { STEPSCOPE_URL: sidecar.ingestUrl, STEPSCOPE_JOB: options.name, RANK: '0', WORLD_SIZE: '1', LOCAL_RANK: '0' };
  const wrapped = options.wrap?.(python, LOOP, args);
  const [run, during] = await Promise.all([
    wrapped ? runPython(wrapped.command, wrapped.args[0]!, wrapped.args.slice(1), env, 90_000) : runPython(python, LOOP, args, env, 90_000),
    options.during?.({ sidecar, proc }),
  ]);
  expect(run.code, run.stderr).toBe(0);
  expect(run.result?.closed, run.stderr).toBe(true);
  const exit = await Promise.race([sidecar.exited, new Promise<null>((resolve) => setTimeout(() => resolve(null), 20_000))]);
  expect(exit, 'the sidecar exits once the job has ended (--exit-on-end)').toEqual({ code: 0, signal: null });
  const summary = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
  expect(summary).toMatchObject({ schema: 'stepscope.summary/v1', job: options.name, world_size: 1, steps: run.result.steps });
  return { summary, run, during, out };
}

/** The scenario a test ran, with what it expects of the summary (see test/support/scenarios.ts). */
function scenario(context: TestContext, fields: Omit<ScenarioMeta, 'format' | 'title' | 'suite' | 'test' | 'worldSize' | 'recordedAt'> & { worldSize?: number }): ScenarioMeta {
  return {
    format: 'stepscope.scenario/v1',
    title: context.task.name,
    suite: context.task.suite?.name ?? '',
    test: FILE,
    worldSize: 1,
    ...fields,
    recordedAt: new Date().toISOString(),
  };
}

/**
 * Checks the summary against the scenario's expectations, the same checks the replay test makes on
 * the recording; with STEPSCOPE_RECORD set, records the job's journal and summary (passing runs only:
 * not after a failed expect.soft either).
 */
function expectAndRecord(context: TestContext, summary: any, out: string, meta: ScenarioMeta) {
  expectScenario(summary, meta);
  if (RECORDING && !context.task.result?.errors?.length) console.info(`recorded ${path.relative(process.cwd(), recordScenario(out, meta))}`);
}

const SECONDS = 6;

interface SteadyCase {
  title: string;
  phases: Phases;
  verdict: string;
  cause: string | null;
  /** The recommendation that must come first. */
  first: string;
  host?: HostLoad;
  gpu?: Record<string, number | string>;
  /** More arguments of the loop. */
  extra?: string[];
}

// Margins well clear of the thresholds in src/analysis/verdict.ts: a limiter at ~75% of the step
// where the rule fires at 20-25%; clocks at 50-66% of their maximum where the rules start at 70-85%.
const STEADY: SteadyCase[] = [
  { title: 'compute-bound: a healthy loop', phases: { data: 1, h2d: 1, compute: 30 }, verdict: 'compute-bound', cause: null, first: 'faster-compute' },
  // MFU (test/mfu.test.ts replays it): FLOPs given by scope.set_flops_per_step, bf16 from real CPU autocast, the stand-in's H100.
  {
    title: 'compute-bound with a known FLOP count: 1e13 FLOPs a step under bf16 autocast on the stand-in H100',
    phases: { data: 1, h2d: 1, compute: 30 },
    verdict: 'compute-bound',
    cause: null,
    // Real torch is imported, at fp32 matmul precision "highest": TF32 is advised first.
    first: 'allow-tf32',
    // 12 s: the hook sends its stack (with autocast's dtype) every 10 s, so MFU is live for the last seconds.
    extra: ['--flops', '1e13', '--amp', 'bf16', '--seconds', '12'],
  },
  {
    title: 'input-bound/few-workers: data loaded in the training process',
    phases: { data: 30, compute: 10 },
    verdict: 'input-bound',
    cause: 'few-workers',
    first: 'raise-num-workers',
  },
  // The loop sleeps for its data: the host's 95% is someone else's, which is contention, not a CPU too small for the job.
  { title: 'input-bound/contention: the host CPU at 95%, none of it this job\'s', phases: { data: 30, compute: 10 }, host: { cpuPct: 95 }, verdict: 'input-bound', cause: 'contention', first: 'find-neighbour' },
  { title: 'input-bound/io-wait: the host 30% in iowait', phases: { data: 30, compute: 10 }, host: { cpuPct: 15, iowaitPct: 30 }, verdict: 'input-bound', cause: 'io-wait', first: 'faster-storage' },
  { title: 'transfer-bound: slow host-to-device copies', phases: { data: 1, h2d: 30, compute: 10 }, verdict: 'transfer-bound', cause: null, first: 'pin-memory' },
  { title: 'host-bound/outside-phases: logging between steps', phases: { data: 1, compute: 10, other: 30 }, verdict: 'host-bound', cause: 'outside-phases', first: 'reduce-logging' },
  {
    title: 'host-bound/gpu-idle-in-compute: compute with the GPU 20% busy',
    phases: { data: 1, compute: 30 },
    gpu: { 'utilization.gpu': 20 },
    verdict: 'host-bound',
    cause: 'gpu-idle-in-compute',
    first: 'launch-overhead',
  },
  {
    title: 'throttled/thermal: SM clock 1100 of 1980 MHz, HwThermalSlowdown',
    phases: { data: 1, compute: 30 },
    gpu: { 'clocks.sm': 1100, 'clocks_event_reasons.active': 0x40, 'utilization.gpu': 98, 'temperature.gpu': 91 },
    verdict: 'throttled',
    cause: 'thermal',
    first: 'check-cooling',
  },
  {
    title: 'throttled/power: SM clock 1300 of 1980 MHz, SwPowerCap',
    phases: { data: 1, compute: 30 },
    gpu: { 'clocks.sm': 1300, 'clocks_event_reasons.active': 0x4, 'utilization.gpu': 98, 'power.draw': 699.5 },
    verdict: 'throttled',
    cause: 'power',
    first: 'check-power-limit',
  },
  {
    title: 'throttled/hw-slowdown: SM clock 1300 of 1980 MHz, HwSlowdown',
    phases: { data: 1, compute: 30 },
    gpu: { 'clocks.sm': 1300, 'clocks_event_reasons.active': 0x8, 'utilization.gpu': 98 },
    verdict: 'throttled',
    cause: 'hw-slowdown',
    first: 'report-node',
  },
  {
    title: 'throttled/clocks-low: SM clock at 50% with no reason, 98% busy',
    phases: { data: 1, compute: 30 },
    gpu: { 'clocks.sm': 990, 'clocks_event_reasons.active': 0, 'utilization.gpu': 98 },
    verdict: 'throttled',
    cause: 'clocks-low',
    first: 'check-clocks',
  },
];

// Concurrent, two jobs at a time (`slot`): each test's time includes its wait for a slot.
describe.skipIf(!plain.python).concurrent('verdicts end to end: real sidecar, real hook, stand-in nvidia-smi and procfs', { timeout: 120_000 }, () => {
  const steady = async ({ title, phases, verdict, cause, first, host, gpu, extra }: SteadyCase, context: TestContext) => {
    const loop = ['--seconds', String(SECONDS), ...phaseArgs(phases), ...(extra ?? [])];
    const gpuScenario = { gpus: [gpu ?? {}] };
    const { summary, run, out } = await slot(() =>
      runJob({ defer: deferrer(context), name: title.split(':')[0]!.replace('/', '-'), host, gpu: gpuScenario, loop }),
    );
    // A steady job never changes its verdict after warming up.
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: summary.job,
        steps: run.result.steps,
        script: { loop, phases, host: host ?? null, gpu: gpuScenario },
        expect: {
          verdict,
          cause,
          timeline: [[verdict, cause]],
          verdictShare: 1,
          breakdown: { measured: run.result.shares, scripted: scriptedShares(phases) },
          ranks: [{ rank: 0, verdict, cause, straggler: false }],
          straggler: null,
          firstRecommendation: first,
          gpus: [{ index: 0, ranks: [0] }],
        },
      }),
    );
  };
  // One test each, named by its full title (it.for would shorten long titles).
  for (const steadyCase of STEADY) it.skipIf(!ALL_E2E)(steadyCase.title, (context) => steady(steadyCase, context));

  it.skipIf(!ALL_E2E)('input-bound/unknown: sleeping loader workers with the host CPU idle (slow storage, a slow collate)', async (context) => {
    // Two forked worker processes that sleep for each batch: they exist, they are not busy, the host
    // is not busy and not in iowait: no limit is seen, so the cause is unknown.
    const loop = ['--seconds', String(SECONDS), '--workers', '2', '--data-ms', '60', '--compute-ms', '5'];
    const { summary, run, out } = await slot(() => runJob({ defer: deferrer(context), name: 'workers-sleeping', loop }));
    // The loop waits about 60/2 - 5 ms for each batch.
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: 'workers-sleeping',
        steps: run.result.steps,
        script: { loop, host: null, gpu: null },
        expect: {
          verdict: 'input-bound',
          cause: 'unknown',
          timeline: [['input-bound', 'unknown']],
          loader: { num_workers: 2 },
          breakdownAbove: { data: 0.6 },
          breakdown: { measured: run.result.shares, phases: ['data'] },
          recommendations: ['check-storage'],
        },
      }),
    );
  });
});

/** A cgroup with a CPU limit for the loop to run in: cgroup v1's cpu controller, else v2's cpu.max. */
interface CpuCgroup {
  dir: string;
  /** Write a pid here to move that process into the cgroup. */
  procs: string;
  remove(): void;
}

function cpuControllerRoot(): { root: string; version: 1 | 2 } | null {
  for (const root of ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']) if (existsSync(path.join(root, 'cpu.cfs_quota_us'))) return { root, version: 1 };
  const v2 = '/sys/fs/cgroup';
  if (existsSync(path.join(v2, 'cgroup.controllers')) && readFileSync(path.join(v2, 'cgroup.controllers'), 'utf8').split(/\s+/).includes('cpu')) return { root: v2, version: 2 };
  return null;
}

function makeCpuCgroup(cores: number): CpuCgroup {
  const controller = cpuControllerRoot();
  if (!controller) throw new Error('no cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max) on this machine');
  const { root, version } = controller;
  const dir = path.join(root, `stepscope-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  const period = 100_000;
  if (version === 2) writeFileSync(path.join(root, 'cgroup.subtree_control'), '+cpu');
  mkdirSync(dir);
  const remove = () => {
    // Whatever is still inside goes back to the root first: a cgroup with tasks cannot be removed.
    for (const pid of readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
        writeFileSync(path.join(root, 'cgroup.procs'), pid);
      } catch {
        // gone already
      }
    }
    rmdirSync(dir);
  };
  try {
    if (version === 1) {
      writeFileSync(path.join(dir, 'cpu.cfs_period_us'), String(period));
      writeFileSync(path.join(dir, 'cpu.cfs_quota_us'), String(Math.round(cores * period)));
    } else {
      writeFileSync(path.join(dir, 'cpu.max'), `${Math.round(cores * period)} ${period}`);
    }
  } catch (error) {
    remove();
    throw error;
  }
  return { dir, procs: path.join(dir, 'cgroup.procs'), remove };
}

/** Whether this test run may create a CPU-limited cgroup (root with a writable cpu controller), and why not. */
function cgroupSupport(): { ok: boolean; why: string } {
  try {
    makeCpuCgroup(0.2).remove();
    return { ok: true, why: '' };
  } catch (error) {
    return { ok: false, why: `cannot create a CPU-limited cgroup: ${(error as Error).message}` };
  }
}

const cgroup = plain.python ? cgroupSupport() : { ok: false, why: plain.why };

describe.skipIf(!cgroup.ok || !ALL_E2E)(`input-bound/cgroup-throttled under a real CFS quota${cgroup.ok ? '' : ` (skipped: ${cgroup.why})`}`, () => {
  it('names the container CPU limit when a loop that burns CPU for its data runs in a cgroup limited to 0.2 CPU', async (context) => {
    const defer = deferrer(context);
    const limited = makeCpuCgroup(0.2);
    defer(() => limited.remove());
    // The shell moves itself into the cgroup, then becomes Python: the loop starts inside it, as in a
    // container. Each batch costs 5 ms of CPU; the quota allows 20 ms in every 100 ms period.
    const loop = ['--seconds', '7', '--data-cpu', '--data-ms', '5', '--compute-ms', '5'];
    const { summary, run, out } = await runJob({
      defer,
      name: 'cgroup-throttled',
      host: { cpuPct: 30 },
      loop,
      wrap: (python, script, args) => ({ command: '/bin/sh', args: ['-c', `echo $$ > '${limited.procs}' && exec "$0" "$@"`, python, script, ...args] }),
    });
    // Under the quota the 5 ms of CPU of each batch take far longer on the clock.
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: 'cgroup-throttled',
        steps: run.result.steps,
        script: { loop, host: { cpuPct: 30 }, gpu: null },
        expect: {
          verdict: 'input-bound',
          cause: 'cgroup-throttled',
          timeline: [['input-bound', 'cgroup-throttled']],
          breakdownAbove: { data: 0.6 },
          breakdown: { measured: run.result.shares, phases: ['data'] },
          evidenceAbove: { cgroup_throttled_share: 0.5 },
          evidenceRuleContains: 'limit 0.2 cores',
          firstRecommendation: 'raise-cpu-limit',
        },
      }),
    );
  });
});

// Live only with STEPSCOPE_E2E=all (or when recording): npm test replays its recording (test/verdicts-replay.test.ts), to keep within its budget.
describe.skipIf(!plain.python || !ALL_E2E)('the A10 case: new online augmentation makes the DataLoader the bottleneck', () => {
  // A detection model on an A10 whose epoch went from 28 to 39 minutes and GPU utilization from
  // 92% to 58%: the steps keep their compute, the data wait grows (2 -> 18 ms of a 28 -> 44 ms
  // step, as 92% -> 58% busy implies) and the small host's CPU saturates. Product defaults: a 4 s
  // window and a 2 s hold.
  const before: Phases = { data: 2, h2d: 2, compute: 24 };
  const after: Phases = { data: 18, h2d: 2, compute: 24 };

  it('goes from compute-bound to input-bound, recommends fixing the loader, and shows the change within 5 s', async (context) => {
    const defer = deferrer(context);
    const t0 = Date.now();
    // Late enough that the job has warmed up and shown compute-bound even on a machine loaded by
    // other work (at 5 s a loaded run once was still warming up); the rest of the run long enough
    // after the change for input-bound to be what the job was mostly, as in the real case.
    const changeS = 8;
    const changeAt = t0 + changeS * 1000;
    const endAt = changeAt + 12_000;
    const gpu = {
      t0,
      gpus: [{ name: 'NVIDIA A10', 'clocks.sm': 1695, 'clocks.max.sm': 1695, 'utilization.gpu': 92, 'power.limit': 150, 'power.draw': 138, 'memory.total': 23028, 'memory.used': 15870, 'temperature.gpu': 63 }],
      timeline: [{ at: changeS, gpu: 0, set: { 'utilization.gpu': 58, 'power.draw': 96 } }],
    };
    const host: HostLoad = { cpuPct: 70 };
    const loop = ['--seconds', String((endAt - Date.now()) / 1000), ...phaseArgs(before), ...phaseArgs(after, 'then-'), '--then-at', String(changeAt / 1000)];
    let seenInputBoundAt: number | null = null;
    let sawComputeBound = false;
    const { summary, run, out } = await runJob({
      defer,
      name: 'a10-detection',
      gpu,
      host,
      sidecarArgs: [],
      loop,
      during: async ({ sidecar, proc }) => {
        const saturate = setTimeout(() => proc.set({ cpuPct: 97 }), changeAt - Date.now());
        defer(() => clearTimeout(saturate));
        // Watch /v1/state as a person would, until the job's verdict turns.
        await waitFor(
          async () => {
            const verdict = (await sidecar.state()).jobs[0]?.verdict?.verdict;
            if (verdict === 'compute-bound') sawComputeBound = true;
            if (verdict === 'input-bound') seenInputBoundAt = Date.now();
            return seenInputBoundAt !== null;
          },
          endAt - Date.now() + 5_000,
          100,
        );
      },
    });
    expect(sawComputeBound, 'compute-bound was shown before the change').toBe(true);
    const changedAt = run.result.changed_at * 1000;
    expect(Math.abs(changedAt - changeAt)).toBeLessThan(500);
    const latencyMs = seenInputBoundAt! - changedAt;
    console.info(`A10 case: input-bound shown in /v1/state ${(latencyMs / 1000).toFixed(2)} s after the data time grew`);
    expect.soft(latencyMs, 'input-bound shown in /v1/state within 5 s of the change').toBeLessThanOrEqual(5_000);

    // The timeline: warming up, compute-bound, then input-bound (after the change) because the host
    // CPU is saturated by others (the loop sleeps for its data: contention, so the neighbour comes
    // first, not a bigger CPU); the A10's utilization between before and after.
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: 'a10-detection',
        steps: run.result.steps,
        script: { loop, phases: before, thenPhases: after, host, gpu },
        expect: {
          verdict: 'input-bound',
          cause: 'contention',
          timeline: [
            ['compute-bound', null],
            ['input-bound', 'contention'],
          ],
          change: { atMs: changedAt, to: ['input-bound', 'contention'], withinMs: 5_000 },
          topRecommendations: ['find-neighbour', 'raise-num-workers'],
          gpus: [{ index: 0, name: 'NVIDIA A10', ranks: [0] }],
          gpuUtilMean: [58, 92],
        },
      }),
    );
  });
});

describe.skipIf(!plain.python || !ALL_E2E)('a job whose data time grows late in its run', () => {
  it('is summarized by the verdict that held longest, compute-bound, with that verdict\'s own (null) cause', async (context) => {
    const before: Phases = { data: 1, compute: 30 };
    const after: Phases = { data: 40, compute: 10 };
    // 220 steps of ~31 ms (~7 s), then 100 of ~50 ms (~5 s).
    const loop = ['--steps', '320', ...phaseArgs(before), ...phaseArgs(after, 'then-'), '--then-after-steps', '220'];
    const { summary, run, out } = await runJob({ defer: deferrer(context), name: 'late-input-bound', loop });
    expect(run.result.changed_at_step).toBe(220);
    // compute-bound held longest: the summary's verdict, cause, headline and rank agree on it. What to
    // do covers every verdict the job had: the late input-bound spell too.
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: 'late-input-bound',
        steps: run.result.steps,
        script: { loop, phases: before, thenPhases: after, host: null, gpu: null },
        expect: {
          verdict: 'compute-bound',
          cause: null,
          timeline: [
            ['compute-bound', null],
            ['input-bound', 'few-workers'],
          ],
          change: { atMs: run.result.changed_at * 1000, to: ['input-bound', 'few-workers'] },
          headlineMatches: '^Compute-bound for \\d+% of the job',
          ranks: [{ verdict: 'compute-bound', cause: null }],
          verdictShare: [0.5, 1],
          firstRecommendation: 'faster-compute',
          recommendations: ['raise-num-workers'],
        },
      }),
    );
  });
});

describe.skipIf(!plain.python || !ALL_E2E)('a job starting up', () => {
  it('is warming-up, not idle, while its first step takes 3 s (compilation, autotuning, worker start)', async (context) => {
    const seen = new Set<string>();
    const loop = ['--seconds', '6', '--data-ms', '1', '--compute-ms', '30', '--first-compute-ms', '3000'];
    const { summary, run, out } = await runJob({
      defer: deferrer(context),
      name: 'slow-first-step',
      loop,
      during: ({ sidecar }) =>
        // The hook has said hello; its first step has not ended yet.
        waitFor(
          async () => {
            const job = (await sidecar.state()).jobs[0];
            if (job?.steps > 0) return true;
            if (job?.verdict) seen.add(`${job.verdict.verdict}: ${job.verdict.evidence.rule}`);
            return false;
          },
          15_000,
          100,
        ),
    });
    expect.soft([...seen].filter((verdict) => !verdict.startsWith('warming-up')), 'verdicts shown before the first step ended').toEqual([]);
    expectAndRecord(
      context,
      summary,
      out,
      scenario(context, {
        job: 'slow-first-step',
        steps: run.result.steps,
        script: { loop, host: null, gpu: null },
        expect: {
          verdict: 'compute-bound',
          cause: null,
          timeline: [['compute-bound', null]],
          timelineVerdicts: ['warming-up', 'compute-bound'],
          warmingUpUntilFirstStep: true,
        },
      }),
    );
  });
});

describe.skipIf(!torch.python || !ALL_E2E)(`real PyTorch (CPU) through the hook${torch.python ? '' : ` (skipped: ${torch.why})`}`, () => {
  const torchJob = async (context: TestContext, name: string, loop: string[], expectations: (run: PythonRun) => ScenarioMeta['expect']) => {
    const { summary, run, out } = await runJob({ defer: deferrer(context), name, python: torch.python!, loop });
    expectAndRecord(context, summary, out, scenario(context, { job: name, steps: run.result.steps, script: { loop, host: null, gpu: null }, expect: expectations(run) }));
  };

  it('a Dataset whose __getitem__ does heavy CPU work, num_workers=0: input-bound (few-workers)', (context) =>
    torchJob(context, 'torch-heavy-getitem', ['--torch', '--seconds', '7', '--item-cpu-ms', '1.5', '--batch', '8'], (run) => ({
      verdict: 'input-bound',
      cause: 'few-workers',
      timeline: [['input-bound', 'few-workers']],
      loader: { num_workers: 0, batch_size: 8 },
      breakdownAbove: { data: 0.6 },
      breakdown: { measured: run.result.shares, phases: ['data'] },
      firstRecommendation: 'raise-num-workers',
    })));

  it('the same loop with cheap data and a heavy model: compute-bound', (context) =>
    torchJob(context, 'torch-heavy-model', ['--torch', '--seconds', '7', '--batch', '32', '--features', '256', '--hidden', '512', '--layers', '3'], (run) => ({
      verdict: 'compute-bound',
      cause: null,
      timeline: [['compute-bound', null]],
      breakdownAbove: { compute: 0.8 },
      breakdown: { measured: run.result.shares, phases: ['compute'] },
    })));

  it('a DataLoader with num_workers=2 whose __getitem__ sleeps (remote storage): input-bound (unknown)', (context) =>
    torchJob(context, 'torch-sleeping-workers', ['--torch', '--seconds', '7', '--workers', '2', '--item-sleep-ms', '4', '--batch', '8'], (run) => ({
      verdict: 'input-bound',
      cause: 'unknown',
      timeline: [['input-bound', 'unknown']],
      loader: { num_workers: 2 },
      breakdownAbove: { data: 0.6 },
      breakdown: { measured: run.result.shares, phases: ['data'] },
    })));
});
