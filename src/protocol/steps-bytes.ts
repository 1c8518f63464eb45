import { MAX_ROWS_PER_FRAME, StepsFrame } from './hook-schema.js';
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
  return new UsualSteps(bytes).read();
}

/** The reader's place in the bytes: fields, not variables its closures share, so that the hot loop reads them as such. */
class UsualSteps {
  private pos = 0;
  private readonly end: number;

  constructor(private readonly bytes: Uint8Array) {
    this.end = bytes.length;
  }

  read(): Steps | null {
    const { bytes } = this;
    let version = -1;
    let type = false;
    let slots: Int8Array | null = null; // each field's slot in RECORD_COLUMNS
    let records: StepRecord[] | null = null;
    let dropped = -1;
    const b = bytes[this.pos++];
    let keys: number;
    if (b !== undefined && b >= 0x80 && b <= 0x8f) keys = b & 0x0f;
    else if (b === 0xde && this.end >= 3) keys = (bytes[1]! << 8) | bytes[2]!, (this.pos = 3);
    else return null;
    for (let k = 0; k < keys; k++) {
      switch (this.name()) {
        case 'v':
          if (version !== -1) return null;
          version = this.uint();
          if (version !== PROTOCOL_VERSION) return null;
          break;
        case 'type':
          if (type || this.name() !== 'steps') return null;
          type = true;
          break;
        case 'fields': {
          if (slots !== null) return null;
          const count = this.arrayLength();
          if (count < FIELDS.minItems! || count > FIELDS.maxItems!) return null;
          slots = new Int8Array(count);
          let seen = 0;
          for (let i = 0; i < count; i++) {
            const slot = RECORD_COLUMNS.indexOf(this.name() as (typeof RECORD_COLUMNS)[number]);
            if (slot < 0 || seen & (1 << slot)) return null;
            seen |= 1 << slot;
            slots[i] = slot;
          }
          if ((seen & REQUIRED) !== REQUIRED) return null;
          break;
        }
        case 'rows': {
          if (slots === null || records !== null || !type || version !== PROTOCOL_VERSION) return null;
          const count = this.arrayLength();
          if (count < 1 || count > MAX_ROWS_PER_FRAME) return null;
          records = this.rows(count, slots);
          if (records === null) return null;
          break;
        }
        case 'dropped':
          if (dropped !== -1) return null;
          dropped = this.uint();
          if (dropped < 0) return null;
          break;
        default:
          return null;
      }
    }
    if (this.pos !== this.end || records === null || dropped < 0) return null;
    return { type: 'steps', records, dropped };
  }

  private rows(count: number, slots: Int8Array): StepRecord[] | null {
    const records: StepRecord[] = new Array(count);
    let previousSeq = 0;
    for (let r = 0; r < count; r++) {
      if (this.arrayLength() !== slots.length) return null;
      // Each value into its column's variable: a column the frame lacks stays null.
      let seq = -1, step = -1, endNs = -1, durNs = -1, dataNs = -1, h2dNs = -1, computeNs = -1;
      let samples: number | null = null, gpuH2dNs: number | null = null, gpuComputeNs: number | null = null, gpuIdleNs: number | null = null;
      let commNs: number | null = null, commWaitNs: number | null = null, commBytes: number | null = null, evalNs: number | null = null;
      for (let i = 0; i < slots.length; i++) {
        const value = this.uint();
        if (value === -2) return null;
        const slot = slots[i]!;
        if (value === -1) {
          if (!NULLABLE_SLOT[slot]) return null;
          continue;
        }
        switch (slot) {
          case 0: seq = value; break;
          case 1: step = value; break;
          case 2: endNs = value; break;
          case 3: durNs = value; break;
          case 4: dataNs = value; break;
          case 5: h2dNs = value; break;
          case 6: computeNs = value; break;
          case 7: samples = value; break;
          case 8: gpuH2dNs = value; break;
          case 9: gpuComputeNs = value; break;
          case 10: gpuIdleNs = value; break;
          case 11: commNs = value; break;
          case 12: commWaitNs = value; break;
          case 13: commBytes = value; break;
          default: evalNs = value;
        }
      }
      // In StepRecord's order, as parseSteps makes it (one shape for both).
      const record: StepRecord = { seq, step, endNs, durNs, dataNs, h2dNs, computeNs, samples, gpuH2dNs, gpuComputeNs, gpuIdleNs, commNs, commWaitNs, commBytes, evalNs };
      if (relationProblem(record, previousSeq) !== null) return null;
      previousSeq = seq;
      records[r] = record;
    }
    return records;
  }

  /** A non-negative integer within 2^53 or nil at pos (nil: -1), moving past it; -2 for anything else. */
  private uint(): number {
    const { bytes, end } = this;
    let pos = this.pos;
    if (pos >= end) return -2;
    const b = bytes[pos++]!;
    let value: number;
    if (b < 0x80) value = b;
    else if (b === 0xc0) value = -1;
    else if (b === 0xcc && pos + 1 <= end) value = bytes[pos++]!;
    else if (b === 0xcd && pos + 2 <= end) (value = (bytes[pos]! << 8) | bytes[pos + 1]!), (pos += 2);
    else if (b === 0xce && pos + 4 <= end) (value = u32(bytes, pos)), (pos += 4);
    else if ((b === 0xcf || b === 0xd3) && pos + 8 <= end) {
      // uint64 (Python's msgpack) or int64 (msgpackr's for a bigint): a sign bit, or anything past
      // 2^53 - 1, is in the high word, and refused.
      const high = u32(bytes, pos);
      if (high >= 0x200000) return -2;
      value = high * 0x100000000 + u32(bytes, pos + 4);
      pos += 8;
    }
    // int8..int32, where not negative
    else if (b === 0xd0 && pos + 1 <= end && bytes[pos]! < 0x80) value = bytes[pos++]!;
    else if (b === 0xd1 && pos + 2 <= end && bytes[pos]! < 0x80) (value = (bytes[pos]! << 8) | bytes[pos + 1]!), (pos += 2);
    else if (b === 0xd2 && pos + 4 <= end && bytes[pos]! < 0x80) (value = u32(bytes, pos)), (pos += 4);
    else return -2;
    this.pos = pos;
    return value;
  }

  /** An array's length at pos (fixarray, array16, array32), moving past its header; -1 for anything else. */
  private arrayLength(): number {
    const { bytes, end } = this;
    if (this.pos >= end) return -1;
    const b = bytes[this.pos++]!;
    if (b >= 0x90 && b <= 0x9f) return b & 0x0f;
    if (b === 0xdc && this.pos + 2 <= end) return (this.pos += 2), (bytes[this.pos - 2]! << 8) | bytes[this.pos - 1]!;
    if (b === 0xdd && this.pos + 4 <= end) return (this.pos += 4), u32(bytes, this.pos - 4);
    return -1;
  }

  /**
   * A short str at pos (fixstr, str8), moving past it; null for anything else. Its bytes one char each:
   * every name read is then looked up among the keys and columns, all ASCII, which only their own
   * bytes match.
   */
  private name(): string | null {
    const { bytes, end } = this;
    if (this.pos >= end) return null;
    const b = bytes[this.pos++]!;
    let length: number;
    if (b >= 0xa0 && b <= 0xbf) length = b & 0x1f;
    else if (b === 0xd9 && this.pos < end) length = bytes[this.pos++]!;
    else return null;
    if (this.pos + length > end) return null;
    let text = '';
    for (let i = this.pos; i < this.pos + length; i++) text += String.fromCharCode(bytes[i]!);
    this.pos += length;
    return text;
  }
}

/** The required columns' bits, by their slots in RECORD_COLUMNS (15 of them: one bit each in a 32-bit integer). */
const REQUIRED = REQUIRED_COLUMNS.reduce((bits, column) => bits | (1 << RECORD_COLUMNS.indexOf(column)), 0);
/** The schema's bounds on a frame's columns. */
const FIELDS = StepsFrame.properties.fields;
/** Whether each slot's column may be null. */
const NULLABLE_SLOT = RECORD_COLUMNS.map((column) => NULLABLE.has(column));

function u32(bytes: Uint8Array, at: number): number {
  return bytes[at]! * 0x1000000 + ((bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!);
}
