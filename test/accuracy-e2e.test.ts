import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { killTree, track } from './support/children.js';
import { startFakeProc } from './support/fake-proc.js';
import { findPython } from './support/python.js';
import { runProcess, stepscopeRun, type PythonRun } from './support/run-python.js';
import { ACTIVE, ALL_E2E, expectScenario, RECORDING, recordScenario, type ScenarioMeta } from './support/scenarios.js';
import { ROOT, startSidecar, tempDir } from './support/sidecar.js';
import { inTurns } from '../scripts/accuracy/in-turns.mjs';

/**
 * Verdicts against ground truth on real programs (the accuracy benchmark's, scripts/accuracy/):
 * plain PyTorch training loops on the CPU, unmodified, timed zero-code by `stepscope run` against a
 * real sidecar, each followed by its ablation — the same loop over the same batches made beforehand,
 * run for as long — whose step time gives the truth: lost = 1 − t_ready / t_real (in the training
 * thread's CPU time, which other work on the machine moves less than the wall time). The tests assert
 * verdicts, levels and causes, never a time; the truth only checks that the program made the case
 * it is meant to (a loss on the right side of the bars).
 *
 * Each run takes seconds of a core, so `npm test` replays their recordings instead
 * (test/verdicts-replay.test.ts; `npm run record:scenarios` records them again); STEPSCOPE_E2E=all runs
 * them live. `npm run accuracy` runs the whole grid and writes ACCURACY.md.
 */

const torch = findPython(['torch']);
const HERE = path.join(ROOT, 'scripts', 'accuracy');
const FILE = 'test/accuracy-e2e.test.ts';
const PSI = existsSync('/proc/pressure/cpu');
const TASKSET = spawnSync('taskset', ['--version']).status === 0;
/** The CPUs this process may run on (a test pins its programs to one of them). */
const CORES = (() => {
  const list = spawnSync('taskset', ['-cp', String(process.pid)], { encoding: 'utf8' }).stdout?.split(':').at(-1)?.trim() ?? '0';
  return list.split(',').flatMap((part) => {
    const [a, b] = part.split('-').map(Number);
    return b === undefined ? [a!] : Array.from({ length: b - a! + 1 }, (_, i) => a! + i);
  });
})();
const env = { OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1', PYTHONPATH: HERE };

interface Sizes {
  units_per_ms: number;
  hidden: Record<string, number>;
}

/** One zero-code run against a sidecar of its own; its summary, what the program measured, its --out. */
async function zeroCode(context: TestContext, job: string, args: string[], procRoot: string | null, program = 'train.py', prefix: string[] = []) {
  const out = tempDir('stepscope-accuracy-');
  context.onTestFinished(() => rmSync(out, { recursive: true, force: true }));
  const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out, '--exit-on-end', '--end-grace', '1', ...(procRoot ? ['--proc-root', procRoot] : [])]);
  context.onTestFinished(async () => {
    await sidecar.stop('SIGKILL');
  });
  const cli = stepscopeRun();
  const [command, ...head] = [...prefix, cli.command];
  const run: PythonRun = await runProcess(command!, [...head, ...cli.args, '--url', sidecar.ingestUrl, '--job', job, '--', torch.python!, path.join(HERE, program), ...args], env, 120_000, `stepscope run train.py (${job})`);
  expect(run.code, run.stderr).toBe(0);
  const exit = await Promise.race([sidecar.exited, new Promise<null>((resolve) => setTimeout(() => resolve(null), 20_000))]);
  expect(exit, 'the sidecar exits once the job has ended').toEqual({ code: 0, signal: null });
  return { summary: JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8')), result: run.result, out };
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * The program, then its ablation, each under stepscope; the share of time the data cost from the
 * same two again without stepscope, in turns (scripts/accuracy/in-turns.mjs: one stopped while the
 * other runs, swapping every 100 ms), in the training thread's CPU time per step. The stepscope runs
 * go one after the other, not side by side: on 2 cores the twin and the two sidecars leave each
 * program less than a core, and a 1 ms step preempted that often gives noisier slices (CI saw the
 * first windows read compute-bound; beside its twin and two busy loops, stepscope read 22-27% waiting
 * for data where the ablation gave 36%). Alone, each has a core and the sidecar the other. But taken
 * from those two runs, the truth held the machine's drift between them: a 10 ms loop built to lose
 * 11% measured 4.5% once, its ablation's steps 10% slower than usual. In turns, both meet the same
 * machine.
 */
async function withAblation(context: TestContext, job: string, args: string[], procRoot: string | null = null) {
  const real = await zeroCode(context, job, args, procRoot);
  const ready = await zeroCode(context, `${job}-ready`, [...args, '--ready'], procRoot);
  const { tReal, tReady } = await inTurnsCpuMs(job, args);
  const lost = 1 - tReady / tReal;
  // Said whether the test passes or not, so that a truth off its bars shows which run moved.
  console.info(`${job}: in turns, the program ${tReal.toFixed(3)} ms of CPU a step, its ablation ${tReady.toFixed(3)} ms: lost ${lost.toFixed(3)}`);
  return { real, ready, lost };
}

/** The program and its ablation without stepscope, in turns: each one's CPU time a step (ms). */
async function inTurnsCpuMs(job: string, args: string[]): Promise<{ tReal: number; tReady: number }> {
  const children: ChildProcess[] = [];
  const runs = [args, [...args, '--ready']].map((loop) =>
    runProcess(torch.python!, [path.join(HERE, 'train.py'), ...loop], env, 120_000, `train.py (${job}'s truth)`, (child) => children.push(child)),
  );
  const truth = await inTurns(children as [ChildProcess, ChildProcess], Promise.all(runs));
  for (const run of truth) expect(run.code, run.stderr).toBe(0);
  const [tReal, tReady] = truth.map((run) => mean((run.result as { cpu_ms_blocks: number[] }).cpu_ms_blocks)) as [number, number];
  return { tReal, tReady };
}

/** `loop` with `flag`'s value replaced. */
const withArg = (loop: string[], flag: string, value: string) => loop.map((arg, i) => (loop[i - 1] === flag ? value : arg));

/**
 * The loop re-sized for the machine as it is now: its training step (`computeMs` of CPU) and its
 * loading (`loadMs` a step), checked in a short run in turns with its ablation and corrected where
 * either is off by more than a fifth — the width from a calibration of that step alone, the
 * tokenizer rounds in proportion — then checked once more. The calibration at the file's start can
 * meet another machine than its cases do: on a shared host, one CI run's programs all ran 35-40%
 * faster than it aimed, so the 1 ms ablation's step shrank until its fixed per-step Python read as
 * host-bound, and the 10 ms case lost 20.7%, over its band. The case's truth is still taken
 * afterwards (withAblation); this only aims it.
 */
async function aimed(job: string, loop: string[], aim: { computeMs: number; loadMs: number }): Promise<string[]> {
  const off = (measured: number, wanted: number) => measured < 0.8 * wanted || measured > 1.25 * wanted;
  let sized = loop;
  for (let round = 0; round < 2; round++) {
    const { tReal, tReady } = await inTurnsCpuMs(`${job} aimed`, withArg(sized, '--seconds', '3'));
    const loadMs = tReal - tReady;
    console.info(`${job}: aiming, round ${round + 1}: training ${tReady.toFixed(3)} ms of CPU a step (aim ${aim.computeMs}), loading ${loadMs.toFixed(3)} ms (aim ${aim.loadMs})`);
    if (!off(tReady, aim.computeMs) && !off(loadMs, aim.loadMs)) return sized;
    if (off(tReady, aim.computeMs)) {
      const run = await runProcess(torch.python!, [path.join(HERE, 'calibrate.py'), '--compute-ms', String(aim.computeMs)], env, 120_000, 'calibrate.py');
      expect(run.code, run.stderr).toBe(0);
      sized = withArg(sized, '--hidden', String(Object.values((run.result as Sizes).hidden)[0]));
    }
    if (off(loadMs, aim.loadMs) && loadMs > 0) {
      const units = Number(sized[sized.indexOf('--load-units') + 1]);
      sized = withArg(sized, '--load-units', String(Math.max(1, Math.round((units * aim.loadMs) / loadMs))));
    }
  }
  return sized;
}

function scenario(context: TestContext, title: string, job: string, steps: number, script: ScenarioMeta['script'], expectations: ScenarioMeta['expect']): ScenarioMeta {
  return { format: 'stepscope.scenario/v1', title, suite: context.task.suite?.name ?? '', test: FILE, job, worldSize: 1, steps, script, expect: expectations, recordedAt: new Date().toISOString() };
}

/**
 * The live run meets its expectations, but for the timeline and the limiters listed beside the verdict:
 * a loaded machine adds its own moderate costs (work outside the phases at 1 ms steps), so live, each
 * expected limiter must be there at its level and none other may be high. The recording keeps the exact
 * lists, which test/verdicts-replay.test.ts holds it to.
 */
function check(context: TestContext, run: { summary: any; out: string }, meta: ScenarioMeta) {
  const { limiters, timeline, ...rest } = meta.expect;
  // Live, the run's verdict and cause (the one that held longest) must be the expected ones and every
  // expected segment must be in its timeline; a loaded machine can add a segment of its own (CI saw a
  // 1 ms run read compute-bound for its first 2.8 s beside its ablation). The recording keeps the exact timeline.
  const live: Array<[string, string | null]> = run.summary.timeline.filter((s: any) => ACTIVE(s.verdict)).map((s: any) => [s.verdict, s.cause]);
  expectScenario(run.summary, { ...meta, expect: { ...rest, timeline: live } }); // the timeline's shape: warming-up first, contiguous
  const seen = live.map((segment) => JSON.stringify(segment));
  for (const segment of timeline) expect(seen, JSON.stringify(run.summary.timeline)).toContain(JSON.stringify(segment));
  if (limiters) {
    const listed: Array<{ limiter: string; level: string }> = (run.summary.limiters ?? []).map((l: any) => ({ limiter: l.limiter, level: l.level }));
    for (const expected of limiters) expect(listed, run.summary.headline).toContainEqual(expected);
    const unexpected = listed.filter((l) => !limiters.some((e) => e.limiter === l.limiter));
    expect(unexpected.filter((l) => l.level === 'high'), run.summary.headline).toEqual([]);
  }
  if (RECORDING && !context.task.result?.errors?.length) console.info(`recorded ${path.relative(process.cwd(), recordScenario(run.out, meta))}`);
}

describe.skipIf(!torch.python || !ALL_E2E)(`verdicts against ground truth: real PyTorch, zero-code${torch.python ? '' : ` (skipped: ${torch.why})`}`, { timeout: 180_000 }, () => {
  let sizes: Sizes;
  const width = (ms: number) => sizes.hidden[String(ms)] ?? sizes.hidden[ms.toFixed(1)]!;
  const units = (ms: number) => String(Math.round(ms * sizes.units_per_ms));
  beforeAll(async () => {
    const run = await runProcess(torch.python!, [path.join(HERE, 'calibrate.py'), '--compute-ms', '0.6', '8.7', '50.0', '0.5', '30.0'], env, 120_000, 'calibrate.py');
    expect(run.code, run.stderr).toBe(0);
    sizes = run.result;
  }, 120_000);

  it('1 ms steps losing about a third of their time to loading: input-bound, and its ablation compute-bound', async (context) => {
    const fake = startFakeProc({ cpuPct: 20 });
    context.onTestFinished(() => fake.stop());
    // Aimed at 40% so that the ablation's truth stays clear of the 20% bar (the calibration's tokenizer
    // rounds per ms move by a quarter from run to run); 10 s so that a verdict the first thin windows
    // propose cannot outlast the steady one.
    // Loading's 0.4 ms of tokenizer rounds cost 0.45-0.5 ms a step with the loader's own work.
    const loop = await aimed('tiny-steps', ['--steps', '100000', '--seconds', '10', '--hidden', String(width(0.6)), '--load-units', units(0.4)], { computeMs: 0.6, loadMs: 0.45 });
    const { real, ready, lost } = await withAblation(context, 'tiny-steps', loop, fake.root);
    expect(lost, 'the program loses 20% or more of its time to loading (its setup, not stepscope)').toBeGreaterThan(0.2);
    expect(real.summary.step_ms.mean, 'about 1 ms steps').toBeLessThan(3);
    const script = { loop, host: { cpuPct: 20 }, gpu: null, truth: { lost: Number(lost.toFixed(3)) } };
    check(context, real, scenario(context, context.task.name, 'tiny-steps', real.result.steps, script, {
      verdict: 'input-bound',
      cause: 'few-workers',
      timeline: [['input-bound', 'few-workers']],
      loader: { num_workers: 0 },
      limiters: [{ limiter: 'input', level: 'high' }],
      firstRecommendation: 'raise-num-workers',
    }));
    check(context, ready, scenario(context, '1 ms steps over the same batches made beforehand (the ablation): compute-bound', 'tiny-steps-ready', ready.result.steps, { ...script, loop: [...loop, '--ready'] }, {
      verdict: 'compute-bound',
      cause: null,
      timeline: [['compute-bound', null]],
      // No limiter list: the loop's own work between steps (zero_grad, the hook) is 5-8% of a 0.7 ms
      // step here, named as a moderate cost on one machine and not on another.
    }));
  });

  it('100 ms steps losing half their time to loading: input-bound', async (context) => {
    const fake = startFakeProc({ cpuPct: 20 });
    context.onTestFinished(() => fake.stop());
    const loop = ['--steps', '1000', '--seconds', '12', '--hidden', String(width(50)), '--load-units', units(50)];
    const { real, lost } = await withAblation(context, 'slow-steps', loop, fake.root);
    expect(lost, 'the program loses 35% or more of its time to loading').toBeGreaterThan(0.35);
    check(context, real, scenario(context, context.task.name, 'slow-steps', real.result.steps, { loop, host: { cpuPct: 20 }, gpu: null, truth: { lost: Number(lost.toFixed(3)) } }, {
      verdict: 'input-bound',
      cause: 'few-workers',
      timeline: [['input-bound', 'few-workers']],
      limiters: [{ limiter: 'input', level: 'high' }],
    }));
  });

  it('10 ms steps losing about 15% to loading: compute-bound, with loading named as a moderate cost', async (context) => {
    const fake = startFakeProc({ cpuPct: 20 });
    context.onTestFinished(() => fake.stop());
    // Aimed at the middle of the 5-20% band. 0.9 ms of loading on 8.7 of compute landed at 4.5-13% in
    // seven runs (mean 10%; one CI run at 4.5%, its ablation's steps 10% slower than usual) while the
    // truth came from the two runs one after the other; it is now taken in turns (withAblation).
    // Taken in turns, it lost 11.7-13.6% (1.2 ms of loading a step with the loader's own work).
    const loop = await aimed('moderate-loading', ['--steps', '10000', '--seconds', '6', '--hidden', String(width(8.7)), '--load-units', units(1.1)], { computeMs: 8.7, loadMs: 1.2 });
    const { real, lost } = await withAblation(context, 'moderate-loading', loop, fake.root);
    expect(lost, 'the program loses between 5% and 20% of its time to loading').toBeGreaterThan(0.05);
    expect(lost).toBeLessThan(0.2);
    check(context, real, scenario(context, context.task.name, 'moderate-loading', real.result.steps, { loop, host: { cpuPct: 20 }, gpu: null, truth: { lost: Number(lost.toFixed(3)) } }, {
      verdict: 'compute-bound',
      cause: null,
      timeline: [['compute-bound', null]],
      limiters: [{ limiter: 'input', level: 'moderate' }],
      headlineMatches: 'Also costing time: loading \\d+% \\(moderate\\)',
    }));
  });

  // A loop without a DataLoader or an optimizer (issue 26): batches sliced from a tensor, weights
  // updated by hand under no_grad, the validation loss estimated every few steps (nanoGPT's shape).
  it('a hand-written-SGD loop without a DataLoader, evaluating every 5 steps: host-bound (evaluation), and its ablation compute-bound', async (context) => {
    const loop = ['--seconds', '8', '--eval-every', '5', '--eval-batches', '10'];
    const [real, ready] = await Promise.all([zeroCode(context, 'lm-evaluating', loop, null, 'handwritten_lm.py'), zeroCode(context, 'lm-evaluating-ready', [...loop, '--ready'], null, 'handwritten_lm.py')]);
    const lost = 1 - ready.result.step_ms / real.result.step_ms;
    expect(lost, "evaluation takes 25% or more of the time (the program's setup, not stepscope)").toBeGreaterThan(0.25);
    const script = { loop, host: null, gpu: null, truth: { lost: Number(lost.toFixed(3)) } };
    check(context, real, scenario(context, context.task.name, 'lm-evaluating', real.result.steps, script, {
      verdict: 'host-bound',
      cause: 'evaluation',
      timeline: [['host-bound', 'evaluation']],
      firstRecommendation: 'evaluate-less-often',
      causesRanked: ['evaluation'],
    }));
    check(context, ready, scenario(context, 'the same hand-written-SGD loop never evaluating (the ablation): compute-bound', 'lm-evaluating-ready', ready.result.steps, { ...script, loop: [...loop, '--ready'] }, {
      verdict: 'compute-bound',
      cause: null,
      timeline: [['compute-bound', null]],
    }));
  });

  it('the same hand-written-SGD loop logging its loss every step: compute-bound', async (context) => {
    const log = tempDir('stepscope-lm-log-');
    context.onTestFinished(() => rmSync(log, { recursive: true, force: true }));
    const loop = ['--seconds', '6', '--log-every-step', '--log-file', path.join(log, 'train.log')];
    const run = await zeroCode(context, 'lm-logging', loop, null, 'handwritten_lm.py');
    check(context, run, scenario(context, context.task.name, 'lm-logging', run.result.steps, { loop: loop.slice(0, 3), host: null, gpu: null }, {
      verdict: 'compute-bound',
      cause: null,
      timeline: [['compute-bound', null]],
    }));
  });

  // The issue's case: loader workers that keep up (the loop hardly waits in next()) but take the
  // CPU the training step needs. Bounded: the program and its two workers share one core (taskset),
  // whatever the machine's other cores do; the ablation runs after it, on the same core. (It was
  // titled "beside a neighbour", but its neighbour died at its start unseen until stop 40, so it was
  // recorded, and its figures taken, without one; beside a real one the ablation's loss falls to
  // 5-8% and the rule's upper estimate stays near 20%, as the freed CPU goes partly to the neighbour.)
  it.skipIf(!PSI || !TASKSET)('loader workers that keep up but take the CPU the step needs, pinned to one core: input-bound (workers-starve-step)', async (context) => {
    const core = String(Math.max(...CORES));
    const pin = ['taskset', '-c', core];
    // 30 ms of training and 15 ms of loading a batch on a quiet core, both sized by the calibration:
    // two workers keep up with ease (about 10% of the step in next()) and cost the step about a third.
    // A fixed width (1,024) trained for about 60 ms on one machine, and the loss fell under the floor.
    // The core must be quiet: a busy loop beside it takes a larger share from the ablation (one
    // thread) than from the program (three), and the ablation's truth means nothing then.
    const loop = ['--steps', '100000', '--seconds', '10', '--workers', '2', '--hidden', String(width(30)), '--load-units', units(15)];
    const real = await zeroCode(context, 'starved-workers', loop, null, 'train.py', pin);
    const ready = await zeroCode(context, 'starved-workers-ready', [...loop, '--ready'], null, 'train.py', pin);
    const lost = 1 - ready.result.step_ms / real.result.step_ms;
    expect(lost, 'the workers cost the step 10% or more of its time (the program\'s setup, not stepscope)').toBeGreaterThan(0.1);
    expect(real.summary.breakdown.data, 'the loop hardly waits in next(): the loss is not in the data wait').toBeLessThan(0.2);
    const causes: Array<{ cause: string; gain: number | null }> = real.summary.causes;
    expect(causes.find((c) => c.cause === 'workers-starve-step')?.gain, JSON.stringify(causes)).toBeGreaterThan(0);
    // Input-bound all along; the cause may move while the machine's load does (the test holds the
    // ranking to its rule), and the summary's is the workers'.
    const active: Array<[string, string | null]> = real.summary.timeline.filter((s: { verdict: string }) => s.verdict !== 'warming-up' && s.verdict !== 'idle').map((s: { verdict: string; cause: string | null }) => [s.verdict, s.cause]);
    expect(active.map(([verdict]) => verdict)).toEqual(active.map(() => 'input-bound'));
    const script = { loop, host: null, gpu: null, truth: { lost: Number(lost.toFixed(3)) } };
    check(context, real, scenario(context, context.task.name, 'starved-workers', real.result.steps, script, {
      verdict: 'input-bound',
      cause: 'workers-starve-step',
      timeline: active,
      firstRecommendation: 'fewer-or-niced-workers',
      causesRanked: ['workers-starve-step'],
    }));
  });

  it.skipIf(!PSI)('num_workers=0 beside a neighbour holding both cores: input-bound, its causes ranked by what fixing each buys, both estimated', async (context) => {
    // A real neighbour: two processes keeping a core each busy, for as long as the runs last.
    const neighbour = track(spawn(torch.python!, [path.join(HERE, 'neighbour.py'), '--procs', '2'], { stdio: ['ignore', 'ignore', 'inherit'], detached: true }), 'neighbour.py');
    context.onTestFinished(() => killTree(neighbour));
    const loop = ['--steps', '10000', '--seconds', '8', '--hidden', String(width(0.5)), '--load-units', units(9.5)];
    const { real, lost } = await withAblation(context, 'loader-beside-a-neighbour', loop);
    expect(neighbour.exitCode, 'the neighbour ran all along').toBeNull();
    expect(lost, 'nearly all of the step is loading').toBeGreaterThan(0.5);
    const causes: Array<{ cause: string; gain: number | null }> = real.summary.causes;
    expect(causes.filter((c) => c.cause === 'contention' || c.cause === 'few-workers').map((c) => c.gain), JSON.stringify(causes)).not.toContain(null);
    // Which cause buys most is the machine's to say (its free cores, its CPU pressure): the test
    // holds the ranking to its rule (causesRanked), and the job to input-bound all along.
    const active: Array<[string, string | null]> = real.summary.timeline.filter((s: { verdict: string }) => s.verdict !== 'warming-up' && s.verdict !== 'idle').map((s: { verdict: string; cause: string | null }) => [s.verdict, s.cause]);
    expect(active.map(([verdict]) => verdict)).toEqual(active.map(() => 'input-bound'));
    check(context, real, scenario(context, context.task.name, 'loader-beside-a-neighbour', real.result.steps, { loop, host: null, gpu: null, truth: { lost: Number(lost.toFixed(3)) } }, {
      verdict: 'input-bound',
      cause: causes[0]!.cause,
      timeline: active,
      causesRanked: ['contention', 'few-workers'],
    }));
  });
});
