import path from 'node:path';
import type { Summary } from '../protocol/summary.js';
import { inertJson, inertText } from '../protocol/terminal-text.js';
import { htmlReport } from './report-html-file.js';
import { reportBase, writeAtomically, writeSummaryFiles } from './summary-files.js';
import { renderSummary } from './summary-render.js';

/** How a command that makes a summary (merge, report --prometheus) gives it: printed, as HTML, as the sidecar's files. */
export interface EmitOptions {
  format: 'text' | 'md' | 'json';
  html?: boolean;
  /** Where --html writes (default report-<job>.html here; - for stdout). */
  output?: string;
  /** Also write summary.json, summary.md and report.html there, as a sidecar would. */
  write?: string;
}

/** Prints the summary, or writes its HTML report, with the same renderers a sidecar's summary gets. */
export async function emitSummary(summary: Summary, options: EmitOptions, out: NodeJS.WritableStream = process.stdout): Promise<void> {
  if (options.write) await writeSummaryFiles(options.write, summary);
  if (!options.html) {
    // What the pods named (jobs, hosts, pods) is printed inert.
    out.write(options.format === 'json' ? inertJson(JSON.stringify(summary, null, 2)) + '\n' : inertText(renderSummary(summary, options.format)));
    return;
  }
  const html = await htmlReport(summary);
  if (options.output === '-') {
    out.write(html);
    return;
  }
  const file = options.output ?? path.resolve(`${reportBase(summary.job, 1)}.html`);
  await writeAtomically(file, html);
  out.write(`${file}\n`);
}
