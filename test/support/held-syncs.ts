import { nodeWalFs, type WalFs } from '../../src/journal/wal-fs.js';

/** The journal's file system, whose fdatasyncs from `hold()` on wait for `release()`: what they would acknowledge waits with them. */
export function heldSyncs(): { fs: WalFs; hold: () => void; release: () => void } {
  let gate: Promise<void> | null = null;
  let release!: () => void;
  const fs: WalFs = {
    ...nodeWalFs,
    async open(file, flags) {
      const handle = await nodeWalFs.open(file, flags);
      return {
        write: (data, at) => handle.write(data, at),
        read: (into, at) => handle.read(into, at),
        datasync: async () => {
          await gate;
          return handle.datasync();
        },
        truncate: (length) => handle.truncate(length),
        close: () => handle.close(),
      };
    },
  };
  const hold = () => (gate = new Promise<void>((resolve) => (release = resolve)));
  return { fs, hold, release: () => release() };
}
