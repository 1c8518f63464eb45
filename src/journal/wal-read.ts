import path from 'node:path';
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
    const value = await readCheckpoint(reader, candidate.name, onBad);
    if (value) {
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

/** The value of a checkpoint file whose first line is intact; anything else in it is reported. */
async function readCheckpoint(reader: FileReader, file: string, onBad: ReadWalOptions['onBad']): Promise<{ value: unknown } | null> {
  let found: { value: unknown } | null = null;
  let first = true;
  for await (const lines of reader.scan(file, decodeLine, MAX_CHECKPOINT_BYTES, false)) {
    for (const line of lines) {
      if ('kind' in line) {
        if (first) found = { value: line.value };
        else {
          // A second intact record line: its length as the writer makes it (crc, space, JSON, newline).
          const bytes = Buffer.byteLength(JSON.stringify(line.value)) + 10;
          onBad({ file, offset: line.offset, bytes, reason: 'unexpected data after the checkpoint record' });
        }
      } else {
        onBad({ ...line, reason: first ? `checkpoint unreadable: ${line.reason}` : 'unexpected data after the checkpoint record' });
      }
      first = false;
    }
  }
  if (first) onBad({ file, offset: 0, bytes: 0, reason: 'checkpoint unreadable: empty file' });
  return found;
}

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
   * A file's lines, decoded, one array per chunk read. Memory is one chunk plus the longest line
   * kept, which `maxLine` bounds: a longer one is skipped as it streams past. Never throws: a
   * file that cannot be opened or read ends in a problem. `legacy`: a missing file and empty
   * lines are not problems (the old journal never minded them).
   */
  async *scan(file: string, decode: Decode, maxLine: number, legacy: boolean): AsyncGenerator<Scanned[]> {
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
      let position = 0;
      let lineStart = 0;
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
