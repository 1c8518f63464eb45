import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { SUMMARY_SCHEMA, type Summary } from '../protocol/summary.js';
import { fileSafeName } from '../model/names.js';
import { parseInput } from '../protocol/parse.js';
import { SummarySchema } from '../protocol/summary.js';
import { htmlReport } from './report-html-file.js';
import { renderSummary } from './summary-render.js';

/** Writes `file` whole or not at all: a reader never sees half of it. */
export async function writeAtomically(file: string, text: string): Promise<void> {
  const partial = `${file}.partial`;
  await writeFile(partial, text);
  await rename(partial, file);
}

/** `summary-<job>` for a job's first run, `summary-<job>.<run>` for the runs after it; the job name encoded (fileSafeName). */
export function summaryBase(job: string, run: number): string {
  return `summary-${fileSafeName(job)}${run > 1 ? `.${run}` : ''}`;
}

/** Arrays of plain numbers (the series) on one line each: the rest indented for people to read. */
export function summaryJson(summary: Summary): string {
  return JSON.stringify(summary, null, 2).replace(/\[\s*(-?[\d.eE+-]+|null)((?:,\s*(?:-?[\d.eE+-]+|null))*)\s*\]/g, (_match, first: string, rest: string) => `[${first}${rest.replace(/\s+/g, '')}]`) + '\n';
}

/** `report-<job>[.<run>]`, beside the run's summary files. */
export function reportBase(job: string, run: number): string {
  return summaryBase(job, run).replace(/^summary-/, 'report-');
}

/**
 * Writes summary.json, summary.md and report.html (the latest run to end) and
 * summary-<job>[.<run>].json/.md and report-<job>[.<run>].html (every run, each its own, never
 * overwritten by a later run) into `dir`. Each file appears whole or not at all: a reader never sees
 * half a summary.
 */
export async function writeSummaryFiles(dir: string, summary: Summary, run = 1): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const json = summaryJson(summary);
  const md = renderSummary(summary, 'md');
  const html = await htmlReport(summary);
  const base = summaryBase(summary.job, run);
  const report = reportBase(summary.job, run);
  const files: Array<[string, string]> = [
    [`${base}.json`, json],
    [`${base}.md`, md],
    [`${report}.html`, html],
    ['summary.json', json],
    ['summary.md', md],
    ['report.html', html],
  ];
  for (const [name, text] of files) await writeAtomically(path.join(dir, name), text);
  return files.map(([name]) => path.join(dir, name));
}

/** Reads a summary file written by the sidecar, checked whole against its schema; anything else is refused. */
export async function readSummary(file: string): Promise<Summary> {
  let value: unknown;
  try {
    value = JSON.parse(await readFile(file, 'utf8'));
  } catch (error) {
    throw new Error(`${file}: ${(error as Error).message}`);
  }
  if ((value as { schema?: unknown } | null)?.schema !== SUMMARY_SCHEMA) throw new Error(`${file}: not a stepscope summary (expected schema ${SUMMARY_SCHEMA})`);
  try {
    return parseInput(SummarySchema, value, 'summary');
  } catch (error) {
    throw new Error(`${file}: ${(error as Error).message}`);
  }
}
