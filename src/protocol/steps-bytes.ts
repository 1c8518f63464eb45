import { MAX_ROWS_PER_FRAME } from './hook-schema.js';
import { NULLABLE, RECORD_COLUMNS, relationProblem, REQUIRED_COLUMNS, type StepRecord, type Steps } from './step-records.js';
import { PROTOCOL_VERSION } from './wire.js';

/**
 * A hook's usual `steps` frame read straight from its msgpack bytes into step records, or null for
 * any other frame and for one with anything the general path would refuse or read differently: that
 * path (msgpackr, the frame's schema, parseSteps) then reads it and says why it refuses it. Where
 * this reads a frame, its records are the ones that path makes of the same bytes (the same checks,
 * relationProblem itself; test/steps-bytes.test.ts compares the two on generated frames). What it
 * leaves out is that path's cost for every value: the nesting pass, an array per row (whose
 * elements change kind twice, from small integers to doubles to tagged values: a third of what the
 * ingest allocated a record) and the schema's walk over every value (BENCHMARKS.md).
 *
 * The usual frame: a map of `v`, `type`, `fields`, `rows` and `dropped` (fields before rows), the
 * columns all known and none twice, every value a non-negative integer within 2^53 or nil where its
 * column may be null.
 */
export function readUsualSteps(bytes: Uint8Array): Steps | null {
  const end = bytes.length;
  let pos = 0;
  let version = -1;
  let type = false;
  let slots: Int8Array | null = null; // each field's slot in RECORD_COLUMNS
  let records: StepRecord[] | null = null;
  let dropped = -1;

  /** A non-negative integer within 2^53 or nil at pos (nil: -1), moving past it; -2 for anything else. */
  const uint = (): number => {
    if (pos >= end) return -2;
    const b = bytes[pos++]!;
    if (b < 0x80) return b;
    switch (b) {
      case 0xc0:
        return -1;
      case 0xcc:
        if (pos + 1 > end) return -2;
        return bytes[pos++]!;
      case 0xcd:
        if (pos + 2 > end) return -2;
        pos += 2;
        return (bytes[pos - 2]! << 8) | bytes[pos - 1]!;
      case 0xce:
        if (pos + 4 > end) return -2;
        pos += 4;
        return u32(bytes, pos - 4);
      case 0xcf: // uint64 (Python's msgpack)
      case 0xd3: {
        // int64 (msgpackr's for a bigint): the sign bit is in `high`, refused below with what is past 2^53 - 1
        if (pos + 8 > end) return -2;
        const high = u32(bytes, pos);
        pos += 8;
        if (high >= 0x200000) return -2;
        return high * 0x100000000 + u32(bytes, pos - 4);
      }
      case 0xd0: // int8..int32, where not negative
        if (pos + 1 > end || bytes[pos]! >= 0x80) return -2;
        return bytes[pos++]!;
      case 0xd1:
        if (pos + 2 > end || bytes[pos]! >= 0x80) return -2;
        pos += 2;
        return (bytes[pos - 2]! << 8) | bytes[pos - 1]!;
      case 0xd2:
        if (pos + 4 > end || bytes[pos]! >= 0x80) return -2;
        pos += 4;
        return u32(bytes, pos - 4);
      default:
        return -2;
    }
  };
  /** An array's length at pos (fixarray, array16, array32), moving past its header; -1 for anything else. */
  const arrayLength = (): number => {
    if (pos >= end) return -1;
    const b = bytes[pos++]!;
    if (b >= 0x90 && b <= 0x9f) return b & 0x0f;
    if (b === 0xdc && pos + 2 <= end) return (pos += 2), (bytes[pos - 2]! << 8) | bytes[pos - 1]!;
    if (b === 0xdd && pos + 4 <= end) return (pos += 4), u32(bytes, pos - 4);
    return -1;
  };
  /** A str at pos as text if it is a column's name ([a-z0-9_], 1 to 64 bytes), moving past it; null for anything else. */
  const name = (): string | null => {
    if (pos >= end) return null;
    const b = bytes[pos++]!;
    let length: number;
    if (b >= 0xa0 && b <= 0xbf) length = b & 0x1f;
    else if (b === 0xd9 && pos < end) length = bytes[pos++]!;
    else return null;
    if (length < 1 || length > 64 || pos + length > end) return null;
    let text = '';
    for (let i = pos; i < pos + length; i++) {
      const c = bytes[i]!;
      if (!((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x5f)) return null;
      text += String.fromCharCode(c);
    }
    pos += length;
    return text;
  };

  const b = bytes[pos++];
  let keys: number;
  if (b !== undefined && b >= 0x80 && b <= 0x8f) keys = b & 0x0f;
  else if (b === 0xde && end >= 3) keys = (bytes[1]! << 8) | bytes[2]!, (pos = 3);
  else return null;
  for (let k = 0; k < keys; k++) {
    const key = name();
    switch (key) {
      case 'v':
        if (version !== -1) return null;
        version = uint();
        if (version !== PROTOCOL_VERSION) return null;
        break;
      case 'type':
        if (type || name() !== 'steps') return null;
        type = true;
        break;
      case 'fields': {
        if (slots !== null) return null;
        const count = arrayLength();
        if (count < 8 || count > 64) return null;
        slots = new Int8Array(count);
        let seen = 0;
        for (let i = 0; i < count; i++) {
          const slot = RECORD_COLUMNS.indexOf(name() as (typeof RECORD_COLUMNS)[number]);
          if (slot < 0 || seen & (1 << slot)) return null;
          seen |= 1 << slot;
          slots[i] = slot;
        }
        if ((seen & REQUIRED) !== REQUIRED) return null;
        break;
      }
      case 'rows': {
        if (slots === null || records !== null || !type || version !== PROTOCOL_VERSION) return null;
        const count = arrayLength();
        if (count < 1 || count > MAX_ROWS_PER_FRAME) return null;
        records = readRows(count, slots);
        if (records === null) return null;
        break;
      }
      case 'dropped':
        if (dropped !== -1) return null;
        dropped = uint();
        if (dropped < 0) return null;
        break;
      default:
        return null;
    }
  }
  if (pos !== end || records === null || dropped < 0) return null;
  return { type: 'steps', records, dropped };

  function readRows(count: number, slots: Int8Array): StepRecord[] | null {
    const values = new Float64Array(RECORD_COLUMNS.length);
    const records: StepRecord[] = new Array(count);
    let previousSeq = 0;
    for (let r = 0; r < count; r++) {
      if (arrayLength() !== slots.length) return null;
      values.fill(-1); // a column the frame does not have is null
      for (let i = 0; i < slots.length; i++) {
        const value = uint();
        if (value === -2 || (value === -1 && !NULLABLE.has(RECORD_COLUMNS[slots[i]!]!))) return null;
        values[slots[i]!] = value;
      }
      // In StepRecord's order, as parseSteps makes it (one shape for both).
      const record: StepRecord = {
        seq: values[0]!,
        step: values[1]!,
        endNs: values[2]!,
        durNs: values[3]!,
        dataNs: values[4]!,
        h2dNs: values[5]!,
        computeNs: values[6]!,
        samples: orNull(values[7]!),
        gpuH2dNs: orNull(values[8]!),
        gpuComputeNs: orNull(values[9]!),
        gpuIdleNs: orNull(values[10]!),
        commNs: orNull(values[11]!),
        commWaitNs: orNull(values[12]!),
        commBytes: orNull(values[13]!),
        evalNs: orNull(values[14]!),
      };
      if (relationProblem(record, previousSeq) !== null) return null;
      previousSeq = record.seq;
      records[r] = record;
    }
    return records;
  }
}

/** The required columns' bits, by their slots in RECORD_COLUMNS (15 of them: one bit each in a 32-bit integer). */
const REQUIRED = REQUIRED_COLUMNS.reduce((bits, column) => bits | (1 << RECORD_COLUMNS.indexOf(column)), 0);

const orNull = (value: number): number | null => (value < 0 ? null : value);

function u32(bytes: Uint8Array, at: number): number {
  return bytes[at]! * 0x1000000 + ((bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!);
}
