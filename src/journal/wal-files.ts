import { crc32 } from 'node:zlib';
import { TextSink, writeJson } from '../io/json-parts.js';
import type { WalFs } from './wal-fs.js';

/**
 * What the write-ahead log's files are called and how one record line is laid out:
 * `<crc32 of the JSON's UTF-8 bytes, 8 lowercase hex> <JSON>\n`. Segments and checkpoints use
 * the same line, so a torn or damaged checkpoint is caught the same way as a damaged record.
 */

/** The old, crc-less journal (`src/store/journal.ts`): read before the segments, never written. */
export const LEGACY_FILE = 'journal.ndjson';

/** The reader skips longer entry lines, so the writer refuses records that would make one. */
export const MAX_RECORD_BYTES = 16 * 1024 * 1024;
/** A checkpoint is one line holding the whole state: allowed to be much larger than a record. */
export const MAX_CHECKPOINT_BYTES = 256 * 1024 * 1024;

const TMP_SUFFIX = '.tmp';
const DIGITS = 8;

export type WalFileKind = 'segment' | 'checkpoint' | 'checkpoint-tmp';

export interface WalFileName {
  kind: WalFileKind;
  number: number;
  name: string;
}

export function segmentName(number: number): string {
  return `wal-${String(number).padStart(DIGITS, '0')}.log`;
}

export function checkpointName(number: number): string {
  return `checkpoint-${String(number).padStart(DIGITS, '0')}.json`;
}

export function checkpointTmpName(number: number): string {
  return checkpointName(number) + TMP_SUFFIX;
}

// At least 8 digits: numbers past 99999999 simply grow a digit and still sort by value.
const NAME = /^(?:(wal)-(\d{8,})\.log|(checkpoint)-(\d{8,})\.json(\.tmp)?)$/;

/** The log's own files; null for anything else in the folder (summaries, foreign files, the legacy journal). */
export function parseWalName(name: string): WalFileName | null {
  const match = NAME.exec(name);
  if (!match) return null;
  const digits = match[2] ?? match[4];
  if (digits === undefined) return null;
  const number = Number(digits);
  if (!Number.isSafeInteger(number)) return null;
  // Only the canonical spelling: `wal-000000003.log` is someone else's file, not a second segment 3.
  if (String(number).padStart(DIGITS, '0') !== digits) return null;
  if (match[1]) return { kind: 'segment', number, name };
  return { kind: match[5] ? 'checkpoint-tmp' : 'checkpoint', number, name };
}

/** The log's files in `dir`, by kind, each kind sorted by number (oldest first). */
export async function listWal(fs: WalFs, dir: string): Promise<Record<WalFileKind, WalFileName[]>> {
  const found: Record<WalFileKind, WalFileName[]> = { segment: [], checkpoint: [], 'checkpoint-tmp': [] };
  for (const name of await fs.readdir(dir)) {
    const parsed = parseWalName(name);
    if (parsed) found[parsed.kind].push(parsed);
  }
  for (const list of Object.values(found)) list.sort((a, b) => a.number - b.number);
  return found;
}

const HEX = '0123456789abcdef';

/** Levels of a journal entry's JSON written part by part: its fields (a steps frame's base64 in slices), each whole. */
export const RECORD_LEVELS = 1;
/** Levels of a checkpoint's: its jobs, a job, its ranks, a rank, its rings, a ring; their items whole. */
export const CHECKPOINT_LEVELS = 6;

/**
 * Writes one record line for `value` at the end of `sink` and returns its length: `<crc> <JSON>\n`,
 * the JSON written straight into the sink in parts (src/io/json-parts.ts; JSON.stringify's text, never a
 * raw newline), no string of the whole first. Throws a TypeError where JSON has no text for the value
 * (undefined, a function), as JSON.stringify would for a cycle or a BigInt, leaving the sink as it was.
 */
export function appendLine(sink: TextSink, value: unknown, levels = RECORD_LEVELS): number {
  const start = sink.length;
  sink.reserve(9);
  sink.length += 9;
  try {
    if (!writeJson(sink, value, levels)) throw new TypeError(`${typeof value} is not representable as JSON`);
  } catch (error) {
    sink.length = start;
    throw error;
  }
  sink.reserve(1);
  const end = sink.length;
  const line = sink.buffer;
  let crc = crc32(line.subarray(start + 9, end));
  for (let i = start + 7; i >= start; i -= 1) {
    line[i] = HEX.charCodeAt(crc & 0xf);
    crc >>>= 4;
  }
  line[start + 8] = 0x20;
  line[end] = 0x0a;
  sink.length = end + 1;
  return sink.length - start;
}

/** One record line for `value`, in a buffer of its own (appendLine). `sizeHint`: about how long it will be. */
export function encodeLine(value: unknown, sizeHint = 256, levels = RECORD_LEVELS): Buffer {
  const sink = new TextSink(sizeHint + 10);
  appendLine(sink, value, levels);
  // A line is held until written: not with room it never used.
  const line = sink.buffer.subarray(0, sink.length);
  return sink.buffer.length - sink.length > Math.max(4096, sink.length) ? Buffer.from(line) : line;
}

/** What a decoder returns for a line it cannot use; JSON.parse never gives a symbol, so it cannot clash. */
export const BAD_LINE: unique symbol = Symbol('bad line');

/** Where a decoder says why a line was bad (one object reused: no allocation per good line). */
export interface LineProblem {
  reason: string;
}

/**
 * Checks and parses the record line `buf[start, end)` (newline excluded). Returns the value, or
 * BAD_LINE with `problem.reason` set. Never throws. Works on indices, not slices: it runs once
 * per record on replay, so it allocates little beyond the parsed value.
 */
export function decodeLine(buf: Buffer, start: number, end: number, problem: LineProblem): unknown {
  if (end === start) return bad(problem, 'empty line');
  if (end - start < 10 || buf[start + 8] !== 0x20) return bad(problem, 'not a record line');
  let expected = 0;
  for (let i = start; i < start + 8; i += 1) {
    const digit = hexValue(buf[i]!);
    if (digit < 0) return bad(problem, 'not a record line');
    expected = expected * 16 + digit;
  }
  if (crc32(buf.subarray(start + 9, end)) !== expected) return bad(problem, 'crc mismatch');
  return parseJson(buf, start + 9, end, problem);
}

/** A line of the legacy journal: plain JSON, no crc. */
export function decodeLegacyLine(buf: Buffer, start: number, end: number, problem: LineProblem): unknown {
  return parseJson(buf, start, end, problem);
}

function parseJson(buf: Buffer, start: number, end: number, problem: LineProblem): unknown {
  try {
    return JSON.parse(buf.toString('utf8', start, end)) as unknown;
  } catch {
    return bad(problem, 'not JSON');
  }
}

function bad(problem: LineProblem, reason: string): typeof BAD_LINE {
  problem.reason = reason;
  return BAD_LINE;
}

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  if (byte >= 0x61 && byte <= 0x66) return byte - 0x61 + 10;
  return -1;
}
