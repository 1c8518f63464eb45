import { mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { openRegular } from '../io/bounded-read.js';

/**
 * The few file operations the write-ahead log needs, behind an interface so that tests can make
 * any one of them fail (ENOSPC, EIO, a short write, a failing fdatasync or truncate) and check that
 * the log stays honest. `nodeWalFs` is the real thing over node:fs/promises.
 */

export interface WalFileHandle {
  /** One positioned write; resolves to the bytes actually written, which may be fewer than asked. */
  write(data: Uint8Array, position: number): Promise<number>;
  /** Reads up to `into.byteLength` bytes at `position`; 0 at the end of the file. */
  read(into: Uint8Array, position: number): Promise<number>;
  datasync(): Promise<void>;
  truncate(length: number): Promise<void>;
  close(): Promise<void>;
}

/** `r`: read; `wx`: create, failing if the file exists; `w`: create or empty. */
export type WalOpenFlags = 'r' | 'wx' | 'w';

export interface WalFs {
  /** null when nothing is at `path`. */
  stat(path: string): Promise<{ isDirectory: boolean; size: number } | null>;
  /** Creates the directory and its parents; no error if it exists. */
  mkdir(path: string): Promise<void>;
  readdir(path: string): Promise<string[]>;
  open(path: string, flags: WalOpenFlags): Promise<WalFileHandle>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  /** fsync of the directory itself, so that created, renamed and removed names are durable. */
  syncDir(path: string): Promise<void>;
}

class NodeFileHandle implements WalFileHandle {
  constructor(private readonly handle: FileHandle) {}

  async write(data: Uint8Array, position: number): Promise<number> {
    // A single pwrite: a short count is passed up rather than retried, the writer decides.
    const { bytesWritten } = await this.handle.write(data, 0, data.byteLength, position);
    return bytesWritten;
  }

  async read(into: Uint8Array, position: number): Promise<number> {
    const { bytesRead } = await this.handle.read(into, 0, into.byteLength, position);
    return bytesRead;
  }

  datasync(): Promise<void> {
    return this.handle.datasync();
  }

  truncate(length: number): Promise<void> {
    return this.handle.truncate(length);
  }

  close(): Promise<void> {
    return this.handle.close();
  }
}

export const nodeWalFs: WalFs = {
  async stat(path) {
    try {
      const info = await stat(path);
      return { isDirectory: info.isDirectory(), size: info.size };
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return null;
      throw error;
    }
  },
  async mkdir(path) {
    await mkdir(path, { recursive: true, mode: 0o700 });
  },
  readdir(path) {
    return readdir(path);
  },
  async open(path, flags) {
    // Only the sidecar's user reads its journal: it holds what hooks sent and the sessions' resume secrets.
    if (flags !== 'r') return new NodeFileHandle(await open(path, flags, 0o600));
    // A FIFO or device planted in the folder would hang a plain open or read.
    return new NodeFileHandle(await openRegular(path));
  },
  rename(from, to) {
    return rename(from, to);
  },
  unlink(path) {
    return unlink(path);
  },
  async syncDir(path) {
    const handle = await open(path, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  },
};

/** The `code` of a Node system error ('ENOSPC', …), or null for anything else. */
export function errorCode(error: unknown): string | null {
  if (typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string') return error.code;
  return null;
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
