import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LEGACY_FILE, MAX_RECORD_BYTES, checkpointName, encodeLine, segmentName } from '../src/journal/wal-files.js';
import { readWal, type WalItem, type WalProblem } from '../src/journal/wal-read.js';
import { Wal, WalWriteError } from '../src/journal/wal.js';
import { useTempDirs } from './support/temp-dirs.js';

const tempDir = useTempDirs('stepscope-wal-');

async function readAll(dir: string, maxLineBytes?: number): Promise<{ items: WalItem[]; bad: WalProblem[] }> {
  const items: WalItem[] = [];
  const bad: WalProblem[] = [];
  for await (const item of readWal(dir, { onBad: (problem) => bad.push(problem), maxLineBytes })) items.push(item);
  return { items, bad };
}

function entries(items: WalItem[]): unknown[] {
  return items.filter((item) => item.kind === 'entry').map((item) => item.value);
}

function walFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => /^(wal-\d{8}\.log|checkpoint-\d{8}\.json)$/.test(name))
    .sort();
}

function folderBytes(dir: string): number {
  return walFiles(dir).reduce((sum, name) => sum + statSync(path.join(dir, name)).size, 0);
}

const BIG = 1 << 30;

describe('Wal round trip', () => {
  it('resolves appends in order and reads back exactly what was written', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 1 });
    const values = Array.from({ length: 60 }, (_, i) => ({ i, text: `rec ${i} ✓ 🚀`, nested: [i, null, { ok: i % 2 === 0 }] }));
    const resolved: number[] = [];
    await Promise.all(values.map((value, i) => wal.append(value).then(() => resolved.push(i))));
    expect(resolved).toEqual(values.map((_, i) => i));
    await wal.close();
    const { items, bad } = await readAll(dir);
    expect(bad).toEqual([]);
    expect(entries(items)).toEqual(values);
    expect(items.every((item) => item.kind === 'entry' && item.file === segmentName(1))).toBe(true);
    // Offsets point at the lines.
    const text = readFileSync(path.join(dir, segmentName(1)));
    for (const item of items) {
      if (item.kind !== 'entry') continue;
      expect(text.subarray(item.offset).toString('utf8').split('\n')[0]).toBe(encodeLine(item.value).toString('utf8').trimEnd());
    }
  });

  it('resolves a group-committed batch in one synchronous loop', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 5 });
    const seen: string[] = [];
    const all = [1, 2, 3].map((i) =>
      wal.append(i).then(() => {
        seen.push(`resolved ${i}`);
        void Promise.resolve().then(() => seen.push(`microtask after ${i}`));
      }),
    );
    await Promise.all(all);
    // Each .then ran before any microtask queued by an earlier one: the waiters resolved together.
    expect(seen.slice(0, 3)).toEqual(['resolved 1', 'resolved 2', 'resolved 3']);
    await wal.close();
  });

  it('starts a new segment past segmentBytes, between batches, and a new one on every open', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, segmentBytes: 300, flushDelayMs: 0 });
    const values: unknown[] = [];
    for (let i = 0; i < 40; i += 1) {
      const value = { i, pad: 'x'.repeat(30) };
      values.push(value);
      await wal.append(value);
    }
    expect(wal.bytes()).toBe(folderBytes(dir));
    await wal.close();
    const segments = walFiles(dir);
    expect(segments.length).toBeGreaterThan(4);
    const line = encodeLine(values[10]).length;
    for (const name of segments.slice(0, -1)) {
      const content = readFileSync(path.join(dir, name), 'utf8');
      expect(content.length).toBeGreaterThanOrEqual(300);
      expect(content.length).toBeLessThan(300 + line);
      // Whole records only: a record is never split across segments.
      expect(content.endsWith('\n')).toBe(true);
    }

    const again = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 0 });
    await again.append('after reopen');
    await again.close();
    const highest = Number(/\d+/.exec(segments.at(-1)!)![0]);
    expect(walFiles(dir).at(-1)).toBe(segmentName(highest + 1));
    const { items, bad } = await readAll(dir);
    expect(bad).toEqual([]);
    expect(entries(items)).toEqual([...values, 'after reopen']);
  });

  it('after a crash that tore the last line, reopening never appends behind the tear', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 0 });
    await wal.append('before');
    await wal.close();
    const torn = encodeLine('half written').subarray(0, 12);
    writeFileSync(path.join(dir, segmentName(1)), Buffer.concat([readFileSync(path.join(dir, segmentName(1))), torn]));
    const again = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 0 });
    await again.append('after');
    await again.close();
    const { items, bad } = await readAll(dir);
    expect(entries(items)).toEqual(['before', 'after']);
    expect(bad).toEqual([{ file: segmentName(1), offset: 18, bytes: 12, reason: 'torn: no newline at the end of the file' }]);
    expect(items.at(-1)).toMatchObject({ file: segmentName(2), offset: 0 });
  });

  it('checkpoints: deletes covered segments and older checkpoints; the reader starts from it', async () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, 'summary.json'), '{"mine":true}\n');
    writeFileSync(path.join(dir, 'wal-7.log'), 'not ours\n');
    let clock = 5000;
    const wal = await Wal.open({ dir, maxBytes: BIG, segmentBytes: 100, flushDelayMs: 0, now: () => clock });
    for (let i = 0; i < 20; i += 1) await wal.append({ i });
    const before = walFiles(dir);
    expect(before.length).toBeGreaterThan(2);

    const first = wal.checkpoint({ upTo: 20 });
    const after = [wal.append({ i: 20 }), wal.append({ i: 21 })];
    clock = 6000;
    await Promise.all([first, ...after]);
    const files = walFiles(dir);
    const number = Number(/\d+/.exec(before.at(-1)!)![0]) + 1;
    expect(files).toContain(checkpointName(number));
    expect(files.filter((name) => name.startsWith('wal-')).every((name) => Number(/\d+/.exec(name)![0]) >= number)).toBe(true);
    expect(wal.health()).toMatchObject({ ok: true, checkpoints: 1, lastCheckpointAt: 6000, lastCheckpointBytes: statSync(path.join(dir, checkpointName(number))).size });
    expect(wal.bytes()).toBe(folderBytes(dir));

    let { items, bad } = await readAll(dir);
    expect(bad).toEqual([]);
    expect(items[0]).toEqual({ kind: 'checkpoint', value: { upTo: 20 }, file: checkpointName(number) });
    expect(entries(items)).toEqual([{ i: 20 }, { i: 21 }]);

    await wal.checkpoint({ upTo: 22 });
    await wal.append({ i: 22 });
    expect(walFiles(dir).filter((name) => name.startsWith('checkpoint-'))).toHaveLength(1);
    await wal.close();
    ({ items, bad } = await readAll(dir));
    expect(bad).toEqual([]);
    expect(items.map((item) => item.value)).toEqual([{ upTo: 22 }, { i: 22 }]);
    // Not its files: left alone.
    expect(readFileSync(path.join(dir, 'summary.json'), 'utf8')).toBe('{"mine":true}\n');
    expect(readFileSync(path.join(dir, 'wal-7.log'), 'utf8')).toBe('not ours\n');
  });

  it('a checkpoint covers every append made before the call, even unresolved ones', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 20 });
    const before = [wal.append('a'), wal.append('b')];
    const done = wal.checkpoint({ state: 'a+b' });
    const later = wal.append('c');
    await Promise.all([...before, done, later]);
    await wal.close();
    const { items } = await readAll(dir);
    expect(items.map((item) => item.value)).toEqual([{ state: 'a+b' }, 'c']);
  });

  it('reads the legacy journal.ndjson first, until a checkpoint covers it; never touches it', async () => {
    const dir = tempDir();
    const legacy = [{ t: 'hello', at: 1 }, { t: 'end', at: 2 }].map((entry) => JSON.stringify(entry) + '\n').join('');
    writeFileSync(path.join(dir, LEGACY_FILE), legacy);
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 0 });
    await wal.append({ t: 'new' });
    let { items, bad } = await readAll(dir);
    expect(bad).toEqual([]);
    expect(items).toEqual([
      { kind: 'entry', value: { t: 'hello', at: 1 }, file: LEGACY_FILE, offset: 0 },
      { kind: 'entry', value: { t: 'end', at: 2 }, file: LEGACY_FILE, offset: legacy.indexOf('\n') + 1 },
      { kind: 'entry', value: { t: 'new' }, file: segmentName(1), offset: 0 },
    ]);
    await wal.checkpoint({ all: 3 });
    await wal.close();
    ({ items, bad } = await readAll(dir));
    expect(items.map((item) => item.value)).toEqual([{ all: 3 }]);
    expect(readFileSync(path.join(dir, LEGACY_FILE), 'utf8')).toBe(legacy);
    expect(wal.bytes()).toBe(folderBytes(dir));
  });

  it('falls back to an older checkpoint when the newest is corrupt, and reports the gap', async () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, checkpointName(2)), encodeLine({ old: true }));
    writeFileSync(path.join(dir, segmentName(2)), encodeLine('two'));
    writeFileSync(path.join(dir, checkpointName(5)), 'deadbeef {"torn":');
    writeFileSync(path.join(dir, segmentName(5)), encodeLine('five'));
    const { items, bad } = await readAll(dir);
    expect(items.map((item) => item.value)).toEqual([{ old: true }, 'two', 'five']);
    expect(bad).toEqual([
      { file: checkpointName(5), offset: 0, bytes: 17, reason: expect.stringContaining('torn') },
      { file: segmentName(3), offset: 0, bytes: 0, reason: 'segments 3 to 4 are missing' },
    ]);
  });

  it('skips a line over the length limit and carries on', async () => {
    const dir = tempDir();
    const long = encodeLine('y'.repeat(5000));
    writeFileSync(path.join(dir, segmentName(1)), Buffer.concat([encodeLine(1), long, encodeLine(2)]));
    const { items, bad } = await readAll(dir, 1000);
    expect(entries(items)).toEqual([1, 2]);
    expect(bad).toEqual([{ file: segmentName(1), offset: 11, bytes: long.length, reason: 'line longer than 1000 bytes' }]);
  });

  it('a missing directory reads as empty', async () => {
    const { items, bad } = await readAll(path.join(tempDir(), 'nothing-here'));
    expect(items).toEqual([]);
    expect(bad).toEqual([]);
  });

  it('rejects, never throws, on values JSON cannot hold, and after close', async () => {
    const dir = tempDir();
    const wal = await Wal.open({ dir, maxBytes: BIG, flushDelayMs: 0 });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    await expect(wal.append(10n)).rejects.toMatchObject({ code: 'WAL_BAD_VALUE' });
    await expect(wal.append(circular)).rejects.toBeInstanceOf(WalWriteError);
    await expect(wal.append(undefined)).rejects.toMatchObject({ code: 'WAL_BAD_VALUE' });
    await expect(wal.checkpoint(circular)).rejects.toMatchObject({ code: 'WAL_BAD_VALUE' });
    // The reader would skip a line this long, so the writer refuses it.
    await expect(wal.append('z'.repeat(MAX_RECORD_BYTES))).rejects.toMatchObject({ code: 'WAL_TOO_LARGE' });
    expect(wal.health().ok).toBe(true);
    const pending = wal.append('flushed by close');
    await wal.close();
    await pending;
    await expect(wal.append('late')).rejects.toMatchObject({ code: 'WAL_CLOSED' });
    expect(entries((await readAll(dir)).items)).toEqual(['flushed by close']);
  });
});
