// msgpackr's plain entry (what `msgpackr/pack` resolves to under Node), not its main one, which loads
// the native string extractor (msgpackr-extract) where installed: measured, it decodes a hook's step
// frame 1.5x slower (32 against 21.5 us for 256 rows) and only a hello, once a connection, faster
// (BENCHMARKS.md, issue 24 target 9), and loading it costs the start.
import { Packr } from 'msgpackr/pack';

// These options keep the bytes readable and writable by Python's msgpack and by the
// hook's stdlib encoder: plain maps (no record extension), undefined as nil, and 64-bit
// integers as numbers whenever they fit.
const options = {
  useRecords: false,
  encodeUndefinedAsNil: true,
  int64AsType: 'auto',
  mapsAsObjects: true,
  variableMapSize: true,
  moreTypes: false,
} as const;
// variableMapSize picks the smallest map header, as Python's msgpack does, so both write the same bytes.
// msgpackr understands int64AsType 'auto' (number when safe, else bigint); its typings lag behind.
const packr = new Packr(options as unknown as ConstructorParameters<typeof Packr>[0]);

const UINT32_LIMIT = 2 ** 32;

/**
 * msgpackr writes integers beyond 32 bits as float64, which Python would read as floats; as
 * bigints they go out as 64-bit integers.
 */
function wideIntegersAsBigInt(value: unknown): unknown {
  if (typeof value === 'number') {
    return Number.isInteger(value) && (value >= UINT32_LIMIT || value < -(2 ** 31)) ? BigInt(value) : value;
  }
  if (Array.isArray(value)) return value.map(wideIntegersAsBigInt);
  if (value !== null && typeof value === 'object' && !(value instanceof Uint8Array)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, wideIntegersAsBigInt(v)]));
  }
  return value;
}

export function encode(value: unknown): Buffer {
  return packr.pack(wideIntegersAsBigInt(value));
}

/**
 * Containers may nest this deep in what is decoded. No message of the protocol nests more than a few
 * levels; msgpackr's decoder recurses, so without a bound a frame nested some thousands deep was
 * refused for overflowing the stack or, from a shallower caller, for its content: two codes for one
 * frame, decided by the caller's stack.
 */
export const MAX_NESTING = 64;

/** Bytes whose containers nest deeper than MAX_NESTING. */
export class NestedTooDeep extends Error {}

export function decode(bytes: Uint8Array): unknown {
  if (!nestsWithin(bytes, MAX_NESTING)) throw new NestedTooDeep(`nested deeper than ${MAX_NESTING} levels`);
  return packr.unpack(bytes);
}

/** How msgpack's first byte says to read what follows it (nestsWithin), by byte: one table lookup each. */
const enum Read {
  Skip, // a scalar: SKIP[b] more bytes
  FixMap,
  FixArray,
  FixStr,
  Len8, // str8, bin8: a 1-byte length
  Len16,
  Len32,
  Ext8, // a 1-byte length and a type byte
  Ext16,
  Ext32,
  Array16,
  Array32,
  Map16,
  Map32,
}
const READ = new Uint8Array(256);
const SKIP = new Uint8Array(256);
{
  const set = (from: number, to: number, read: Read, skip = 0) => {
    READ.fill(read, from, to + 1);
    SKIP.fill(skip, from, to + 1);
  };
  set(0x80, 0x8f, Read.FixMap);
  set(0x90, 0x9f, Read.FixArray);
  set(0xa0, 0xbf, Read.FixStr);
  for (const [b, read] of [[0xc4, Read.Len8], [0xc5, Read.Len16], [0xc6, Read.Len32], [0xc7, Read.Ext8], [0xc8, Read.Ext16], [0xc9, Read.Ext32], [0xd9, Read.Len8], [0xda, Read.Len16], [0xdb, Read.Len32], [0xdc, Read.Array16], [0xdd, Read.Array32], [0xde, Read.Map16], [0xdf, Read.Map32]] as const) set(b, b, read);
  for (const [b, skip] of [[0xca, 4], [0xcb, 8], [0xcc, 1], [0xcd, 2], [0xce, 4], [0xcf, 8], [0xd0, 1], [0xd1, 2], [0xd2, 4], [0xd3, 8], [0xd4, 2], [0xd5, 3], [0xd6, 5], [0xd7, 9], [0xd8, 17]] as const) set(b, b, Read.Skip, skip);
}

/**
 * Whether msgpack bytes nest their non-empty arrays and maps at most `limit` deep: one pass over the
 * headers with a stack of its own, decoding nothing. Bytes that are not msgpack pass, for the decoder
 * to refuse (a length beyond the end ends the pass).
 */
export function nestsWithin(bytes: Uint8Array, limit: number): boolean {
  const left = new Float64Array(limit + 1); // items still to come in each open container, outermost first
  let depth = 0;
  let i = 0;
  const end = bytes.length;
  while (i < end) {
    const b = bytes[i++]!;
    let items = 0;
    switch (READ[b]) {
      case Read.Skip: i += SKIP[b]!; break;
      case Read.FixMap: items = 2 * (b & 0x0f); break;
      case Read.FixArray: items = b & 0x0f; break;
      case Read.FixStr: i += b & 0x1f; break;
      case Read.Len8: i += 1 + (bytes[i] ?? end); break;
      case Read.Len16: i += 2 + u16(bytes, i); break;
      case Read.Len32: i += 4 + u32(bytes, i); break;
      case Read.Ext8: i += 2 + (bytes[i] ?? end); break;
      case Read.Ext16: i += 3 + u16(bytes, i); break;
      case Read.Ext32: i += 5 + u32(bytes, i); break;
      case Read.Array16: items = u16(bytes, i); i += 2; break;
      case Read.Array32: items = u32(bytes, i); i += 4; break;
      case Read.Map16: items = 2 * u16(bytes, i); i += 2; break;
      case Read.Map32: items = 2 * u32(bytes, i); i += 4; break;
    }
    if (items > 0) {
      if (depth === limit) return false;
      left[depth++] = items;
      continue;
    }
    // One item done (a scalar or an empty container), and with it every container it completes.
    while (depth > 0 && --left[depth - 1]! === 0) depth--;
  }
  return true;
}

/** Big-endian 16- and 32-bit lengths; past the end, one that ends the pass. */
const u16 = (bytes: Uint8Array, at: number): number => (at + 2 <= bytes.length ? (bytes[at]! << 8) | bytes[at + 1]! : bytes.length);
const u32 = (bytes: Uint8Array, at: number): number => (at + 4 <= bytes.length ? ((bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!) >>> 0 : bytes.length);
