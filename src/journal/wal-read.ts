import path from 'node:path';
import { crc32 } from 'node:zlib';
import { parseChunked } from '@discoveryjs/json-ext';
import {
  BAD_LINE,
  LEGACY_FILE,
  MAX_CHECKPOINT_BYTES,
  MAX_RECORD_BYTES,
  decodeLegacyLine,
  decodeLine,
  listWal,
  segmentName,
  type LineProblem,
} from './wal-files.js';
import { errorCode, errorMessage, nodeWalFs, type WalFs } from './wal-fs.js';

/**
 * Streams a write-ahead log back: the newest readable checkpoint, then every entry after it, in
 * order. Damage of any kind (torn tail, bit flip, garbage, a missing segment) is skipped and
 * reported, never thrown: a sidecar must come back up with whatever survived.
 */

export type WalItem =
  | { kind: 'checkpoint'; value: unknown; file: string }
  | { kind: 'entry'; value: unknown; file: string; offset: number };

/** A stretch of a file that was skipped. `bytes` includes the line's newline if it had one. */
export interface WalProblem {
  file: string;
  offset: number;
  bytes: number;
  reason: string;
}

export interface ReadWalOptions {
  onBad(problem: WalProblem): void;
  fs?: WalFs;
  /** Entry lines longer than this (newline included) are skipped; default MAX_RECORD_BYTES. */
  maxLineBytes?: number;
  /**
   * A checkpoint file larger than this is not read at all (default MAX_CHECKPOINT_BYTES): the
   * sidecar passes the most its limits could produce, so a forged one cannot take the heap.
   */
  maxCheckpointBytes?: number;
  /**
   * Why a checkpoint that reads cannot be used (another version, a shape it does not hold), or
   * null: one that cannot is reported, and the next older one, else the segments from the first,
   * are read instead.
   */
  unusable?: (value: unknown) => string | null;
}

type EntryItem = Extract<WalItem, { kind: 'entry' }>;
/** A file's lines in order: entries and problems (told apart by `kind`). */
type Scanned = EntryItem | WalProblem;
type Decode = (buf: Buffer, start: number, end: number, problem: LineProblem) => unknown;

/**
 * Yields the checkpoint (if one reads), then the entries that follow it. Without a checkpoint it
 * starts from the legacy `journal.ndjson`, if any, then segment 1 on. With one, the legacy file
 * is covered by it (it predates every segment) and is not read. A missing directory reads as an
 * empty log; any other error listing the directory is thrown.
 */
export async function* readWal(dir: string, options: ReadWalOptions): AsyncGenerator<WalItem> {
  const fs = options.fs ?? nodeWalFs;
  const maxLine = options.maxLineBytes ?? MAX_RECORD_BYTES;
  const onBad = options.onBad;
  const reader = new FileReader(fs, dir);
  let listing;
  try {
    listing = await listWal(fs, dir);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return;
    throw error;
  }

  let checkpoint: { value: unknown; file: string; number: number } | null = null;
  for (const candidate of [...listing.checkpoint].reverse()) {
    const value = await readCheckpoint(reader, candidate.name, onBad, options.maxCheckpointBytes ?? MAX_CHECKPOINT_BYTES);
    const why = value && options.unusable?.(value.value);
    if (why) onBad({ file: candidate.name, offset: 0, bytes: 0, reason: why });
    else if (value) {
      checkpoint = { value: value.value, file: candidate.name, number: candidate.number };
      break;
    }
  }

  const files: string[] = [];
  if (checkpoint) yield { kind: 'checkpoint', value: checkpoint.value, file: checkpoint.file };
  else files.push(LEGACY_FILE);

  // Segments are numbered without holes from the checkpoint on; a hole means lost records.
  const start = checkpoint ? checkpoint.number : 1;
  let expected = start;
  const gaps = new Map<string, WalProblem>();
  for (const segment of listing.segment) {
    // Older segments are covered by the checkpoint (left behind if deleting them failed).
    if (segment.number < start) continue;
    if (segment.number > expected) {
      const missing = segment.number - expected === 1 ? `segment ${expected} is` : `segments ${expected} to ${segment.number - 1} are`;
      gaps.set(segment.name, { file: segmentName(expected), offset: 0, bytes: 0, reason: `${missing} missing` });
    }
    expected = segment.number + 1;
    files.push(segment.name);
  }

  // One generator level between the lines and the caller, one await per chunk: replay speed is
  // mostly JSON.parse this way.
  for (const file of files) {
    const gap = gaps.get(file);
    if (gap) onBad(gap);
    const legacy = file === LEGACY_FILE;
    for await (const lines of reader.scan(file, legacy ? decodeLegacyLine : decodeLine, maxLine, legacy)) {
      for (const line of lines) {
        if ('kind' in line) yield line;
        else onBad(line);
      }
    }
  }
}

/**
 * The value of a checkpoint file whose first line is intact; anything else in it is reported. The
 * record is checked (its crc over the whole line) before it is parsed, and parsed as a stream of
 * chunks: memory is the value it holds plus a chunk, never the text too. A file larger than
 * `maxBytes` is refused unread.
 */
async function readCheckpoint(reader: FileReader, file: string, onBad: ReadWalOptions['onBad'], maxBytes: number): Promise<{ value: unknown } | null> {
  const record = await reader.checkpointRecord(file, maxBytes);
  const after = (problem: WalProblem) => onBad({ ...problem, reason: 'unexpected data after the checkpoint record' });
  if ('reason' in record) {
    const { rest: _rest, ...problem } = record;
    onBad({ ...problem, reason: record.reason.startsWith('checkpoint of ') ? record.reason : `checkpoint unreadable: ${record.reason}` });
    if (record.rest === null) return null;
  }
  let found: { value: unknown } | null = null;
  if (!('reason' in record)) {
    try {
      found = { value: (await parseChunked(() => reader.bytes(file, record.bodyStart, record.bodyEnd))) as unknown };
    } catch (error) {
      onBad({ file, offset: 0, bytes: record.rest, reason: `checkpoint unreadable: ${error instanceof CheckpointReadError ? error.message : 'not JSON'}` });
    }
  }
  for await (const lines of reader.scan(file, () => BAD_LINE, FIRST_CHUNK_BYTES, false, record.rest ?? 0)) {
    for (const line of lines) if (!('kind' in line)) after(line);
  }
  return found;
}

/** A read that failed while a checkpoint was being parsed (as opposed to the text not being JSON). */
class CheckpointReadError extends Error {}

/** The first line of a checkpoint file: where its JSON is, or why it is unusable; `rest`: where what follows it starts (null: nothing to scan). */
type CheckpointRecord = { bodyStart: number; bodyEnd: number; rest: number } | (WalProblem & { rest: number | null });

/** Reads start small (most segments and checkpoints are) and grow while reads fill the buffer. */
const FIRST_CHUNK_BYTES = 64 * 1024;
const MAX_CHUNK_BYTES = 1024 * 1024;

/** Reads the files of one readWal one after the other, sharing one read buffer. */
class FileReader {
  private buffer = Buffer.allocUnsafe(FIRST_CHUNK_BYTES);
  private readonly problem: LineProblem = { reason: '' };

  constructor(
    private readonly fs: WalFs,
    private readonly dir: string,
  ) {}

  /**
   * Finds a checkpoint's record line without keeping it: checks its prefix and its crc as the bytes
   * stream past, and says where its JSON lies. The same reasons as decodeLine gives a bad line.
   */
  async checkpointRecord(file: string, maxBytes: number): Promise<CheckpointRecord> {
    const size = (await this.fs.stat(path.join(this.dir, file)).catch(() => null))?.size ?? null;
    if (size !== null && size > maxBytes) {
      return { file, offset: 0, bytes: size, rest: null, reason: `checkpoint of ${size} bytes is larger than any this sidecar's limits could write (${maxBytes} bytes): not read` };
    }
    const bad = (bytes: number, reason: string, rest: number | null): CheckpointRecord => ({ file, offset: 0, bytes, reason, rest });
    let header = Buffer.alloc(0);
    let crc = 0;
    let length = 0;
    try {
      for await (let data of this.bytes(file, 0, maxBytes + 1)) {
        if (header.length < 9) {
          const taken = data.subarray(0, 9 - header.length);
          const newline = taken.indexOf(0x0a);
          if (newline >= 0) return bad(header.length + newline + 1, header.length + newline === 0 ? 'empty line' : 'not a record line', header.length + newline + 1);
          header = Buffer.concat([header, taken]);
          length = header.length;
          data = data.subarray(taken.length);
          if (header.length < 9) continue;
          if (header[8] !== 0x20 || !/^[0-9a-f]{8}$/.test(header.toString('latin1', 0, 8))) {
            const rest = await this.lineEnd(file, 9);
            return bad(rest ?? size ?? 9, 'not a record line', rest);
          }
        }
        const newline = data.indexOf(0x0a);
        const body = newline >= 0 ? data.subarray(0, newline) : data;
        crc = crc32(body, crc);
        length += body.length;
        if (newline < 0) continue;
        const rest = length + 1;
        if (length < 10) return bad(rest, 'not a record line', rest);
        if (crc !== Number.parseInt(header.toString('latin1', 0, 8), 16)) return bad(rest, 'crc mismatch', rest);
        return { bodyStart: 9, bodyEnd: length, rest };
      }
    } catch (error) {
      return bad(0, errorMessage(error), null);
    }
    if (length === 0) return bad(0, 'empty file', null);
    return bad(length, 'torn: no newline at the end of the file', null);
  }

  /** Where the line that runs through `from` ends, past its newline (null: at the end of the file, torn). */
  private async lineEnd(file: string, from: number): Promise<number | null> {
    let position = from;
    for await (const data of this.bytes(file, from, Number.POSITIVE_INFINITY)) {
      const newline = data.indexOf(0x0a);
      if (newline >= 0) return position + newline + 1;
      position += data.length;
    }
    return null;
  }

  /** The bytes of `file` in [from, to), a new buffer each read; throws `cannot open: …` or `read failed: …`. */
  async *bytes(file: string, from: number, to: number): AsyncGenerator<Buffer> {
    let handle;
    try {
      handle = await this.fs.open(path.join(this.dir, file), 'r');
    } catch (error) {
      throw new CheckpointReadError(`cannot open: ${errorMessage(error)}`);
    }
    try {
      for (let position = from; position < to; ) {
        const buffer = Buffer.allocUnsafe(Math.min(MAX_CHUNK_BYTES, to - position));
        let read;
        try {
          read = await handle.read(buffer, position);
        } catch (error) {
          throw new CheckpointReadError(`read failed: ${errorMessage(error)}`);
        }
        if (read === 0) return;
        position += read;
        yield buffer.subarray(0, read);
      }
    } finally {
      await handle.close().catch(() => undefined);
    }
  }

  /**
   * A file's lines, decoded, one array per chunk read. Memory is one chunk plus the longest line
   * kept, which `maxLine` bounds: a longer one is skipped as it streams past. Never throws: a
   * file that cannot be opened or read ends in a problem. `legacy`: a missing file and empty
   * lines are not problems (the old journal never minded them).
   */
  async *scan(file: string, decode: Decode, maxLine: number, legacy: boolean, from = 0): AsyncGenerator<Scanned[]> {
    let handle;
    try {
      handle = await this.fs.open(path.join(this.dir, file), 'r');
    } catch (error) {
      if (!(legacy && errorCode(error) === 'ENOENT')) yield [{ file, offset: 0, bytes: 0, reason: `cannot open: ${errorMessage(error)}` }];
      return;
    }
    const problem = this.problem;
    const tooLong = `line longer than ${maxLine} bytes`;
    try {
      let position = from;
      let lineStart = from;
      // The start of a line that runs past the chunk, copied (the buffer is reused).
      let carry: Buffer[] = [];
      let carryBytes = 0;
      let skipping = false;
      for (;;) {
        const buffer = this.buffer;
        let read;
        try {
          read = await handle.read(buffer, position);
        } catch (error) {
          yield [{ file, offset: lineStart, bytes: 0, reason: `read failed: ${errorMessage(error)}` }];
          return;
        }
        if (read === 0) break;
        const chunk = read === buffer.length ? buffer : buffer.subarray(0, read);
        const out: Scanned[] = [];
        let from = 0;
        while (from < read) {
          const newline = chunk.indexOf(0x0a, from);
          if (newline < 0) {
            const rest = read - from;
            if (!skipping && carryBytes + rest >= maxLine) {
              skipping = true;
              carry = [];
            }
            if (!skipping) carry.push(Buffer.from(chunk.subarray(from)));
            carryBytes += rest;
            break;
          }
          const length = carryBytes + (newline - from);
          if (skipping || length + 1 > maxLine) {
            out.push({ file, offset: lineStart, bytes: length + 1, reason: tooLong });
          } else if (!(legacy && length === 0)) {
            let value;
            if (carry.length === 0) {
              value = decode(chunk, from, newline, problem);
            } else {
              const line = Buffer.concat([...carry, chunk.subarray(from, newline)]);
              value = decode(line, 0, line.length, problem);
            }
            if (value === BAD_LINE) out.push({ file, offset: lineStart, bytes: length + 1, reason: problem.reason });
            else out.push({ kind: 'entry', value, file, offset: lineStart });
          }
          carry = [];
          carryBytes = 0;
          skipping = false;
          lineStart += length + 1;
          from = newline + 1;
        }
        position += read;
        if (read === buffer.length && buffer.length < MAX_CHUNK_BYTES) this.buffer = Buffer.allocUnsafe(buffer.length * 4);
        // Every line of this chunk is decoded (strings and objects now) before the buffer is read into again.
        if (out.length > 0) yield out;
      }
      if (carryBytes > 0) {
        yield [{ file, offset: lineStart, bytes: carryBytes, reason: skipping ? tooLong : 'torn: no newline at the end of the file' }];
      }
    } finally {
      await handle.close().catch(() => undefined);
    }
  }
}
