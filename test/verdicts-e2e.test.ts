import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { startFakeProc, type FakeProc, type HostLoad } from './support/fake-proc.js';
import { findPython } from './support/python.js';
import { fixture, runPython, type PythonRun } from './support/run-python.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * Every verdict and cause, reached end to end: the real sidecar, the real hook in a loop whose
 * phase times are scripted (test/fixtures/verdict_loop.py), a stand-in nvidia-smi on PATH for the
 * GPU and a stand-in procfs for the host, so that nothing depends on what else this machine runs.
 * Each test reads the summary.json the sidecar writes when the job ends.
 */

const plain = findPython();
const torch = findPython(['torch']);
const LOOP = fixture('verdict_loop.py');
const ACTIVE = (verdict: string) => verdict !== 'warming-up' && verdict !== 'idle';

type Phases = { data?: number; h2d?: number; compute?: number; other?: number };
type Segment = { start_s: number; end_s: number; verdict: string; cause: string | null };

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

const phaseArgs = (phases: Phases, prefix = '') =>
  Object.entries(phases).flatMap(([phase, ms]) => [`--${prefix}${phase}-ms`, String(ms)]);

/** The shares of step time the script implies. */
function scriptedShares(phases: Phases) {
  const total = (phases.data ?? 0) + (phases.h2d ?? 0) + (phases.compute ?? 0) + (phases.other ?? 0);
  return { data: (phases.data ?? 0) / total, h2d: (phases.h2d ?? 0) / total, compute: (phases.compute ?? 0) / total, other: (phases.other ?? 0) / total };
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
  return { summary, run, during };
}

/**
 * The timeline is what the script implies: nothing but warming-up ahead of the first real verdict,
 * then exactly `expected`, in order, and nothing else. (A leading "idle" is let through here: the
 * sidecar calls a rank with no step yet idle, which 'is warming-up, not idle, ...' below pins down.)
 */
function expectTimeline(summary: any, expected: Array<[string, string | null]>) {
  const timeline: Segment[] = summary.timeline;
  const shown = JSON.stringify(timeline);
  const first = timeline.findIndex((segment) => ACTIVE(segment.verdict));
  expect(first, shown).toBeGreaterThanOrEqual(0);
  expect(first, `at most idle then warming-up before the first verdict: ${shown}`).toBeLessThanOrEqual(2);
  expect(timeline.slice(0, first).every((segment) => segment.verdict === 'warming-up' || segment.verdict === 'idle'), shown).toBe(true);
  expect(timeline.slice(first).map((segment) => [segment.verdict, segment.cause]), shown).toEqual(expected);
  for (let i = 1; i < timeline.length; i++) expect(timeline[i]!.start_s, shown).toBe(timeline[i - 1]!.end_s);
}

/** The summary's breakdown matches the loop's own measurement closely, and the script's loosely. */
function expectBreakdown(summary: any, run: PythonRun, scripted: ReturnType<typeof scriptedShares>) {
  for (const phase of ['data', 'h2d', 'compute', 'other'] as const) {
    expect(Math.abs(summary.breakdown[phase] - run.result.shares[phase]), `${phase}: summary ${summary.breakdown[phase]}, loop measured ${run.result.shares[phase]}`).toBeLessThanOrEqual(0.02);
    expect(Math.abs(summary.breakdown[phase] - scripted[phase]), `${phase}: summary ${summary.breakdown[phase]}, scripted ${scripted[phase].toFixed(3)}`).toBeLessThanOrEqual(0.08);
  }
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
}

// Margins well clear of the thresholds in src/analysis/verdict.ts: a limiter at ~75% of the step
// where the rule fires at 20-25%; clocks at 50-66% of their maximum where the rules start at 70-85%.
const STEADY: SteadyCase[] = [
  { title: 'compute-bound: a healthy loop', phases: { data: 1, h2d: 1, compute: 30 }, verdict: 'compute-bound', cause: null, first: 'faster-compute' },
  { title: 'input-bound/few-workers: data loaded in the training process', phases: { data: 30, compute: 10 }, verdict: 'input-bound', cause: 'few-workers', first: 'raise-num-workers' },
  { title: 'input-bound/cpu-saturated: the host CPU at 95%', phases: { data: 30, compute: 10 }, host: { cpuPct: 95 }, verdict: 'input-bound', cause: 'cpu-saturated', first: 'cache-or-offline-augmentation' },
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
  it.for(STEADY)('$title', async ({ title, phases, verdict, cause, first, host, gpu }, context) => {
    const { summary, run } = await slot(() =>
      runJob({
        defer: deferrer(context),
        name: title.split(':')[0]!.replace('/', '-'),
        host,
        gpu: { gpus: [gpu ?? {}] },
        loop: ['--seconds', String(SECONDS), ...phaseArgs(phases)],
      }),
    );
    expect(summary.verdict, summary.headline).toBe(verdict);
    expect(summary.cause, summary.headline).toBe(cause);
    // A steady job never changes its verdict after warming up.
    expectTimeline(summary, [[verdict, cause]]);
    expect(summary.verdict_share).toBe(1);
    expectBreakdown(summary, run, scriptedShares(phases));
    expect(summary.ranks).toHaveLength(1);
    expect(summary.ranks[0]).toMatchObject({ rank: 0, verdict, cause, straggler: false });
    expect(summary.straggler).toBeNull();
    expect(summary.recommendations[0]?.id, JSON.stringify(summary.recommendations)).toBe(first);
    expect(summary.gpus).toMatchObject([{ index: 0, ranks: [0] }]);
  });

  it('input-bound/unknown: sleeping loader workers with the host CPU idle (slow storage, a slow collate)', async (context) => {
    // Two forked worker processes that sleep for each batch: they exist, they are not busy, the host
    // is not busy and not in iowait: no limit is seen, so the cause is unknown.
    const { summary, run } = await slot(() =>
      runJob({ defer: deferrer(context), name: 'workers-sleeping', loop: ['--seconds', String(SECONDS), '--workers', '2', '--data-ms', '60', '--compute-ms', '5'] }),
    );
    expect(summary.env.loader).toMatchObject({ num_workers: 2 });
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['input-bound', 'unknown']);
    expectTimeline(summary, [['input-bound', 'unknown']]);
    // The loop waits about 60/2 - 5 ms for each batch.
    expect(summary.breakdown.data).toBeGreaterThan(0.6);
    expect(Math.abs(summary.breakdown.data - run.result.shares.data)).toBeLessThanOrEqual(0.02);
    expect(summary.recommendations.map((r: any) => r.id)).toContain('check-storage');
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

describe.skipIf(!cgroup.ok)(`input-bound/cgroup-throttled under a real CFS quota${cgroup.ok ? '' : ` (skipped: ${cgroup.why})`}`, () => {
  it('names the container CPU limit when a loop that burns CPU for its data runs in a cgroup limited to 0.2 CPU', async (context) => {
    const defer = deferrer(context);
    const limited = makeCpuCgroup(0.2);
    defer(() => limited.remove());
    // The shell moves itself into the cgroup, then becomes Python: the loop starts inside it, as in a
    // container. Each batch costs 5 ms of CPU; the quota allows 20 ms in every 100 ms period.
    const { summary, run } = await runJob({
      defer,
      name: 'cgroup-throttled',
      host: { cpuPct: 30 },
      loop: ['--seconds', '7', '--data-cpu', '--data-ms', '5', '--compute-ms', '5'],
      wrap: (python, script, args) => ({ command: '/bin/sh', args: ['-c', `echo $$ > '${limited.procs}' && exec "$0" "$@"`, python, script, ...args] }),
    });
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['input-bound', 'cgroup-throttled']);
    expectTimeline(summary, [['input-bound', 'cgroup-throttled']]);
    // Under the quota the 5 ms of CPU of each batch take far longer on the clock.
    expect(summary.breakdown.data, JSON.stringify(summary.breakdown)).toBeGreaterThan(0.6);
    expect(Math.abs(summary.breakdown.data - run.result.shares.data)).toBeLessThanOrEqual(0.02);
    expect(summary.evidence.figures.cgroup_throttled_share).toBeGreaterThan(0.5);
    expect(summary.evidence.rule).toContain('limit 0.2 cores');
    expect(summary.recommendations[0].id).toBe('raise-cpu-limit');
  });
});

describe.skipIf(!plain.python)('the A10 case: new online augmentation makes the DataLoader the bottleneck', () => {
  // A detection model on an A10 whose epoch went from 28 to 39 minutes and GPU utilization from
  // 92% to 58%: the steps keep their compute, the data wait grows (2 -> 18 ms of a 28 -> 44 ms
  // step, as 92% -> 58% busy implies) and the small host's CPU saturates. Product defaults: a 4 s
  // window and a 2 s hold.
  const before: Phases = { data: 2, h2d: 2, compute: 24 };
  const after: Phases = { data: 18, h2d: 2, compute: 24 };

  it('goes from compute-bound to input-bound, recommends fixing the loader, and shows the change within 5 s', async (context) => {
    const defer = deferrer(context);
    const t0 = Date.now();
    // Long enough after the change for input-bound to be what the job was mostly (as in the real
    // case, where the whole slow epoch was), and early enough to keep the test short.
    const changeS = 5;
    const changeAt = t0 + changeS * 1000;
    const endAt = changeAt + 12_000;
    const gpu = {
      t0,
      gpus: [{ name: 'NVIDIA A10', 'clocks.sm': 1695, 'clocks.max.sm': 1695, 'utilization.gpu': 92, 'power.limit': 150, 'power.draw': 138, 'memory.total': 23028, 'memory.used': 15870, 'temperature.gpu': 63 }],
      timeline: [{ at: changeS, gpu: 0, set: { 'utilization.gpu': 58, 'power.draw': 96 } }],
    };
    let seenInputBoundAt: number | null = null;
    let sawComputeBound = false;
    const { summary, run } = await runJob({
      defer,
      name: 'a10-detection',
      gpu,
      host: { cpuPct: 70 },
      sidecarArgs: [],
      loop: ['--seconds', String((endAt - Date.now()) / 1000), ...phaseArgs(before), ...phaseArgs(after, 'then-'), '--then-at', String(changeAt / 1000)],
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

    // The timeline: warming up, compute-bound, then input-bound because the host CPU is saturated.
    expectTimeline(summary, [
      ['compute-bound', null],
      ['input-bound', 'cpu-saturated'],
    ]);
    const switchS = (summary.timeline as Segment[]).find((s) => s.verdict === 'input-bound')!.start_s;
    expect(Date.parse(summary.started_at) + switchS * 1000, 'input-bound begins after the change').toBeGreaterThan(changedAt);

    expect([summary.verdict, summary.cause], summary.headline).toEqual(['input-bound', 'cpu-saturated']);
    const ids = summary.recommendations.map((r: any) => r.id);
    expect(ids.slice(0, 3), JSON.stringify(ids)).toEqual(expect.arrayContaining(['cache-or-offline-augmentation', 'cpu-balanced-instance', 'raise-num-workers']));
    expect(summary.gpus).toMatchObject([{ index: 0, name: 'NVIDIA A10', ranks: [0] }]);
    expect(summary.gpus[0].util_mean).toBeGreaterThan(58);
    expect(summary.gpus[0].util_mean).toBeLessThan(92);
  });
});

describe.skipIf(!plain.python)('a job whose data time grows late in its run', () => {
  it('is summarized by the verdict that held longest, compute-bound, with that verdict\'s own (null) cause', async (context) => {
    const before: Phases = { data: 1, compute: 30 };
    const after: Phases = { data: 40, compute: 10 };
    // 220 steps of ~31 ms (~7 s), then 100 of ~50 ms (~5 s).
    const { summary, run } = await runJob({
      defer: deferrer(context),
      name: 'late-input-bound',
      loop: ['--steps', '320', ...phaseArgs(before), ...phaseArgs(after, 'then-'), '--then-after-steps', '220'],
    });
    expect(run.result.changed_at_step).toBe(220);
    expectTimeline(summary, [
      ['compute-bound', null],
      ['input-bound', 'few-workers'],
    ]);
    // compute-bound held longest: the summary's verdict, cause, headline and rank agree on it.
    expect(summary.verdict).toBe('compute-bound');
    expect(summary.cause, summary.headline).toBeNull();
    expect(summary.headline).toMatch(/^Compute-bound for \d+% of the job/);
    expect(summary.ranks[0]).toMatchObject({ verdict: 'compute-bound', cause: null });
    expect(summary.verdict_share).toBeGreaterThan(0.5);
    expect(summary.verdict_share).toBeLessThan(1);
    // What to do covers every verdict the job had: the late input-bound spell too.
    const ids = summary.recommendations.map((r: any) => r.id);
    expect(ids[0]).toBe('faster-compute');
    expect(ids).toContain('raise-num-workers');
  });
});

describe.skipIf(!plain.python)('a job starting up', () => {
  it('is warming-up, not idle, while its first step takes 3 s (compilation, autotuning, worker start)', async (context) => {
    const seen = new Set<string>();
    const { summary } = await runJob({
      defer: deferrer(context),
      name: 'slow-first-step',
      loop: ['--seconds', '6', '--data-ms', '1', '--compute-ms', '30', '--first-compute-ms', '3000'],
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
    expect(summary.timeline.map((s: Segment) => s.verdict)).toEqual(['warming-up', 'compute-bound']);
  });
});

describe.skipIf(!torch.python)(`real PyTorch (CPU) through the hook${torch.python ? '' : ` (skipped: ${torch.why})`}`, () => {
  it('a Dataset whose __getitem__ does heavy CPU work, num_workers=0: input-bound (few-workers)', async (context) => {
    const { summary, run } = await runJob({
      defer: deferrer(context),
      name: 'torch-heavy-getitem',
      python: torch.python!,
      loop: ['--torch', '--seconds', '7', '--item-cpu-ms', '1.5', '--batch', '8'],
    });
    expect(summary.env.loader).toMatchObject({ num_workers: 0, batch_size: 8 });
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['input-bound', 'few-workers']);
    expectTimeline(summary, [['input-bound', 'few-workers']]);
    expect(summary.breakdown.data).toBeGreaterThan(0.6);
    expect(Math.abs(summary.breakdown.data - run.result.shares.data)).toBeLessThanOrEqual(0.02);
    expect(summary.recommendations[0].id).toBe('raise-num-workers');
  });

  it('the same loop with cheap data and a heavy model: compute-bound', async (context) => {
    const { summary, run } = await runJob({
      defer: deferrer(context),
      name: 'torch-heavy-model',
      python: torch.python!,
      loop: ['--torch', '--seconds', '7', '--batch', '32', '--features', '256', '--hidden', '512', '--layers', '3'],
    });
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['compute-bound', null]);
    expectTimeline(summary, [['compute-bound', null]]);
    expect(summary.breakdown.compute).toBeGreaterThan(0.8);
    expect(Math.abs(summary.breakdown.compute - run.result.shares.compute)).toBeLessThanOrEqual(0.02);
  });

  it('a DataLoader with num_workers=2 whose __getitem__ sleeps (remote storage): input-bound (unknown)', async (context) => {
    const { summary, run } = await runJob({
      defer: deferrer(context),
      name: 'torch-sleeping-workers',
      python: torch.python!,
      loop: ['--torch', '--seconds', '7', '--workers', '2', '--item-sleep-ms', '4', '--batch', '8'],
    });
    expect(summary.env.loader).toMatchObject({ num_workers: 2 });
    expect([summary.verdict, summary.cause], summary.headline).toEqual(['input-bound', 'unknown']);
    expectTimeline(summary, [['input-bound', 'unknown']]);
    expect(summary.breakdown.data).toBeGreaterThan(0.6);
    expect(Math.abs(summary.breakdown.data - run.result.shares.data)).toBeLessThanOrEqual(0.02);
  });
});
