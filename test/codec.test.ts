import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { decode, encode } from '../src/protocol/codec.js';
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
