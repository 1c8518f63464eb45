import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { decode, encode, MAX_NESTING, NestedTooDeep, nestsWithin } from '../src/protocol/codec.js';
import { anyValue } from './support/arbitraries.js';
import { findPython } from './support/python.js';
import { ROOT } from './support/sidecar.js';

const withMsgpack = findPython(['msgpack']);
const plain = findPython();

// A frame of every kind of value the protocol carries, both directions.
const frames = [
  { v: 1, type: 'hello', job: 'jöb-ü', rank: 3, local_rank: 1, world_size: 8, session: 'a1b2', pid: 4242, host: 'node-7', clock: { wall_ns: 1796223827049123456n, mono_ns: 123_456_789 }, env: { torch: '2.3.0', loader: { num_workers: 8, pin_memory: true, prefetch_factor: null } } },
  { v: 1, type: 'steps', fields: ['seq', 'step', 'end_ns'], rows: [[1, 0, 4_294_967_296], [2, 1, 2 ** 40], [3, 2, 127], [4, 3, 128], [5, 4, 65_536]], dropped: 0 },
  { v: 1, type: 'counters', source: 'nvml', samples: [{ at_ns: 5, util_gpu: 97.5, power_w: 698.23, pstate: 'P0', uuid: null }] },
  { v: 1, type: 'ack', ack: 1_000_000, end: true },
  { v: 1, type: 'welcome', session: 'a1b2', ack: 0, counters: { nvml: false, interval_ms: 500, process: true } },
];

const normalise = (value: unknown) => JSON.parse(JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)));
/** Integers as the decoder returns them: numbers where they fit in 53 bits, bigints beyond. */
const asDecoded = (value: unknown) => normalise(decode(encode(value)));
/** Python writes a positive 64-bit integer as uint64, msgpackr as int64: the same value, other bytes. */
const hasWideInteger = (frame: unknown) => /\d{10,}/.test(JSON.stringify(frame, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));

/** Runs a Python snippet that reads hex frames on stdin and writes hex frames on stdout. */
function python(python: string, body: string, input: Buffer[]): Buffer[] {
  const script = `import sys, binascii\nsys.path.insert(0, ${JSON.stringify(path.join(ROOT, 'python-hook'))})\n${body}\nfor line in sys.stdin:\n    sys.stdout.write(binascii.hexlify(roundtrip(binascii.unhexlify(line.strip()))).decode() + "\\n")\n`;
  const run = spawnSync(python, ['-c', script], { input: input.map((b) => b.toString('hex')).join('\n') + '\n', encoding: 'utf8' });
  if (run.status !== 0) throw new Error(run.stderr);
  return run.stdout.trim().split('\n').map((hex) => Buffer.from(hex, 'hex'));
}

describe('msgpack on the wire, across languages', () => {
  it('msgpackr (sidecar) → bytes → msgpackr gives the same values, 64-bit integers included', () => {
    for (const frame of frames) expect(normalise(decode(encode(frame)))).toEqual(normalise(frame));
  });

  it('integers beyond 32 bits stay integers on the wire (msgpackr alone would write float64)', () => {
    const bytes = encode({ ack: 2 ** 40 });
    expect(bytes.includes(0xcb)).toBe(false);
    expect(decode(bytes)).toEqual({ ack: 2 ** 40 });
  });

  it.skipIf(!withMsgpack.python)(`Python's msgpack reads and writes the sidecar's bytes unchanged${withMsgpack.python ? '' : ` (skipped: ${withMsgpack.why})`}`, () => {
    const encoded = frames.map(encode);
    const back = python(withMsgpack.python!, 'import msgpack\ndef roundtrip(b):\n    return msgpack.packb(msgpack.unpackb(b, raw=False, strict_map_key=False), use_bin_type=True)', encoded);
    back.forEach((bytes, i) => {
      if (!hasWideInteger(frames[i])) expect(bytes.toString('hex')).toBe(encoded[i]!.toString('hex'));
      expect(normalise(decode(bytes))).toEqual(asDecoded(frames[i]));
    });
  });

  it.skipIf(!plain.python)("the hook's stdlib encoder and decoder read and write the sidecar's bytes unchanged", () => {
    const encoded = frames.map(encode);
    const back = python(plain.python!, 'from stepscope import _msgpack\ndef roundtrip(b):\n    return _msgpack.packb(_msgpack.unpackb(b))', encoded);
    back.forEach((bytes, i) => {
      if (!hasWideInteger(frames[i])) expect(bytes.toString('hex')).toBe(encoded[i]!.toString('hex'));
      expect(normalise(decode(bytes))).toEqual(asDecoded(frames[i]));
    });
  });
});

describe("the codec's msgpackr entry", () => {
  it("decodes without msgpackr's native string extractor, slower on step frames (scripts/bench-codec.mjs)", async () => {
    await import('../src/protocol/codec.js');
    // Its typings lag behind the export.
    const { isNativeAccelerationEnabled } = (await import('msgpackr/unpack')) as unknown as { isNativeAccelerationEnabled: boolean };
    expect(isNativeAccelerationEnabled).toBe(false);
  });
});

/** How deep a decoded value's non-empty arrays and maps nest (what nestsWithin bounds). */
function depthOf(value: unknown): number {
  const children = Array.isArray(value) ? value : value !== null && typeof value === 'object' && !(value instanceof Uint8Array) && !(value instanceof Date) ? Object.values(value) : [];
  return children.length === 0 ? 0 : 1 + Math.max(...children.map(depthOf));
}

describe('how deep a frame may nest', () => {
  const nested = (depth: number, maps: boolean) => {
    let value: unknown = 1;
    for (let i = 0; i < depth; i++) value = maps ? { a: value } : [value];
    return encode(value);
  };

  it(`decodes ${MAX_NESTING} levels and refuses one more before decoding, arrays or maps`, () => {
    for (const maps of [false, true]) {
      expect(depthOf(decode(nested(MAX_NESTING, maps)))).toBe(MAX_NESTING);
      expect(() => decode(nested(MAX_NESTING + 1, maps))).toThrow(NestedTooDeep);
      // Far beyond (written byte by byte: encoding it would run out of stack): refused the same way.
      const head = maps ? [0x81, 0xa1, 0x61] : [0x91];
      const deep = Buffer.concat([...Array.from({ length: 100_000 }, () => Buffer.from(head)), Buffer.from([0xc0])]);
      expect(() => decode(deep)).toThrow(`nested deeper than ${MAX_NESTING} levels`);
    }
  });

  it('measures the depth of any value the codec carries, its strings, binaries, extensions and wide integers skipped over', () => {
    fc.assert(
      fc.property(anyValue, fc.integer({ min: 0, max: 6 }), (value, limit) => {
        let bytes: Buffer;
        try {
          bytes = encode(value);
        } catch {
          return fc.pre(false); // beyond what msgpack carries (an integer over 64 bits): nothing to measure
        }
        expect(nestsWithin(bytes, limit)).toBe(depthOf(decode(bytes)) <= limit);
      }),
      { seed: 20261206, numRuns: 2_000 },
    );
  });

  it('reads 16- and 32-bit container headers, and skips payloads that look like headers', () => {
    // array16 of one array32 of one map16 of one pair: 3 levels.
    const headers = Buffer.from([0xdc, 0x00, 0x01, 0xdd, 0x00, 0x00, 0x00, 0x01, 0xde, 0x00, 0x01, 0xa1, 0x6b, 0xc0]);
    expect([nestsWithin(headers, 3), nestsWithin(headers, 2)]).toEqual([true, false]);
    // A str8 and a bin8 full of container headers, then a timestamp (fixext4 -1) whose seconds are
    // too: one level (the array around them).
    const payloads = Buffer.from([0x93, 0xd9, 0x04, 0x91, 0x91, 0x91, 0x91, 0xc4, 0x02, 0x9f, 0xdf, 0xd6, 0xff, 0x91, 0x91, 0x91, 0x91]);
    expect([nestsWithin(payloads, 1), nestsWithin(payloads, 0)]).toEqual([true, false]);
    expect(decode(payloads)).toHaveLength(3);
  });

  it('leaves bytes that are not msgpack to the decoder, and ends on them', () => {
    for (const bytes of [[0xdd, 0xff], [0xdf, 0xff, 0xff, 0xff, 0xff], [0xdb, 0xff, 0xff, 0xff, 0xff, 0x00], [0x9f]]) {
      expect(nestsWithin(Buffer.from(bytes), MAX_NESTING)).toBe(true);
      expect(() => decode(Buffer.from(bytes))).toThrow();
    }
  });
});
