import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Summary } from '../protocol/summary.js';
import { readSummary } from '../outputs/summary-files.js';
import { renderSummary } from '../outputs/summary-render.js';
import { startWatch } from '../viewer/watch.js';
import { cudaDevices, DemoError, findPython, startPython, startSidecar, type PythonChild, type SidecarChild } from './children.js';
import { demoStory } from './story.js';

export interface DemoOptions {
  /** Shorter regimes and verdict window, for tests and a quick look. */
  fast?: boolean;
  /** A real model on the GPU with the GPU's real counters (PyTorch with CUDA). */
  real?: boolean;
  /** Where the summary and logs go (default ./stepscope-demo-<time>). */
  out?: string;
  plain?: boolean;
  write?: (text: string) => void;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'dist', 'cli.js');
const TRAIN = path.join(ROOT, 'demo', 'train.py');
const HOOK = path.join(ROOT, 'python-hook');
const JOB = 'demo';

const stamp = (d: Date) => d.toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-');

/**
 * The demo: the sidecar with simulated GPU counters, a two-rank Python loop through the real hook
 * living through three regimes on the same clock, the live viewer, and the end-of-job summary.
 * Resolves with the summary, written to the folder it names.
 */
export async function runDemo(options: DemoOptions = {}): Promise<{ summary: Summary; dir: string }> {
  const write = options.write ?? ((text: string) => process.stdout.write(text));
  const python = findPython();
  // A rank per GPU, as torchrun would start them; two at most.
  const ranks = options.real ? Math.min(2, cudaDevices(python)) : 2;
  for (const file of [CLI, TRAIN, HOOK]) if (!existsSync(file)) throw new DemoError(`${file} is missing: run the demo from a built checkout (npm run demo)`);

  const regimeS = options.fast ? 8 : 20;
  const story = demoStory(regimeS, ranks);
  const dir = path.resolve(options.out ?? `stepscope-demo-${stamp(new Date())}`);
  await mkdir(dir, { recursive: true });
  const scenarioFile = path.join(dir, 'gpu-scenario.json');
  await writeFile(scenarioFile, JSON.stringify(story.scenario, null, 2) + '\n');

  const plot = options.real
    ? 'compute-bound → input-bound → compute-bound again (a real model on the GPU, which cannot be made to throttle: its own counters say whether it does)'
    : 'compute-bound → input-bound → throttled (simulated GPUs)';
  write(`stepscope demo: a ${story.ranks}-rank training loop, ${regimeS} s each ${plot}; files in ${dir}\n`);
  const sidecar: SidecarChild = await startSidecar(
    CLI,
    [
      '--host', '127.0.0.1', '--port', '0', '--out', dir, '--exit-on-end', '--end-grace', '2', '--log-level', 'info',
      '--window', options.fast ? '2' : '4', '--hold', options.fast ? '1' : '2',
      ...(options.real ? [] : ['--gpu-source', 'sim', '--sim-scenario', scenarioFile, '--gpu-interval', '250']),
    ],
    path.join(dir, 'sidecar.log'),
  );
  const loops: PythonChild[] = Array.from({ length: story.ranks }, (_, rank) =>
    startPython(
      python,
      [TRAIN, '--t0', String(sidecar.gpuStartedAt / 1000), '--schedule', JSON.stringify(story.schedule(rank)), ...(options.real ? ['--real'] : [])],
      {
        PYTHONPATH: [HOOK, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
        STEPSCOPE_URL: `${sidecar.url}/v1/ingest`,
        STEPSCOPE_JOB: JOB,
        RANK: String(rank),
        LOCAL_RANK: String(rank),
        WORLD_SIZE: String(story.ranks),
      },
      path.join(dir, `rank-${rank}.log`),
    ),
  );

  // Ctrl-C (which reaches the loop and the sidecar too) or quitting the viewer ends the job early:
  // the sidecar still writes the summary of what it saw.
  let interrupted = false;
  const interrupt = new Promise<void>((resolve) => process.once('SIGINT', () => ((interrupted = true), resolve())));
  const viewer = startWatch({ targets: [sidecar.url], plain: options.plain, plainEveryMs: 1000, stop: Promise.race([sidecar.exited.then(() => undefined), interrupt]) });
  void viewer.done.then(() => {
    loops.forEach((loop) => loop.stop());
    sidecar.stop();
  });
  const runs = await Promise.all(loops.map((loop) => loop.exited));
  const failed = interrupted ? undefined : runs.find((run) => run.code !== 0 && run.signal !== 'SIGTERM');
  if (failed) {
    sidecar.stop();
    await viewer.done;
    throw new DemoError(`the training loop failed (exit ${failed.code}): ${failed.stderr.trim().split('\n').at(-1) ?? ''} (see ${dir}/rank-*.log)`);
  }
  const exit = await sidecar.exited;
  await viewer.done;
  if (exit.code !== 0) throw new DemoError(`the sidecar exited with ${exit.code ?? exit.signal} (see ${dir}/sidecar.log)`);

  const summaryFile = path.join(dir, 'summary.json');
  if (!existsSync(summaryFile)) throw new DemoError(`no summary was written (see ${dir}/sidecar.log)`);
  const summary = await readSummary(summaryFile);
  write('\n' + renderSummary(summary, 'text'));
  write(`\nSummary written to ${path.join(dir, 'summary.md')} (and summary.json), charts in ${path.join(dir, 'report.html')}; logs and the journal are beside it.\n`);
  return { summary, dir };
}
