import { Packr } from 'msgpackr';

// These options keep the bytes readable and writable by Python's msgpack and by the
// hook's stdlib encoder: plain maps (no record extension), undefined as nil, and 64-bit
// integers as numbers whenever they fit.
const options = {
  useRecords: false,
  encodeUndefinedAsNil: true,
  int64AsType: 'auto',
  mapsAsObjects: true,
  moreTypes: false,
} as const;
// msgpackr understands int64AsType 'auto' (number when safe, else bigint); its typings lag behind.
const packr = new Packr(options as unknown as ConstructorParameters<typeof Packr>[0]);

export function encode(value: unknown): Buffer {
  return packr.pack(value);
}

export function decode(bytes: Uint8Array): unknown {
  return packr.unpack(bytes);
}
