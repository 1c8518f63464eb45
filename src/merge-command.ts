import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { Option, type Command } from 'commander';
import type { PodSummary } from './analysis/merge-summaries.js';
import type { JobWide } from './protocol/summary.js';
import { fileSafeName } from './model/names.js';
import type { EmitOptions } from './outputs/summary-emit.js';

/**
 * `stepscope merge DIR...`: one summary for a job across its pods, from the summary each pod's
 * sidecar wrote (its --out folder), for clusters without Prometheus; it says which pods and ranks
 * are missing.
 */

/** The summary file of `job` in `dir`: its latest run (summary-<job>[.<run>].json); without a job, summary.json. */
async function summaryIn(dir: string, job: string | undefined): Promise<string | null> {
  if (job === undefined) return path.join(dir, 'summary.json');
  const base = `summary-${fileSafeName(job)}`;
  const runs = (await readdir(dir))
    .map((name) => (name === `${base}.json` ? 1 : name.startsWith(`${base}.`) && /^\d+\.json$/.test(name.slice(base.length + 1)) ? Number(name.slice(base.length + 1, -5)) : 0))
    .filter((run) => run > 0);
  if (runs.length === 0) return null;
  const run = Math.max(...runs);
  return path.join(dir, run > 1 ? `${base}.${run}.json` : `${base}.json`);
}

/** Each target's summary of the job, and the targets that have none (with why). */
export async function readPodSummaries(targets: readonly string[], job: string | undefined): Promise<{ parts: PodSummary[]; missing: JobWide['missing_pods'] }> {
  const { readSummary } = await import('./outputs/summary-files.js');
  const parts: PodSummary[] = [];
  const missing: JobWide['missing_pods'] = [];
  // A summary given twice (the same file by two paths, or a copy of it) counts once: its steps, waste and
  // throughput would otherwise be added twice.
  const seen = new Set<string>();
  for (const target of targets) {
    const info = await stat(target).catch((error: Error) => {
      throw new Error(`${target}: ${error.message}`);
    });
    const dir = info.isDirectory() ? target : path.dirname(target);
    const pod = path.basename(path.resolve(dir));
    const file = info.isDirectory() ? await summaryIn(target, job) : target;
    if (file === null || !(await stat(file).catch(() => null))) {
      missing.push({ pod, why: job === undefined ? 'no summary.json' : `no summary of job ${job}` });
      continue;
    }
    const summary = await readSummary(file);
    if (job !== undefined && summary.job !== job) {
      missing.push({ pod, why: `its summary is of job ${summary.job}` });
      continue;
    }
    const key = `${summary.job}\0${summary.started_at}\0${summary.ranks.map((r) => r.rank).join(',')}`;
    if (seen.has(key)) continue;
    seen.add(key);
    parts.push({ pod, summary });
  }
  return { parts, missing };
}

export function registerMergeCommand(program: Command): void {
  program
    .command('merge')
    .description("one summary for a job across its pods, from each pod's summary (its sidecar's --out folder); says which pods and ranks are missing")
    .argument('<dirs...>', "each pod's --out folder (or a summary file in one)")
    .option('--job <job>', 'the job to merge, where the folders hold several (default: each folder\'s summary.json)')
    .addOption(new Option('--format <format>', 'output format').choices(['text', 'md', 'json']).default('text'))
    .option('--html', 'write the HTML report of the job instead of printing the summary')
    .option('-o, --output <file>', 'where --html writes (default: report-<job>.html here; - for stdout)')
    .option('--write <dir>', 'also write summary.json, summary.md and report.html there, as a sidecar would')
    .action(async (dirs: string[], options: EmitOptions & { job?: string }) => {
      // Imported here, not at start: the CLI declares `merge` without loading it.
      const [{ mergeSummaries }, { emitSummary }] = await Promise.all([import('./analysis/merge-summaries.js'), import('./outputs/summary-emit.js')]);
      const { parts, missing } = await readPodSummaries(dirs, options.job);
      if (parts.length === 0) throw new Error(`no summary to merge: ${missing.map((m) => `${m.pod}: ${m.why}`).join('; ')}`);
      await emitSummary(mergeSummaries(parts, missing), options);
    });
}
