import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { segmentName } from '../src/journal/wal-files.js';
import { nodeWalFs, type WalFileHandle, type WalFs, type WalOpenFlags } from '../src/journal/wal-fs.js';
import { readWal, type WalItem, type WalProblem } from '../src/journal/wal-read.js';
import { Wal, WalFullError, WalWriteError, type WalOptions } from '../src/journal/wal.js';
import { useTempDirs } from './support/temp-dirs.js';

const tempDir = useTempDirs('stepscope-wal-faults-');

type Op = 'write' | 'datasync' | 'truncate' | 'open' | 'rename' | 'syncDir';

const DESCRIPTIONS: Record<string, string> = {
  ENOSPC: 'no space left on device',
  EIO: 'i/o error',
  EROFS: 'read-only file system',
};

function systemError(code: string, syscall: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: ${DESCRIPTIONS[code] ?? 'failed'}, ${syscall}`), { code, syscall });
}

/**
 * The real file operations, with faults on demand: the next N calls of an operation fail with a
 * code, or the next write writes only its first bytes (a short write). After every change it
 * measures the folder, so a test can check the cap held at every moment, not only between steps.
 */
class FaultFs implements WalFs {
  private faults: Array<{ op: Op; code: string; times: number }> = [];
  private shorts: number[] = [];
  /** While set, writes wait on it: lets a test queue appends behind a write in flight. */
  hold: Promise<void> | null = null;
  maxSeen = 0;

  constructor(private readonly dir: string) {}

  fail(op: Op, code: string, times = 1): void {
    this.faults.push({ op, code, times });
  }

  /** The next write writes only `bytes` bytes and says so. */
  short(bytes: number): void {
    this.shorts.push(bytes);
  }

  clear(): void {
    this.faults = [];
    this.shorts = [];
  }

  check(op: Op): void {
    const fault = this.faults.find((f) => f.op === op);
    if (!fault) return;
    fault.times -= 1;
    if (fault.times <= 0) this.faults.splice(this.faults.indexOf(fault), 1);
    throw systemError(fault.code, op === 'syncDir' ? 'fsync' : op);
  }

  measure(): void {
    const bytes = readdirSync(this.dir)
      .filter((name) => /^(wal-\d{8}\.log|checkpoint-\d{8}\.json(\.tmp)?)$/.test(name))
      .reduce((sum, name) => sum + statSync(path.join(this.dir, name)).size, 0);
    this.maxSeen = Math.max(this.maxSeen, bytes);
  }

  takeShort(): number | undefined {
    return this.shorts.shift();
  }

  stat(file: string) {
    return nodeWalFs.stat(file);
  }
  mkdir(dir: string) {
    return nodeWalFs.mkdir(dir);
  }
  readdir(dir: string) {
    return nodeWalFs.readdir(dir);
  }
  async open(file: string, flags: WalOpenFlags): Promise<WalFileHandle> {
    this.check('open');
    const handle = await nodeWalFs.open(file, flags);
    this.measure();
    return new FaultHandle(this, handle);
  }
  async rename(from: string, to: string) {
    this.check('rename');
    await nodeWalFs.rename(from, to);
    this.measure();
  }
  async unlink(file: string) {
    await nodeWalFs.unlink(file);
    this.measure();
  }
  async syncDir(dir: string) {
    this.check('syncDir');
    await nodeWalFs.syncDir(dir);
  }
}

class FaultHandle implements WalFileHandle {
  constructor(
    private readonly fs: FaultFs,
    private readonly real: WalFileHandle,
  ) {}

  async write(data: Uint8Array, position: number): Promise<number> {
    if (this.fs.hold) await this.fs.hold;
    this.fs.check('write');
    const short = this.fs.takeShort();
    const written = await this.real.write(short === undefined ? data : data.subarray(0, short), position);
    this.fs.measure();
    return written;
  }
  read(into: Uint8Array, position: number) {
    return this.real.read(into, position);
  }
  async datasync() {
    this.fs.check('datasync');
    await this.real.datasync();
  }
  async truncate(length: number) {
    this.fs.check('truncate');
    await this.real.truncate(length);
    this.fs.measure();
  }
  close() {
    return this.real.close();
  }
}

type Settled = { ok: true } | { ok: false; error: unknown };
function settle(promise: Promise<void>): Promise<Settled> {
  return promise.then(
    () => ({ ok: true }),
    (error: unknown) => ({ ok: false, error }),
  );
}

async function readAll(dir: string): Promise<{ items: WalItem[]; bad: WalProblem[] }> {
  const items: WalItem[] = [];
  const bad: WalProblem[] = [];
  for await (const item of readWal(dir, { onBad: (problem) => bad.push(problem) })) items.push(item);
  return { items, bad };
}

async function readEntries(dir: string): Promise<unknown[]> {
  return (await readAll(dir)).items.filter((item) => item.kind === 'entry').map((item) => item.value);
}

interface Setup {
  dir: string;
  fs: FaultFs;
  wal: Wal;
  clock: { now: number };
}

async function setup(options: Partial<WalOptions> = {}): Promise<Setup> {
  const dir = tempDir();
  const fs = new FaultFs(dir);
  const clock = { now: 10_000 };
  const wal = await Wal.open({
    dir,
    maxBytes: 1 << 30,
    flushDelayMs: 0,
    retryMs: 1000,
    fs,
    now: () => clock.now,
    ...options,
  });
  return { dir, fs, wal, clock };
}

/** What the journal promised and what reads back: nothing refused is there, nothing acknowledged is missing. */
async function expectHonest(dir: string, resolved: unknown[], rejected: unknown[]): Promise<void> {
  const read = await readEntries(dir);
  for (const value of rejected) expect(read).not.toContainEqual(value);
  expect(read).toEqual(resolved);
}

describe('Wal write failures', () => {
  for (const code of ['ENOSPC', 'EIO', 'EROFS']) {
    it(`a write failing with ${code} rejects its batch, flips health, refuses until retryMs, then recovers`, async () => {
      const { dir, fs, wal, clock } = await setup();
      await wal.append('x');
      fs.fail('write', code);
      const failed = await Promise.all([settle(wal.append('a1')), settle(wal.append('a2'))]);
      for (const result of failed) {
        expect(result.ok).toBe(false);
        if (!result.ok) {
          expect(result.error).toBeInstanceOf(WalWriteError);
          expect(result.error).toMatchObject({ code });
        }
      }
      const health = wal.health();
      expect(health).toMatchObject({ ok: false, writeErrors: 1, reason: `journal write failed: ${code}: ${DESCRIPTIONS[code]}, write` });
      expect(health.lastError).toBe(health.reason);

      // Within retryMs: refused at once with the same error, nothing is tried.
      clock.now += 999;
      await expect(wal.append('too soon')).rejects.toMatchObject({ code });
      expect(wal.health().writeErrors).toBe(1);

      clock.now += 1;
      await wal.append('c');
      expect(wal.health()).toMatchObject({ ok: true, reason: null, writeErrors: 1 });
      await wal.close();
      await expectHonest(dir, ['x', 'c'], ['a1', 'a2', 'too soon']);
    });
  }

  it('epoch: appends queued behind a failing write are rejected too; later ones succeed once it clears', async () => {
    const { dir, fs, wal, clock } = await setup();
    await wal.append('x');
    let release = (): void => undefined;
    fs.hold = new Promise<void>((resolve) => (release = resolve));
    fs.fail('write', 'ENOSPC');
    const a = settle(wal.append('A'));
    await new Promise((resolve) => setTimeout(resolve, 5)); // A's write is now in flight, held
    const b = settle(wal.append('B'));
    fs.hold = null;
    release();
    expect(await a).toMatchObject({ ok: false, error: { code: 'ENOSPC' } });
    expect(await b).toMatchObject({ ok: false, error: { code: 'ENOSPC' } });
    // B would have been written fine on its own: it is rejected because A was.
    expect(wal.health().writeErrors).toBe(1);
    clock.now += 1000;
    await wal.append('C');
    await wal.close();
    await expectHonest(dir, ['x', 'C'], ['A', 'B']);
  });

  it('a short write resolves nothing of its batch and is cut back off the segment', async () => {
    const { dir, fs, wal } = await setup();
    await wal.append('x');
    const goodSize = statSync(path.join(dir, segmentName(1))).size;
    fs.short(25); // one record and a half of the three below
    const results = await Promise.all(['r1', 'r2', 'r3'].map((value) => settle(wal.append(value))));
    expect(results.every((result) => !result.ok)).toBe(true);
    expect(results[0]).toMatchObject({ ok: false, error: { code: 'ESHORTWRITE', message: 'journal write failed: short write: 25 of 42 bytes' } });
    expect(statSync(path.join(dir, segmentName(1))).size).toBe(goodSize);
    expect(wal.bytes()).toBe(goodSize);
    expect(wal.health()).toMatchObject({ ok: false, writeErrors: 1 });
    await wal.close();
    await expectHonest(dir, ['x'], ['r1', 'r2', 'r3']);
    expect((await readAll(dir)).bad).toEqual([]);
  });

  it('a failing fdatasync rejects the batch although its bytes were written, and cuts them off', async () => {
    const { dir, fs, wal, clock } = await setup();
    await wal.append('x');
    fs.fail('datasync', 'EIO');
    expect(await settle(wal.append('unsynced'))).toMatchObject({ ok: false, error: { code: 'EIO' } });
    expect(wal.health().reason).toBe('journal write failed: EIO: i/o error, datasync');
    clock.now += 1000;
    await wal.append('y');
    await wal.close();
    await expectHonest(dir, ['x', 'y'], ['unsynced']);
    expect((await readAll(dir)).bad).toEqual([]);
  });

  it('when the failed bytes cannot be cut off, they are blanked and writing moves to a fresh segment', async () => {
    const { dir, fs, wal, clock } = await setup();
    await wal.append('x');
    fs.short(28); // two whole records (14 bytes each) of three: they must not read back
    fs.fail('truncate', 'EIO');
    const results = await Promise.all(['r1', 'r2', 'r3'].map((value) => settle(wal.append(value))));
    expect(results.every((result) => !result.ok)).toBe(true);
    clock.now += 1000;
    await wal.append('y');
    await wal.close();
    const { bad } = await readAll(dir);
    await expectHonest(dir, ['x', 'y'], ['r1', 'r2', 'r3']);
    expect(bad).toEqual([{ file: segmentName(1), offset: 13, bytes: 28, reason: 'not a record line' }]);
    expect(readdirSync(dir)).toContain(segmentName(2));
  });

  it('fdatasync and truncate both failing: blanked, fresh segment, nothing refused reads back', async () => {
    const { dir, fs, wal, clock } = await setup();
    await wal.append('x');
    fs.fail('datasync', 'EIO');
    fs.fail('truncate', 'EIO');
    expect((await settle(wal.append('lost'))).ok).toBe(false);
    clock.now += 1000;
    await wal.append('y');
    await wal.close();
    await expectHonest(dir, ['x', 'y'], ['lost']);
  });

  it('a segment that cannot be created fails the batch (counted) and is retried', async () => {
    const { dir, fs, wal, clock } = await setup({ segmentBytes: 20 });
    await wal.append('first record');
    fs.fail('open', 'ENOSPC');
    expect(await settle(wal.append('no room for a segment'))).toMatchObject({ ok: false, error: { code: 'ENOSPC' } });
    expect(wal.health().writeErrors).toBe(1);
    clock.now += 1000;
    await wal.append('second');
    await wal.close();
    await expectHonest(dir, ['first record', 'second'], ['no room for a segment']);
    expect((await readAll(dir)).bad).toEqual([]);
  });

  it('a checkpoint failing to write keeps the old files and rejects; the next one succeeds', async () => {
    const { dir, fs, wal } = await setup();
    await wal.append('x');
    fs.fail('datasync', 'EIO');
    await expect(wal.checkpoint({ upTo: 1 })).rejects.toMatchObject({ code: 'EIO' });
    expect(wal.health()).toMatchObject({ ok: true, writeErrors: 1, checkpoints: 0 });
    expect(readdirSync(dir).filter((name) => name.includes('checkpoint'))).toEqual([]);
    await wal.append('y');
    await wal.checkpoint({ upTo: 2 });
    await wal.append('z');
    await wal.close();
    const { items } = await readAll(dir);
    expect(items.map((item) => item.value)).toEqual([{ upTo: 2 }, 'z']);
  });

  it('open refuses a folder it cannot start a segment in, with a clear message', async () => {
    const dir = tempDir();
    const fs = new FaultFs(dir);
    fs.fail('open', 'EROFS');
    await expect(Wal.open({ dir, maxBytes: 1000, fs })).rejects.toThrow(/cannot start journal segment in .*EROFS/);
  });
});

describe('Wal cap', () => {
  it('refuses at the cap with WalFullError, never past it, and a small checkpoint frees room', async () => {
    const maxBytes = 630;
    const { dir, fs, wal } = await setup({ maxBytes, segmentBytes: 150 });
    const usage = (): number => {
      fs.measure();
      return fs.maxSeen;
    };
    // 40-byte records: 15 fill it, the 16th does not fit beside them.
    const record = (i: number): string => `record ${String(i).padStart(4, '0')} ${'p'.repeat(16)}`;
    const resolved: string[] = [];
    const rejected: string[] = [];
    for (let i = 0; i < 20; i += 1) {
      const result = await settle(wal.append(record(i)));
      if (result.ok) resolved.push(record(i));
      else {
        expect(result.error).toBeInstanceOf(WalFullError);
        expect(result.error).toMatchObject({ code: 'WAL_FULL', message: `journal at its cap of ${maxBytes} bytes` });
        rejected.push(record(i));
      }
      expect(usage()).toBeLessThanOrEqual(maxBytes);
    }
    expect(resolved).toHaveLength(15);
    expect(wal.bytes()).toBe(600);
    // Refused at the cap is not a failed write: not counted, not retried later.
    expect(wal.health()).toMatchObject({ ok: false, reason: `journal at its cap of ${maxBytes} bytes`, writeErrors: 0 });

    // A checkpoint of a small state (it fits beside what it replaces) frees room: appends succeed again.
    await wal.checkpoint({ applied: 15 });
    expect(wal.health()).toMatchObject({ ok: false, checkpoints: 1 });
    expect(wal.bytes()).toBeLessThan(100);
    await wal.append('after');
    expect(wal.health().ok).toBe(true);
    await wal.close();
    expect(fs.maxSeen).toBeLessThanOrEqual(maxBytes);
    const { items } = await readAll(dir);
    expect(items.map((item) => item.value)).toEqual([{ applied: 15 }, 'after']);
    for (const value of rejected) expect(items.map((item) => item.value)).not.toContainEqual(value);
  });

  it('a checkpoint that cannot fit beside what it replaces fails with WalFullError and deletes nothing', async () => {
    const { dir, fs, wal } = await setup({ maxBytes: 500 });
    await wal.append('a'.repeat(100));
    await wal.append('b'.repeat(100));
    const before = readdirSync(dir);
    await expect(wal.checkpoint({ big: 'c'.repeat(400) })).rejects.toBeInstanceOf(WalFullError);
    // The old files stay (the checkpoint's new, empty segment is there too); no checkpoint file.
    const after = readdirSync(dir);
    for (const name of before) expect(after).toContain(name);
    expect(after.filter((name) => name.startsWith('checkpoint'))).toEqual([]);
    expect(fs.maxSeen).toBeLessThanOrEqual(500);
    await wal.append('d');
    await wal.close();
    expect(await readEntries(dir)).toEqual(['a'.repeat(100), 'b'.repeat(100), 'd']);
  });

  it('a batch refused at the cap takes the appends queued behind it along (epoch)', async () => {
    const { dir, wal } = await setup({ maxBytes: 100, flushDelayMs: 5 });
    await wal.append('x'.repeat(60));
    const results = await Promise.all([settle(wal.append('y'.repeat(60))), settle(wal.append('z'))]);
    expect(results.map((result) => result.ok)).toEqual([false, false]);
    await wal.append('w');
    await wal.close();
    expect(await readEntries(dir)).toEqual(['x'.repeat(60), 'w']);
  });
});
