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

export function decode(bytes: Uint8Array): unknown {
  return packr.unpack(bytes);
}
