import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseWalName, segmentName } from '../src/journal/wal-files.js';
import { readWal, type WalItem, type WalProblem } from '../src/journal/wal-read.js';
import { Wal } from '../src/journal/wal.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Damages a real journal at random (seeded, so a failure replays) and checks the reader against an
 * oracle: it yields exactly the lines that are still byte-for-byte what was written, and reports
 * every other line with its file and offset. It must never throw.
 */

const tempDir = useTempDirs('stepscope-wal-fuzz-');

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Rng = () => number;
const int = (rng: Rng, below: number): number => Math.floor(rng() * below);
const pick = <T>(rng: Rng, list: readonly T[]): T => list[int(rng, list.length)]!;

const TEXT = ['a', 'Z', ' ', '"', '\\', '\n', 'é', '✓', '🚀', '\u0000', '{', '}', '\ud800'];
function randomValue(rng: Rng, depth = 0): unknown {
  switch (int(rng, depth > 2 ? 4 : 6)) {
    case 0:
      return null;
    case 1:
      return rng() < 0.5;
    case 2:
      return rng() < 0.5 ? int(rng, 1_000_000) : (rng() - 0.5) * 1e6;
    case 3:
      return Array.from({ length: int(rng, 20) }, () => pick(rng, TEXT)).join('');
    case 4:
      return Array.from({ length: int(rng, 5) }, () => randomValue(rng, depth + 1));
    default: {
      const object: Record<string, unknown> = {};
      for (let i = int(rng, 5); i > 0; i -= 1) object[`k${int(rng, 50)}${pick(rng, TEXT)}`] = randomValue(rng, depth + 1);
      return object;
    }
  }
}

interface Pristine {
  files: Map<string, Buffer>;
  /** Each wal file's original lines (as latin1 text, newline excluded) and the value each holds. */
  lines: Map<string, Map<string, unknown>>;
}

/** Writes a journal through the real writer: a few hundred records, optionally a checkpoint half-way. */
async function buildJournal(seed: number, withCheckpoint: boolean): Promise<Pristine> {
  const rng = mulberry32(seed);
  const dir = mkdtempSync(path.join(tmpdir(), 'stepscope-wal-pristine-'));
  try {
    const wal = await Wal.open({ dir, maxBytes: 1 << 30, segmentBytes: 3000, flushDelayMs: 0 });
    const written: Array<{ i: number; value: unknown }> = [];
    let checkpointAt: number | null = null;
    while (written.length < 300) {
      if (withCheckpoint && checkpointAt === null && written.length >= 150) {
        checkpointAt = written.length;
        await wal.checkpoint({ upTo: checkpointAt, sample: randomValue(rng) });
      }
      const group = Array.from({ length: 1 + int(rng, 4) }, (_, k) => ({ i: written.length + k, value: randomValue(rng) }));
      await Promise.all(group.map((value) => wal.append(value)));
      written.push(...group);
    }
    await wal.close();
    const files = new Map<string, Buffer>();
    const lines = new Map<string, Map<string, unknown>>();
    for (const name of readdirSync(dir)) {
      const content = readFileSync(path.join(dir, name));
      files.set(name, content);
      const values = new Map<string, unknown>();
      const text = content.toString('latin1');
      for (const line of text.split('\n').slice(0, -1)) values.set(line, JSON.parse(Buffer.from(line, 'latin1').toString('utf8', 9)));
      lines.set(name, values);
    }
    // Sanity: undamaged, it reads back as written.
    const read = await readAll(dir);
    expect(read.bad).toEqual([]);
    const expectedEntries = written.filter((value) => value.i >= (checkpointAt ?? 0));
    expect(read.items.filter((item) => item.kind === 'checkpoint')).toHaveLength(withCheckpoint ? 1 : 0);
    expect(read.items.filter((item) => item.kind === 'entry').map((item) => item.value)).toEqual(expectedEntries);
    return { files, lines };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function readAll(dir: string): Promise<{ items: WalItem[]; bad: WalProblem[] }> {
  const items: WalItem[] = [];
  const bad: WalProblem[] = [];
  for await (const item of readWal(dir, { onBad: (problem) => bad.push(problem) })) items.push(item);
  return { items, bad };
}

interface Piece {
  offset: number;
  bytes: number;
  text: string;
  complete: boolean;
}

function pieces(content: Buffer): Piece[] {
  const out: Piece[] = [];
  let offset = 0;
  while (offset < content.length) {
    const newline = content.indexOf(0x0a, offset);
    const end = newline < 0 ? content.length : newline;
    out.push({ offset, bytes: end - offset + (newline < 0 ? 0 : 1), text: content.toString('latin1', offset, end), complete: newline >= 0 });
    offset = end + 1;
  }
  return out;
}

type Bad = Pick<WalProblem, 'file' | 'offset' | 'bytes'>;

/** What the reader must do with `files`: the oracle. */
function expectation(files: Map<string, Buffer>, pristine: Pristine): { items: WalItem[]; bad: Bad[] } {
  const items: WalItem[] = [];
  const bad: Bad[] = [];
  const named = [...files.keys()].flatMap((name) => {
    const parsed = parseWalName(name);
    return parsed ? [parsed] : [];
  });
  const checkpoints = named.filter((file) => file.kind === 'checkpoint').sort((a, b) => b.number - a.number);
  let start = 1;
  for (const checkpoint of checkpoints) {
    const parts = pieces(files.get(checkpoint.name)!);
    const original = pristine.lines.get(checkpoint.name);
    const first = parts[0];
    const valid = first !== undefined && first.complete && original !== undefined && original.has(first.text);
    if (parts.length === 0) bad.push({ file: checkpoint.name, offset: 0, bytes: 0 });
    parts.forEach((part, i) => {
      if (!(i === 0 && valid)) bad.push({ file: checkpoint.name, offset: part.offset, bytes: part.bytes });
    });
    if (valid) {
      items.push({ kind: 'checkpoint', value: original.get(first.text), file: checkpoint.name });
      start = checkpoint.number;
      break;
    }
  }
  let expected = start;
  for (const segment of named.filter((file) => file.kind === 'segment').sort((a, b) => a.number - b.number)) {
    if (segment.number < start) continue;
    if (segment.number > expected) bad.push({ file: segmentName(expected), offset: 0, bytes: 0 });
    expected = segment.number + 1;
    const original = pristine.lines.get(segment.name) ?? new Map<string, unknown>();
    for (const part of pieces(files.get(segment.name)!)) {
      if (part.complete && original.has(part.text)) items.push({ kind: 'entry', value: original.get(part.text), file: segment.name, offset: part.offset });
      else bad.push({ file: segment.name, offset: part.offset, bytes: part.bytes });
    }
  }
  return { items, bad };
}

const FOREIGN = ['summary.json', 'notes.txt', 'wal-1.log', 'wal-00000002.log.bak', 'checkpoint.json', 'journal.ndjson.old', 'wal-000000003.log'];

/** Applies 1–4 kinds of damage; returns what was done, for the failure message. */
function damage(rng: Rng, files: Map<string, Buffer>): string[] {
  const done: string[] = [];
  for (let n = 1 + int(rng, 4); n > 0; n -= 1) {
    const wal = [...files.keys()].filter((name) => parseWalName(name) !== null).sort();
    if (wal.length === 0) break;
    const name = pick(rng, wal);
    const content = files.get(name)!;
    const kind = int(rng, 6);
    if (kind === 0 && content.length > 0) {
      const at = int(rng, content.length);
      files.set(name, content.subarray(0, at));
      done.push(`truncate ${name} at ${at}`);
    } else if (kind === 1 && content.length > 0) {
      const copy = Buffer.from(content);
      const at = int(rng, copy.length);
      const bit = int(rng, 8);
      copy[at] = copy[at]! ^ (1 << bit);
      files.set(name, copy);
      done.push(`flip ${name} byte ${at} bit ${bit}`);
    } else if (kind === 2) {
      const at = int(rng, content.length + 1);
      const garbage = Buffer.from(Array.from({ length: 1 + int(rng, 40) }, () => (rng() < 0.1 ? 0x0a : int(rng, 256))));
      files.set(name, Buffer.concat([content.subarray(0, at), garbage, content.subarray(at)]));
      done.push(`insert ${garbage.length} bytes into ${name} at ${at}`);
    } else if (kind === 3 && name.startsWith('wal-')) {
      files.delete(name);
      done.push(`delete ${name}`);
    } else if (kind === 4) {
      // A foreign file, sometimes holding a perfectly valid record line: it must not be read.
      const foreign = pick(rng, FOREIGN);
      files.set(foreign, rng() < 0.5 ? content : Buffer.from('whatever\n'));
      done.push(`add ${foreign}`);
    } else {
      // Garbage straight after the last newline: a torn tail.
      files.set(name, Buffer.concat([content, Buffer.from('0badf00d {"torn":')]));
      done.push(`tear ${name}`);
    }
  }
  return done;
}

describe('readWal on a damaged journal', () => {
  const pristine: Pristine[] = [];
  beforeAll(async () => {
    pristine.push(await buildJournal(1, true), await buildJournal(2, false));
  });
  afterAll(() => {
    pristine.length = 0;
  });

  it('yields exactly the intact lines and reports every damaged one, for 250 random damages', async () => {
    for (let seed = 1; seed <= 250; seed += 1) {
      const rng = mulberry32(seed * 7919);
      const source = pristine[seed % pristine.length]!;
      const files = new Map(source.files);
      const done = damage(rng, files);
      const dir = tempDir();
      for (const [name, content] of files) writeFileSync(path.join(dir, name), content);
      const expected = expectation(files, source);
      let actual: { items: WalItem[]; bad: WalProblem[] };
      try {
        actual = await readAll(dir);
      } catch (error) {
        throw new Error(`seed ${seed} (${done.join('; ')}): readWal threw ${String(error)}`);
      }
      const context = `seed ${seed}: ${done.join('; ')}`;
      expect(actual.items, context).toEqual(expected.items);
      const key = (problem: Bad): string => `${problem.file}@${problem.offset}+${problem.bytes}`;
      expect(actual.bad.map(key).sort(), context).toEqual(expected.bad.map(key).sort());
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('never throws on binary noise in every file', async () => {
    const rng = mulberry32(99);
    const dir = tempDir();
    for (const name of ['checkpoint-00000003.json', 'wal-00000003.log', 'wal-00000004.log', 'journal.ndjson']) {
      writeFileSync(path.join(dir, name), Buffer.from(Array.from({ length: 5000 }, () => int(rng, 256))));
    }
    const { items, bad } = await readAll(dir);
    expect(items.every((item) => item.kind === 'entry' && item.file === 'journal.ndjson')).toBe(true);
    expect(bad.length).toBeGreaterThan(3);
  });
});

describe('Wal.open on something that is not a folder', () => {
  it('refuses with a clear message', async () => {
    const parent = tempDir();
    const file = path.join(parent, 'journal');
    writeFileSync(file, 'I am a file');
    await expect(Wal.open({ dir: file, maxBytes: 1000 })).rejects.toThrow(`journal directory ${file} exists and is not a directory`);
    await expect(Wal.open({ dir: path.join(file, 'below'), maxBytes: 1000 })).rejects.toThrow(/cannot open journal directory .*ENOTDIR/);
    expect(readFileSync(file, 'utf8')).toBe('I am a file');
    mkdirSync(path.join(parent, 'ok'));
    const wal = await Wal.open({ dir: path.join(parent, 'ok'), maxBytes: 1000 });
    await wal.close();
  });
});
