import { constants } from 'node:fs';
import { open, readdir, type FileHandle } from 'node:fs/promises';

/**
 * File reads that cannot take the sidecar with them. Node runs file-system calls on a pool of four
 * threads, shared with the journal: a FIFO, a device or a hung network volume among the files a
 * request names would hold threads forever, and the journal's writes (and so every rank's acks)
 * would queue behind them. So reads outside the journal open regular files only (checked on the
 * opened descriptor, opened without blocking), read at most a bound of bytes, and go through an
 * IoLimiter: a few at a time, each given up on after a timeout.
 */

export class IoTimeoutError extends Error {}

export interface IoLimits {
  /** Reads in flight at once: the pool's other threads stay the journal's (Node's pool has 4). */
  concurrency: number;
  /** A caller gives up on a read after this long (waiting for a slot included). */
  timeoutMs: number;
  /** Reads waiting for a slot; past it a read is refused at once. */
  maxWaiting: number;
}

export const DEFAULT_IO_LIMITS: IoLimits = { concurrency: 2, timeoutMs: 5_000, maxWaiting: 64 };

export class IoLimiter {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly limits: IoLimits = DEFAULT_IO_LIMITS) {}

  /**
   * Runs `op` once a slot is free; rejects with IoTimeoutError after `timeoutMs`. A timed-out op
   * keeps its slot until it settles: a call that never returns can hold at most `concurrency` threads.
   */
  run<T>(what: string, op: () => Promise<T>): Promise<T> {
    if (this.running >= this.limits.concurrency && this.waiting.length >= this.limits.maxWaiting) {
      return Promise.reject(new IoTimeoutError(`${what}: too many file reads waiting (${this.waiting.length}); the file system is slow`));
    }
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const timer = setTimeout(() => {
        done = true;
        const queued = this.waiting.indexOf(start);
        if (queued >= 0) this.waiting.splice(queued, 1);
        reject(new IoTimeoutError(`${what}: no answer from the file system within ${this.limits.timeoutMs} ms`));
      }, this.limits.timeoutMs);
      timer.unref();
      const start = () => {
        this.running += 1;
        op().then(
          (value) => {
            if (!done) resolve(value);
          },
          (error: unknown) => {
            if (!done) reject(error instanceof Error ? error : new Error(String(error)));
          },
        ).finally(() => {
          done = true;
          clearTimeout(timer);
          this.running -= 1;
          this.waiting.shift()?.();
        });
      };
      if (this.running < this.limits.concurrency) start();
      else this.waiting.push(start);
    });
  }
}

/**
 * Opens `file` for reading without blocking and checks, on the descriptor, that it is a regular
 * file: a FIFO, socket or device is refused (it would hang a plain open or read, or never end).
 */
export async function openRegular(file: string): Promise<FileHandle> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!(await handle.stat()).isFile()) throw new Error('not a regular file (a FIFO, socket or device)');
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
  return handle;
}

/** A regular file's bytes, at most `maxBytes` of them (a larger file is refused unread), through `limiter`. */
export function readRegularFile(file: string, maxBytes: number, limiter: IoLimiter): Promise<Buffer> {
  return limiter.run(`reading ${file}`, async () => {
    const handle = await openRegular(file);
    try {
      const { size } = await handle.stat();
      if (size > maxBytes) throw new Error(`${size} bytes, more than the ${maxBytes} a file here may have`);
      // One byte more than the size says: a file that grew since is refused rather than cut.
      const buffer = Buffer.allocUnsafe(size + 1);
      let filled = 0;
      for (;;) {
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
        if (filled > size) throw new Error('grew while it was read');
      }
      return buffer.subarray(0, filled);
    } finally {
      await handle.close().catch(() => undefined);
    }
  });
}

/** The names in a folder, through `limiter`, at most `maxEntries` (a folder with more is refused). */
export function readFolder(folder: string, maxEntries: number, limiter: IoLimiter): Promise<string[]> {
  return limiter.run(`listing ${folder}`, async () => {
    const names = await readdir(folder);
    if (names.length > maxEntries) throw new Error(`${names.length} entries, more than the ${maxEntries} a folder here may have`);
    return names;
  });
}
