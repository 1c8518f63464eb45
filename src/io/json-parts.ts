/**
 * JSON.stringify's text of a value, written into a growing buffer part by part instead of made as
 * one string first. A string of more than 128 KiB is a large object in V8's old space, freed only by
 * a full collection: the journal's checkpoint (MiBs, every few seconds under a burst) made one each
 * time, and the old space grew by it between collections (BENCHMARKS.md, "The journal's lines
 * written in parts"). Here objects and arrays are opened some levels down and each part below is
 * stringified alone: small strings, young, dead once written. The text is JSON.stringify's, byte
 * for byte (toJSON, keys skipped for undefined, functions and symbols, null for them in arrays);
 * test/json-parts.test.ts compares the two. Where a toJSON returns something with a toJSON of its
 * own (a Date, a Base64Text), JSON.stringify does not call that second one and this may: no value
 * the journal writes has such a toJSON.
 */

/**
 * Bytes that JSON holds as base64 text: JSON.stringify writes toJSON's string; writeJson writes the
 * text in slices of BASE64_SLICE bytes (whole groups of 3, so the slices' texts join into the whole's),
 * never the whole string: a hook's frame of 4,096 rows is over 128 KiB of base64.
 */
export class Base64Text {
  constructor(readonly bytes: Buffer) {}

  toJSON(): string {
    return this.bytes.toString('base64');
  }
}

const BASE64_SLICE = 3 * 16 * 1024;

/** A buffer that grows as bytes are written into it: `length` of them so far. */
export class TextSink {
  buffer: Buffer;
  length = 0;

  constructor(sizeHint: number) {
    this.buffer = Buffer.allocUnsafe(Math.max(sizeHint, 256));
  }

  /** Room for `bytes` more. */
  reserve(bytes: number): void {
    if (this.length + bytes <= this.buffer.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.length + bytes));
    this.buffer.copy(grown, 0, 0, this.length);
    this.buffer = grown;
  }

  text(text: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 unit; counted exactly only where that bound does not fit.
    if (this.length + text.length * 3 > this.buffer.length) this.reserve(Buffer.byteLength(text, 'utf8'));
    this.length += this.buffer.write(text, this.length, 'utf8');
  }
}

/**
 * Writes JSON.stringify(value)'s text into `sink`, objects and arrays opened `levels` deep (their
 * items below that stringified whole); false, writing nothing, where that text is undefined.
 */
export function writeJson(sink: TextSink, value: unknown, levels: number): boolean {
  const json = itemOf(value, '');
  if (json === undefined) return false;
  write(sink, '', json, levels);
  return true;
}

/** What JSON.stringify serializes for `value` under `key`: toJSON's result (a Base64Text kept as it is); undefined where it leaves it out. */
function itemOf(value: unknown, key: string): unknown {
  if (value instanceof Base64Text) return value;
  if (typeof value === 'object' && value !== null && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    value = (value as { toJSON: (key: string) => unknown }).toJSON(key);
  }
  return value === undefined || typeof value === 'function' || typeof value === 'symbol' ? undefined : value;
}

const isRawJSON = (JSON as { isRawJSON?: (value: unknown) => boolean }).isRawJSON ?? (() => false);

/** Plain objects and arrays are opened; anything else (boxed primitives, class instances, JSON.rawJSON's) JSON.stringify writes whole. */
function opened(value: object): boolean {
  if (Array.isArray(value)) return true;
  const proto: unknown = Object.getPrototypeOf(value);
  return (proto === Object.prototype || proto === null) && !isRawJSON(value);
}

/** `prefix` (a comma, a key), then the value's text: written together, one write per part. */
function write(sink: TextSink, prefix: string, value: unknown, levels: number): void {
  if (value instanceof Base64Text) {
    sink.text(prefix + '"');
    for (let at = 0; at < value.bytes.length; at += BASE64_SLICE) sink.text(value.bytes.toString('base64', at, at + BASE64_SLICE));
    sink.text('"');
    return;
  }
  if (typeof value !== 'object' || value === null || levels <= 0 || !opened(value)) {
    sink.text(prefix + JSON.stringify(value));
    return;
  }
  if (Array.isArray(value)) {
    sink.text(prefix + '[');
    for (let i = 0; i < value.length; i++) {
      const item = itemOf(value[i], String(i));
      if (item === undefined) sink.text(i > 0 ? ',null' : 'null');
      else write(sink, i > 0 ? ',' : '', item, levels - 1);
    }
    sink.text(']');
    return;
  }
  sink.text(prefix + '{');
  let first = true;
  for (const key of Object.keys(value)) {
    const item = itemOf((value as Record<string, unknown>)[key], key);
    if (item === undefined) continue;
    write(sink, `${first ? '' : ','}${JSON.stringify(key)}:`, item, levels - 1);
    first = false;
  }
  sink.text('}');
}
