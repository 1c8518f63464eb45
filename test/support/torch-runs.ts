import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { PythonRun } from './run-python.js';
import { startSidecar, tempDir } from './sidecar.js';

export interface SummaryRun {
  summary: any;
  runs: PythonRun[];
}

/**
 * Starts a real sidecar (no GPU source, --out in a temporary folder, exits once the job has ended),
 * lets `launch` run the training processes against it, and returns the job's summary.json with the
 * runs. A verdict takes over without a hold, so that a run of a few seconds past its warm-up gets
 * one. The sidecar and the folder are gone when this returns, whatever happened.
 */
export async function runWithSidecar(
  launch: (ingestUrl: string, out: string) => Promise<PythonRun[]>,
  args: string[] = [],
  /** Called with the --out folder and its summary before both go: to record the run (STEPSCOPE_RECORD). */
  keep?: (out: string, summary: any) => void,
): Promise<SummaryRun> {
  const out = tempDir('stepscope-torch-');
  const sidecar = await startSidecar(['--gpu-source', 'none', '--out', out, '--exit-on-end', '--end-grace', '1', '--hold', '0', ...args]);
  try {
    const runs = await launch(sidecar.ingestUrl, out);
    for (const run of runs) {
      if (run.code !== 0) throw new Error(`a training process exited with ${run.code}:\n${run.stderr.slice(-4000)}`);
    }
    const exit = await Promise.race([sidecar.exited, new Promise<null>((resolve) => setTimeout(() => resolve(null), 20_000))]);
    if (!exit) throw new Error(`the sidecar did not exit once the job ended; its log: ${JSON.stringify(sidecar.logs.slice(-5))}`);
    const file = path.join(out, 'summary.json');
    if (!existsSync(file)) throw new Error(`no summary.json; sidecar stderr: ${sidecar.stderr.join('')}`);
    const summary = JSON.parse(readFileSync(file, 'utf8'));
    keep?.(out, summary);
    return { summary, runs };
  } finally {
    await sidecar.stop('SIGKILL');
    rmSync(out, { recursive: true, force: true });
  }
}

/** The sum of a rank's step durations, in seconds, from its summary (mean × steps). */
export function stepSeconds(rank: { steps: number; step_ms: { mean: number } }): number {
  return (rank.steps * rank.step_ms.mean) / 1000;
}
