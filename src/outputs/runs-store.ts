import { mkdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Summary } from '../protocol/summary.js';
import { IoLimiter, IoTimeoutError, readFolder, readRegularFile } from '../io/bounded-read.js';
import { sidecarNow } from '../model/clock.js';
import { fileSafeName } from '../model/names.js';
import { parseInput } from '../protocol/parse.js';
import type { RunRecord } from '../protocol/runs.js';
import { entryFileName, pastRunEntry, PastRunEntrySchema, type PastRunEntry } from './past-runs.js';
import { writeAtomically } from './summary-files.js';

/**
 * The past runs on disk (the run history): `<dir>/<job>/<ended>-run<N>-<fingerprint>.json`, one file a run, the
 * newest `keep` of each job kept. Each file is written whole (a temporary file renamed) and read
 * back through its schema: a file that does not read or validate is skipped, with the reason.
 *
 * What is held in memory is bounded whatever names are asked for: the jobs read are kept in a
 * least-recently-used cache of at most `cacheJobs` jobs and `cacheBytes` bytes (as read), and a name
 * with nothing on disk is answered without being kept (unless the caller says it is a job it holds).
 * Reads go through a bounded-read IoLimiter: regular files only, a few at a time, with a timeout.
 */

const ENTRY = /^\d{8}T\d{9}Z-run\d+-[0-9a-f]{12}\.json$/;

export interface Skipped {
  file: string;
  reason: string;
}

export interface HistoryCacheLimits {
  jobs: number;
  bytes: number;
}

/** 128 jobs or 32 MiB of entry files, whichever comes first (a job's 20 summaries are ~0.1–1 MiB). */
export const HISTORY_CACHE: HistoryCacheLimits = { jobs: 128, bytes: 32 * 1024 * 1024 };
/** A history file is one summary without its series: far below this. */
const MAX_ENTRY_BYTES = 8 * 1024 * 1024;
/** Files looked at in a job's folder: it holds `keep` entries and what is being written. */
const MAX_FOLDER_ENTRIES = 10_000;
const MAX_SKIPPED_PER_JOB = 64;
/** The history folder's job folders are listed again at most this often: a name without one is answered without I/O. */
const LISTING_MS = 10_000;

interface Held {
  entries: PastRunEntry[];
  /** The bytes of its files as read (each file's length), what the cache bound counts. */
  bytes: number[];
  skipped: Skipped[];
}

export class PastRunsStore {
  /** Insertion order is recency: a job read or used is moved to the end. */
  private readonly cache = new Map<string, Held>();
  private cachedBytes = 0;
  private readonly loading = new Map<string, Promise<Held | null>>();
  /** The job folders there are (null: not listed yet, or too many to list), and when they were listed. */
  private folders: { names: Set<string>; at: number } | null = null;
  private listing: Promise<void> | null = null;

  constructor(
    readonly dir: string,
    private readonly keep: number,
    private readonly onSkip: (skipped: Skipped) => void = () => undefined,
    private readonly io = new IoLimiter(),
    readonly limits: HistoryCacheLimits = HISTORY_CACHE,
  ) {}

  /**
   * The job's runs, oldest first: read from disk unless held, then held. `hold`: keep the job even
   * with nothing on disk (a job the sidecar has, asked about every tick); otherwise such a name is
   * not kept, so names from requests cannot grow memory.
   */
  async load(job: string, hold = false): Promise<readonly PastRunEntry[]> {
    const held = this.cache.get(job);
    if (held) {
      this.touch(job, held);
      return held.entries;
    }
    let pending = this.loading.get(job);
    if (!pending) {
      pending = this.read(job).finally(() => this.loading.delete(job));
      this.loading.set(job, pending);
    }
    const read = await pending;
    if (!read) {
      if (hold) this.put(job, { entries: [], bytes: [], skipped: [] });
      return [];
    }
    if (!this.cache.has(job)) this.put(job, read);
    return read.entries;
  }

  /** The files of the job's folder that were skipped when it was last read. */
  skippedOf(job: string): Skipped[] {
    return this.cache.get(job)?.skipped ?? [];
  }

  /** Keeps a run that ended; drops the job's oldest beyond `keep`. Resolves with the file written. */
  async add(summary: Summary, record: RunRecord): Promise<string> {
    await this.load(summary.job, true);
    const folder = this.folderOf(summary.job);
    await mkdir(folder, { recursive: true });
    this.folders?.names.add(path.basename(folder));
    const file = path.join(folder, entryFileName(record));
    const entry = pastRunEntry(summary, record);
    const text = JSON.stringify(entry) + '\n';
    await writeAtomically(file, text);
    const held = this.cache.get(summary.job) ?? { entries: [], bytes: [], skipped: [] };
    const kept = held.entries
      .map((e, i) => ({ e, bytes: held.bytes[i]! }))
      .filter(({ e }) => entryFileName(e.record) !== entryFileName(record))
      .concat({ e: entry, bytes: Buffer.byteLength(text) })
      .sort((a, b) => a.e.record.ended_at.localeCompare(b.e.record.ended_at))
      .slice(-this.keep);
    this.drop(summary.job);
    this.put(summary.job, { entries: kept.map((k) => k.e), bytes: kept.map((k) => k.bytes), skipped: held.skipped });
    await this.prune(folder);
    return file;
  }

  private folderOf(job: string): string {
    return path.join(this.dir, fileSafeName(job));
  }

  private touch(job: string, held: Held): void {
    this.cache.delete(job);
    this.cache.set(job, held);
  }

  private put(job: string, held: Held): void {
    this.drop(job);
    this.cache.set(job, held);
    this.cachedBytes += sum(held.bytes);
    // The least recently used go first; the job just put stays even if it alone passes the bytes.
    for (const [oldest] of this.cache) {
      if (oldest === job || (this.cache.size <= this.limits.jobs && this.cachedBytes <= this.limits.bytes)) break;
      this.drop(oldest);
    }
  }

  private drop(job: string): void {
    const held = this.cache.get(job);
    if (!held) return;
    this.cachedBytes -= sum(held.bytes);
    this.cache.delete(job);
  }

  /** Whether the job has a folder, from the listing (listed again once it is LISTING_MS old): names from requests cost no I/O. */
  private async hasFolder(job: string): Promise<boolean> {
    const name = fileSafeName(job);
    if (this.folders?.names.has(name)) return true;
    if (!this.folders || sidecarNow() - this.folders.at >= LISTING_MS) {
      this.listing ??= readFolder(this.dir, MAX_FOLDER_ENTRIES, this.io)
        .then(
          (names) => void (this.folders = { names: new Set(names), at: sidecarNow() }),
          (error: NodeJS.ErrnoException) => void (this.folders = error.code === 'ENOENT' ? { names: new Set(), at: sidecarNow() } : null),
        )
        .finally(() => (this.listing = null));
      await this.listing;
    }
    // Not listable (too many entries, a slow file system): the job's own folder is read to find out.
    return this.folders ? this.folders.names.has(name) : true;
  }

  /**
   * The job's entries on disk; null when it has no folder. A file system too slow to answer
   * (IoTimeoutError) fails the whole read, so that nothing half-read is kept as the job's history.
   */
  private async read(job: string): Promise<Held | null> {
    if (!(await this.hasFolder(job))) return null;
    const folder = this.folderOf(job);
    const held: Held = { entries: [], bytes: [], skipped: [] };
    let names: string[];
    try {
      names = (await readFolder(folder, MAX_FOLDER_ENTRIES, this.io)).filter((name) => ENTRY.test(name)).sort();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
      if (error instanceof IoTimeoutError) throw error;
      this.skip(held, folder, (error as Error).message);
      return held;
    }
    const read: Array<{ entry: PastRunEntry; bytes: number }> = [];
    for (const name of names.slice(-this.keep)) {
      const file = path.join(folder, name);
      try {
        const bytes = await readRegularFile(file, MAX_ENTRY_BYTES, this.io);
        const entry = parseInput(PastRunEntrySchema, JSON.parse(bytes.toString('utf8')), 'entry');
        if (entry.record.job !== job || entry.summary.job !== job) throw new Error(`holds job ${JSON.stringify(entry.record.job)}, not ${JSON.stringify(job)}`);
        read.push({ entry, bytes: bytes.length });
      } catch (error) {
        if (error instanceof IoTimeoutError) throw error;
        this.skip(held, file, (error as Error).message);
      }
    }
    read.sort((a, b) => a.entry.record.ended_at.localeCompare(b.entry.record.ended_at));
    held.entries = read.map((r) => r.entry);
    held.bytes = read.map((r) => r.bytes);
    return held;
  }

  private skip(held: Held, file: string, reason: string): void {
    const skipped = { file, reason: reason.slice(0, 300) };
    if (held.skipped.length < MAX_SKIPPED_PER_JOB) held.skipped.push(skipped);
    this.onSkip(skipped);
  }

  /** Removes the oldest entry files beyond `keep` (files of other names are left alone). */
  private async prune(folder: string): Promise<void> {
    const names = (await readFolder(folder, MAX_FOLDER_ENTRIES, this.io)).filter((name) => ENTRY.test(name)).sort();
    for (const name of names.slice(0, Math.max(0, names.length - this.keep))) {
      await unlink(path.join(folder, name)).catch(() => undefined);
    }
  }
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
