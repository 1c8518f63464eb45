import { closeSync, openSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { checkpointBytesFor, DEFAULT_LIMITS } from '../src/ingest/limits.js';
import { replayJournal } from '../src/journal/replay.js';
import { checkpointName, encodeLine, segmentName } from '../src/journal/wal-files.js';
import { nodeWalFs, type WalFs } from '../src/journal/wal-fs.js';
import { readWal, type WalItem, type WalProblem } from '../src/journal/wal-read.js';
import { Wal } from '../src/journal/wal.js';
import { hello } from './support/entries.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * A checkpoint is read in memory its limits bound: one larger than any the sidecar's --max-jobs ×
 * --max-ranks could write is refused before a byte of it is read (a forged 250 MB one, checksum and
 * all, took 6 GB and minutes), and one within them is parsed a chunk at a time, never as one string.
 */

const tempDir = useTempDirs('stepscope-checkpoint-bound-');

/** node:fs, counting the bytes read from each file and the largest single read. */
function countingFs(): { fs: WalFs; read: Map<string, number>; largestRead: () => number } {
  const read = new Map<string, number>();
  let largest = 0;
  const fs: WalFs = {
    ...nodeWalFs,
    async open(file, flags) {
      const handle = await nodeWalFs.open(file, flags);
      return {
        ...handle,
        write: handle.write.bind(handle),
        datasync: handle.datasync.bind(handle),
        truncate: handle.truncate.bind(handle),
        close: handle.close.bind(handle),
        async read(into, position) {
          largest = Math.max(largest, into.byteLength);
          const n = await handle.read(into, position);
          read.set(path.basename(file), (read.get(path.basename(file)) ?? 0) + n);
          return n;
        },
      };
    },
  };
  return { fs, read, largestRead: () => largest };
}

/** A checkpoint line of `bytes` bytes with a valid crc: a JSON object padded with spaces, written a MiB at a time. */
function writeHugeCheckpoint(file: string, bytes: number): void {
  const head = Buffer.from('{"format":"stepscope.checkpoint/v1","jobs":[]');
  const pad = Buffer.alloc(1024 * 1024, 0x20);
  const tail = Buffer.from('}');
  const padBytes = bytes - 10 - head.length - tail.length;
  let crc = crc32(head);
  for (let left = padBytes; left > 0; left -= pad.length) crc = crc32(pad.subarray(0, Math.min(left, pad.length)), crc);
  crc = crc32(tail, crc);
  const fd = openSync(file, 'w');
  try {
    writeSync(fd, Buffer.from(`${crc.toString(16).padStart(8, '0')} `));
    writeSync(fd, head);
    for (let left = padBytes; left > 0; left -= pad.length) writeSync(fd, pad, 0, Math.min(left, pad.length));
    writeSync(fd, Buffer.concat([tail, Buffer.from('\n')]));
  } finally {
    closeSync(fd);
  }
}

async function readAll(dir: string, fs: WalFs, maxCheckpointBytes: number) {
  const items: WalItem[] = [];
  const bad: WalProblem[] = [];
  for await (const item of readWal(dir, { onBad: (problem) => bad.push(problem), fs, maxCheckpointBytes })) items.push(item);
  return { items, bad };
}

describe('journal checkpoints, bounded', () => {
  it('refuses unread a 250 MB checkpoint with a valid checksum, larger than the default limits could write, and replays what follows it', async () => {
    const dir = tempDir();
    writeHugeCheckpoint(path.join(dir, checkpointName(2)), 250_000_000);
    writeFileSync(path.join(dir, segmentName(2)), encodeLine(hello('a')));
    const bound = checkpointBytesFor(DEFAULT_LIMITS);
    expect(bound).toBeLessThan(250_000_000);
    const { fs, read } = countingFs();
    const { items, bad } = await readAll(dir, fs, bound);
    expect(bad).toEqual([
      { file: checkpointName(2), offset: 0, bytes: 250_000_000, reason: `checkpoint of 250000000 bytes is larger than any this sidecar's limits could write (${bound} bytes): not read` },
      // What it stood for is gone with it, and said so.
      { file: segmentName(1), offset: 0, bytes: 0, reason: 'segment 1 is missing' },
    ]);
    expect(read.get(checkpointName(2)) ?? 0).toBe(0);
    expect(items.map((item) => item.kind)).toEqual(['entry']);
    const { engine, report } = await replayJournal(dir, { maxCheckpointBytes: bound });
    expect(report).toMatchObject({ checkpoint: null, problems: 2 });
    expect(engine.world.jobs.jobCount).toBe(1);
  });

  it('reads a checkpoint within the limits a chunk at a time, checked before it is parsed', async () => {
    const dir = tempDir();
    const value = { format: 'x', rows: Array.from({ length: 60_000 }, (_, i) => ({ i, name: `rank ${i} ✓`, figures: [i / 3, null, true] })) };
    const line = encodeLine(value);
    expect(line.length).toBeGreaterThan(3 * 1024 * 1024);
    writeFileSync(path.join(dir, checkpointName(1)), line);
    const { fs, largestRead } = countingFs();
    const { items, bad } = await readAll(dir, fs, line.length);
    expect(bad).toEqual([]);
    expect(items).toEqual([{ kind: 'checkpoint', value, file: checkpointName(1) }]);
    expect(largestRead()).toBeLessThanOrEqual(1024 * 1024);
    // One byte of the bound short: refused.
    expect((await readAll(dir, fs, line.length - 1)).bad[0]!.reason).toMatch(/larger than any/);
  });

  it('does not write a checkpoint its reader would refuse: the segments it would replace are kept', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: 1 << 30, maxCheckpointBytes: 1000 });
    await wal.append({ kept: true });
    await expect(wal.checkpoint({ big: 'x'.repeat(2000) })).rejects.toMatchObject({ code: 'WAL_TOO_LARGE' });
    await wal.close();
    const { items } = await readAll(dir, nodeWalFs, 1000);
    expect(items.map((item) => item.value)).toEqual([{ kept: true }]);
  });
});
