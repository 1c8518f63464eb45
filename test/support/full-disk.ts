import { nodeWalFs, type WalFileHandle, type WalFs } from '../../src/journal/wal-fs.js';

/**
 * The real file system, with a switch that makes every write fail as a full disk does (ENOSPC), or
 * write only part of what it was given: the disk filling up and emptying again, on demand.
 */
export class FullDisk implements WalFs {
  mode: 'ok' | 'enospc' | 'short' = 'ok';

  stat = nodeWalFs.stat;
  mkdir = nodeWalFs.mkdir;
  readdir = nodeWalFs.readdir;
  rename = nodeWalFs.rename;
  unlink = nodeWalFs.unlink;
  syncDir = nodeWalFs.syncDir;

  async open(path: string, flags: Parameters<WalFs['open']>[1]): Promise<WalFileHandle> {
    const handle = await nodeWalFs.open(path, flags);
    return {
      write: async (data, position) => {
        if (this.mode === 'enospc') throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', syscall: 'write' });
        if (this.mode === 'short') return handle.write(data.subarray(0, Math.floor(data.byteLength / 2)), position);
        return handle.write(data, position);
      },
      read: (into, position) => handle.read(into, position),
      datasync: () => handle.datasync(),
      truncate: (length) => handle.truncate(length),
      close: () => handle.close(),
    };
  }
}
