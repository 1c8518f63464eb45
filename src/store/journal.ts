import { createReadStream } from 'node:fs';
import { mkdir, open, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { CounterBatch } from '../protocol/counters.js';
import type { Env, Hello, StepRecord } from '../protocol/messages.js';

/**
 * Append-only record of everything the sidecar accepted, one JSON object a line. A sidecar
 * started again on the same directory replays it and resumes where it was; the same file is a
 * recording that the analysis can be replayed from.
 */

export type JournalEntry =
  | { t: 'hello'; at: number; hello: Hello }
  | { t: 'env'; at: number; session: string; env: Env }
  | { t: 'steps'; at: number; session: string; dropped: number; rows: StepRow[] }
  | { t: 'end'; at: number; session: string; reason: string }
  | { t: 'counters'; at: number; session: string; batch: CounterBatch }
  | { t: 'gpu'; at: number; samples: GpuSample[] }
  | { t: 'host'; at: number; sample: HostSample };

/** A step record as stored: the protocol's `fields` order. */
export type StepRow = (number | null)[];

export const JOURNAL_FILE = 'journal.ndjson';

export function toRow(r: StepRecord): StepRow {
  return [r.seq, r.step, r.endNs, r.durNs, r.dataNs, r.h2dNs, r.computeNs, r.samples, r.gpuH2dNs, r.gpuComputeNs, r.gpuIdleNs];
}

export function fromRow(row: StepRow): StepRecord {
  const at = (i: number) => row[i] ?? null;
  return {
    seq: at(0)!,
    step: at(1)!,
    endNs: at(2)!,
    durNs: at(3)!,
    dataNs: at(4)!,
    h2dNs: at(5)!,
    computeNs: at(6)!,
    samples: at(7),
    gpuH2dNs: at(8),
    gpuComputeNs: at(9),
    gpuIdleNs: at(10),
  };
}

export interface ReplayResult {
  entries: JournalEntry[];
  /** Lines that could not be read (a torn last write is cut off, not counted). */
  corrupt: number;
  truncatedBytes: number;
}

const FLUSH_DELAY_MS = 10;
const SYNC_INTERVAL_MS = 1000;

export class Journal {
  private pending: string[] = [];
  private waiters: Array<{ resolve: () => void; reject: (error: Error) => void }> = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();
  private dirty = false;
  private readonly syncTimer: NodeJS.Timeout;
  private closed = false;

  private constructor(
    private readonly file: FileHandle,
    readonly path: string,
  ) {
    this.syncTimer = setInterval(() => void this.sync(), SYNC_INTERVAL_MS);
    this.syncTimer.unref();
  }

  /** Opens (creating if needed) the journal in `dir`, cutting off a torn last line, and replays it. */
  static async open(dir: string): Promise<{ journal: Journal; replay: ReplayResult }> {
    await mkdir(dir, { recursive: true });
    const file = path.join(dir, JOURNAL_FILE);
    const handle = await open(file, 'a+');
    const truncatedBytes = await cutTornTail(handle);
    const replay = await readEntries(file);
    return { journal: new Journal(handle, file), replay: { ...replay, truncatedBytes } };
  }

  /** Resolves once the entry is written to the file (the OS holds it even if this process is killed). */
  append(entry: JournalEntry): Promise<void> {
    if (this.closed) return Promise.reject(new Error('journal closed'));
    this.pending.push(JSON.stringify(entry) + '\n');
    const written = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.flushTimer ??= setTimeout(() => void this.flush(), FLUSH_DELAY_MS);
    return written;
  }

  flush(): Promise<void> {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = null;
    }
    const data = this.pending.join('');
    const waiters = this.waiters;
    this.pending = [];
    this.waiters = [];
    if (!data) return this.writing;
    this.writing = this.writing.then(async () => {
      try {
        await this.file.write(data);
        this.dirty = true;
        for (const waiter of waiters) waiter.resolve();
      } catch (error) {
        for (const waiter of waiters) waiter.reject(error as Error);
      }
    });
    return this.writing;
  }

  private async sync(): Promise<void> {
    if (!this.dirty || this.closed) return;
    this.dirty = false;
    await this.file.datasync().catch(() => undefined);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.flush();
    this.closed = true;
    clearInterval(this.syncTimer);
    await this.file.datasync().catch(() => undefined);
    await this.file.close();
  }
}

async function cutTornTail(handle: FileHandle): Promise<number> {
  const { size } = await handle.stat();
  if (size === 0) return 0;
  const chunk = Buffer.alloc(64 * 1024);
  let end = size;
  while (end > 0) {
    const start = Math.max(0, end - chunk.length);
    const { bytesRead } = await handle.read(chunk, 0, end - start, start);
    const newline = chunk.subarray(0, bytesRead).lastIndexOf(0x0a);
    if (newline >= 0) {
      const keep = start + newline + 1;
      if (keep < size) await handle.truncate(keep);
      return size - keep;
    }
    end = start;
  }
  await handle.truncate(0);
  return size;
}

async function readEntries(file: string): Promise<Omit<ReplayResult, 'truncatedBytes'>> {
  const entries: JournalEntry[] = [];
  let corrupt = 0;
  if ((await stat(file)).size === 0) return { entries, corrupt };
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line) continue;
    try {
      entries.push(JSON.parse(line) as JournalEntry);
    } catch {
      corrupt += 1;
    }
  }
  return { entries, corrupt };
}
