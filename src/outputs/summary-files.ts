import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { SUMMARY_SCHEMA, type Summary } from '../analysis/summary.js';
import { fileSafeName } from '../model/names.js';
import { renderSummary } from './summary-render.js';

async function writeAtomically(file: string, text: string): Promise<void> {
  const partial = `${file}.partial`;
  await writeFile(partial, text);
  await rename(partial, file);
}

/** `summary-<job>` for a job's first run, `summary-<job>.<run>` for the runs after it; the job name encoded (fileSafeName). */
export function summaryBase(job: string, run: number): string {
  return `summary-${fileSafeName(job)}${run > 1 ? `.${run}` : ''}`;
}

/**
 * Writes summary.json and summary.md (the latest run to end) and summary-<job>[.<run>].json/.md
 * (every run, each its own, never overwritten by a later run) into `dir`. Each file appears whole or
 * not at all: a reader never sees half a summary.
 */
export async function writeSummaryFiles(dir: string, summary: Summary, run = 1): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const json = JSON.stringify(summary, null, 2) + '\n';
  const md = renderSummary(summary, 'md');
  const base = summaryBase(summary.job, run);
  const files: Array<[string, string]> = [
    [`${base}.json`, json],
    [`${base}.md`, md],
    ['summary.json', json],
    ['summary.md', md],
  ];
  for (const [name, text] of files) await writeAtomically(path.join(dir, name), text);
  return files.map(([name]) => path.join(dir, name));
}

/** Reads a summary file written by the sidecar, refusing anything else. */
export async function readSummary(file: string): Promise<Summary> {
  let value: Summary;
  try {
    value = JSON.parse(await readFile(file, 'utf8')) as Summary;
  } catch (error) {
    throw new Error(`${file}: ${(error as Error).message}`);
  }
  if (value?.schema !== SUMMARY_SCHEMA) throw new Error(`${file}: not a stepscope summary (expected schema ${SUMMARY_SCHEMA})`);
  return value;
}
