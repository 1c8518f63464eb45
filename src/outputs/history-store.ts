import { mkdir, readdir, readFile, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Summary } from '../analysis/summary.js';
import { fileSafeName } from '../model/names.js';
import { parseInput } from '../protocol/parse.js';
import type { RunRecord } from '../protocol/runs.js';
import { entryFileName, historyEntry, HistoryEntrySchema, type HistoryEntry } from './history.js';
import { writeAtomically } from './summary-files.js';

/**
 * The run history on disk: `<dir>/<job>/<ended>-run<N>-<fingerprint>.json`, one file a run, the
 * newest `keep` of each job kept. Each file is written whole (a temporary file renamed) and read
 * back through its schema: a file that does not read or validate is skipped, with the reason.
 */

const ENTRY = /^\d{8}T\d{9}Z-run\d+-[0-9a-f]{12}\.json$/;

export interface Skipped {
  file: string;
  reason: string;
}

export class HistoryStore {
  private readonly jobs = new Map<string, HistoryEntry[]>();
  private readonly loading = new Map<string, Promise<void>>();
  /** Files that could not be used, with why; the caller logs them. */
  readonly skipped: Skipped[] = [];

  constructor(
    readonly dir: string,
    private readonly keep: number,
    private readonly onSkip: (skipped: Skipped) => void = () => undefined,
  ) {}

  /** The job's runs, oldest first, as loaded so far (empty until `load` has read them). */
  entries(job: string): readonly HistoryEntry[] {
    return this.jobs.get(job) ?? [];
  }

  /** The job's runs, oldest first: read from disk the first time, then as held (with the runs added since). */
  async load(job: string): Promise<readonly HistoryEntry[]> {
    let pending = this.loading.get(job);
    if (!pending) {
      pending = this.read(job).then((entries) => void this.jobs.set(job, entries));
      this.loading.set(job, pending);
    }
    await pending;
    return this.entries(job);
  }

  /** The files of the job's folder that were skipped. */
  skippedOf(job: string): Skipped[] {
    const folder = this.folderOf(job);
    return this.skipped.filter((s) => s.file === folder || path.dirname(s.file) === folder);
  }

  /** Keeps a run that ended; drops the job's oldest beyond `keep`. Resolves with the file written. */
  async add(summary: Summary, record: RunRecord): Promise<string> {
    const entries = await this.load(summary.job);
    const folder = this.folderOf(summary.job);
    await mkdir(folder, { recursive: true });
    const file = path.join(folder, entryFileName(record));
    await writeAtomically(file, JSON.stringify(historyEntry(summary, record)) + '\n');
    const next = [...entries.filter((e) => entryFileName(e.record) !== entryFileName(record)), historyEntry(summary, record)].sort((a, b) => a.record.ended_at.localeCompare(b.record.ended_at));
    this.jobs.set(summary.job, next.slice(-this.keep));
    await this.prune(folder);
    return file;
  }

  private folderOf(job: string): string {
    return path.join(this.dir, fileSafeName(job));
  }

  private async read(job: string): Promise<HistoryEntry[]> {
    const folder = this.folderOf(job);
    let names: string[];
    try {
      names = (await readdir(folder)).filter((name) => ENTRY.test(name)).sort();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      this.skip(folder, (error as Error).message);
      return [];
    }
    const entries: HistoryEntry[] = [];
    for (const name of names.slice(-this.keep)) {
      const file = path.join(folder, name);
      try {
        const entry = parseInput(HistoryEntrySchema, JSON.parse(await readFile(file, 'utf8')), 'entry');
        if (entry.record.job !== job || entry.summary.job !== job) throw new Error(`holds job ${JSON.stringify(entry.record.job)}, not ${JSON.stringify(job)}`);
        entries.push(entry);
      } catch (error) {
        this.skip(file, (error as Error).message);
      }
    }
    return entries.sort((a, b) => a.record.ended_at.localeCompare(b.record.ended_at));
  }

  private skip(file: string, reason: string): void {
    const skipped = { file, reason: reason.slice(0, 300) };
    this.skipped.push(skipped);
    this.onSkip(skipped);
  }

  /** Removes the oldest entry files beyond `keep` (files of other names are left alone). */
  private async prune(folder: string): Promise<void> {
    const names = (await readdir(folder)).filter((name) => ENTRY.test(name)).sort();
    for (const name of names.slice(0, Math.max(0, names.length - this.keep))) {
      await unlink(path.join(folder, name)).catch(() => undefined);
    }
  }
}
