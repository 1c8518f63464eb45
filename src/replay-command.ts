import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { Engine } from './engine/engine.js';
import type { JournalEntry } from './engine/entries.js';
import type { EndedRun } from './engine/snapshot.js';
import { checkpointBytesFor, type IngestLimits } from './ingest/limits.js';
import { replayJournal } from './journal/replay.js';
import { inertJson, inertLine, inertText } from './protocol/terminal-text.js';
import { renderSummary } from './outputs/summary-render.js';
import { writeSummaryFiles } from './outputs/summary-files.js';

export interface ReplayCommandOptions {
  speed?: number;
  format: 'text' | 'md' | 'json';
  write?: string;
  /** The recording sidecar's --max-jobs and --max-ranks: how large a checkpoint it could have written. */
  limits?: Partial<IngestLimits>;
  out?: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `stepscope replay`: the verdicts, timeline and summary of every run in a recording, recomputed by
 * the same engine from the same entries, so two people with the same journal see the same diagnosis.
 */
export async function runReplay(target: string, options: ReplayCommandOptions): Promise<number> {
  const out = options.out ?? process.stdout;
  const err = options.err ?? process.stderr;
  let dir = target;
  try {
    const info = await stat(target);
    if (!info.isDirectory() && !info.isFile()) throw new Error('not a folder or a regular file (a FIFO, socket or device cannot be a journal)');
    if (!info.isDirectory()) dir = path.dirname(target);
  } catch (error) {
    err.write(`stepscope replay: ${target}: ${(error as Error).message}\n`);
    return 1;
  }
  const ended: EndedRun[] = [];
  let lastAt: number | null = null;
  const paced = options.speed !== undefined;
  const onEntry = async (entry: JournalEntry, engine: Engine) => {
    if (paced && lastAt !== null && entry.at > lastAt) await sleep(Math.min(10_000, (entry.at - lastAt) / options.speed!));
    lastAt = Math.max(lastAt ?? entry.at, entry.at);
    if (!paced || (entry.t !== 'tick' && entry.t !== 'stop')) return;
    const snapshot = engine.snapshot();
    if (snapshot.at !== entry.at) return;
    ended.push(...snapshot.ended);
    for (const event of snapshot.events) {
      const who = event.rank === null ? `job ${event.job}` : `job ${event.job} rank ${event.rank}`;
      out.write(inertLine(`${new Date(event.at).toISOString()} ${who}: ${event.from ?? '-'} → ${event.to}${event.cause ? ` (${event.cause})` : ''}: ${event.judgement.evidence.rule}`) + '\n');
    }
  };
  // At once, ticks publish nothing and the runs that ended come with the one snapshot at the end.
  const { engine, report } = await replayJournal(dir, { onEntry, publishTicks: paced, maxCheckpointBytes: checkpointBytesFor(options.limits) });
  if (!paced) ended.push(...engine.snapshot().ended);
  if (report.problems + report.skipped > 0) {
    err.write(`stepscope replay: ${report.problems} unreadable and ${report.skipped} unusable entries skipped, e.g.:\n`);
    for (const example of report.examples.slice(0, 5)) err.write(`  ${example.file} at byte ${example.offset}: ${inertLine(example.reason)}\n`);
  }
  if (report.entries === 0 && !report.checkpoint) {
    err.write(`stepscope replay: no journal in ${dir}\n`);
    return 1;
  }
  // Runs still going when the recording stops are summarised as of its last entry.
  const runs = [...ended, ...engine.world.jobs.liveJobs().flatMap((job) => engine.runSummary(job, lastAt ?? engine.snapshot().at))];
  for (const run of runs) {
    // A journal holds what hooks and collectors named: printed inert.
    out.write(options.format === 'json' ? inertJson(JSON.stringify(run.summary, null, 2)) + '\n' : inertText(renderSummary(run.summary, options.format)) + '\n');
    if (options.write) await writeSummaryFiles(options.write, run.summary, run.run);
  }
  err.write(`stepscope replay: ${report.entries} entries, ${runs.length} run(s), ${report.ms} ms\n`);
  return 0;
}
