import { EventEmitter } from 'node:events';
import fc from 'fast-check';
import type { WebSocket } from 'ws';
import type { SourceStatus } from '../../src/counters/status.js';
import { Engine } from '../../src/engine/engine.js';
import type { JournalEntry } from '../../src/engine/entries.js';
import type { EngineSnapshot } from '../../src/engine/snapshot.js';
import { ConnectionSlots, HookConnection } from '../../src/ingest/connection.js';
import { Flow } from '../../src/ingest/flow.js';
import { Ingest } from '../../src/ingest/ingest.js';
import { DEFAULT_LIMITS, type IngestLimits } from '../../src/ingest/limits.js';
import { Recorder } from '../../src/journal/recorder.js';
import type { Wal } from '../../src/journal/wal.js';
import { createLogger } from '../../src/log/log.js';
import { sidecarState } from '../../src/outputs/state.js';
import { decode, encode, MAX_NESTING } from '../../src/protocol/codec.js';
import { CloseCode, ProtocolError, readHookFrame, type HookMessage } from '../../src/protocol/messages.js';
import { STEP_FIELDS } from './hook-client.js';
import type { SidecarState } from '../../src/protocol/state.js';
import { hello as helloEntry, run } from './entries.js';

/**
 * Support for the property tests (test/property-*.test.ts), with fast-check:
 *
 * - arbitraries for what a hostile or broken client can put on the wire: JavaScript values encoded
 *   with the sidecar's own codec, raw msgpack no encoder writes (msgpackr's extension types, non-string
 *   and duplicate keys, bad UTF-8, truncated or absurd headers), and valid frames of every type with
 *   one part replaced, removed or added;
 * - realistic journals (`journalScript`);
 * - the ingest path in this process (`hookSidecar`): Engine, Recorder, Ingest and one HookConnection
 *   per fake socket, on a simulated clock, as serve() assembles them;
 * - checks: `readFrame` (the connection's decode + parse), `jsonProblem` (plain JSON data or where not).
 */

/** One seed for every property file: a failure replays exactly (`seed` and `path` are in its report). */
export const SEED = 20_261_201;
export const T0 = Date.parse('2026-12-01T12:00:00Z');
export const DAY_MS = 86_400_000;
export const MAX_REASON_BYTES = 123;

// ---------------------------------------------------------------------------------------------------
// Values

/** Keys that reach prototypes, JavaScript internals, or name the protocol's own fields. */
export const TRICKY_KEYS = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'valueOf',
  'toJSON',
  'hasOwnProperty',
  'then',
  'length',
  '',
  '0',
  '\u0000',
  'v',
  't',
  'at',
  'type',
  'job',
  'rank',
  'session',
  'env',
  'clock',
  'wall_ns',
  'mono_ns',
  'fields',
  'rows',
  'seq',
  'dropped',
  'samples',
  'source',
  'at_ns',
  'reason',
  'loader',
  'gpu_uuid',
  'gpu_index',
] as const;

const controlChar = fc.integer({ min: 0, max: 0x1f }).map((code) => String.fromCharCode(code));
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code));
const oddChar = fc.constantFrom('é', '✓', '🚀', '\u2028', '\u202e', '\ufeff', '"', '\\', '\n', '\u007f');

/** Short text of every kind: ASCII, any code point, control characters, lone surrogates. */
export const anyText: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 16 }),
  fc.string({ unit: 'binary', maxLength: 16 }),
  fc.string({ unit: fc.oneof(controlChar, loneSurrogate, oddChar), maxLength: 16 }),
);

/** Text of thousands of characters (up to 120 KB of UTF-8), far past every limit on a field. */
export const hugeText: fc.Arbitrary<string> = fc
  .tuple(fc.constantFrom('x', 'é', '🚀', '\u0000', '\ud800'), fc.integer({ min: 300, max: 30_000 }))
  .map(([char, n]) => char.repeat(n));

export const anyKey: fc.Arbitrary<string> = fc.oneof(fc.constantFrom(...TRICKY_KEYS), anyText);

const edgeNumber = fc.constantFrom(
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  -0,
  0.5,
  -1,
  2 ** 32,
  2 ** 53,
  2 ** 53 + 2,
  2 ** 63,
  2 ** 64,
  1e20,
  Number.MAX_VALUE,
  Number.MIN_VALUE,
  Number.MAX_SAFE_INTEGER,
  -Number.MAX_SAFE_INTEGER,
  86_400e9 + 1,
);

/** Integers that only fit msgpack's 64-bit formats: beyond 2^53, up to 2^64 - 1 and down to -2^63. */
export const wideInteger: fc.Arbitrary<bigint> = fc.oneof(
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 64n - 1n }),
  fc.constantFrom(2n ** 53n, 2n ** 53n + 1n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n, -(2n ** 63n), -(2n ** 53n) - 1n),
);

export const anyLeaf: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.constant(undefined),
  fc.boolean(),
  fc.integer(),
  fc.maxSafeInteger(),
  fc.double(),
  edgeNumber,
  wideInteger,
  anyText,
  hugeText,
  fc.uint8Array({ maxLength: 32 }),
  fc.date({ noInvalidDate: false }),
);

/** Any value the codec can carry: leaves, arrays and maps (some with a null prototype) nested a few levels. */
export const anyValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown; array: unknown[]; map: Record<string, unknown> }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, anyLeaf, tie('array'), tie('map')),
  array: fc.array(tie('value'), { maxLength: 5 }),
  map: fc.dictionary(anyKey, tie('value'), { maxKeys: 6 }),
})).value;

/**
 * How deep the deep values nest: around the codec's bound (MAX_NESTING, refused before decoding
 * beyond it) or anywhere up to tens of thousands. Before the bound, around 2,000 to 5,000 levels
 * msgpack's recursive decoder got through or not depending on how deep the caller's own stack was, so
 * the same frame could be refused with two codes (CI saw 2,881 levels give 1007 and 1008 on Node 24).
 */
const nestingDepth = (most: number) => fc.oneof(fc.integer({ min: MAX_NESTING - 8, max: MAX_NESTING + 8 }), fc.integer({ min: 1, max: most }));

/**
 * Arrays or maps nested up to tens of thousands deep, often around the codec's bound (nestingDepth).
 * The outermost one describes itself to fast-check (whose printer would otherwise recurse through
 * every level of a counterexample).
 */
export const deepValue: fc.Arbitrary<unknown> = fc.tuple(nestingDepth(40_000), fc.boolean()).map(([depth, maps]) => {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = maps ? { a: value } : [value];
  Object.defineProperty(value, fc.toStringMethod, { value: () => `<${maps ? 'maps' : 'arrays'} nested ${depth} deep>`, enumerable: false });
  return value;
});

// ---------------------------------------------------------------------------------------------------
// Encoding

const cat = (...parts: Array<Uint8Array | number[]>): Uint8Array => Buffer.concat(parts.map((part) => (part instanceof Uint8Array ? part : Uint8Array.from(part))));
const be = (value: number, bytes: number): number[] => Array.from({ length: bytes }, (_, i) => (value >>> (8 * (bytes - 1 - i))) & 0xff);

/**
 * The bytes a client would send for `value`: the sidecar's codec where it can write it, else a plain
 * msgpack writer (for what the codec refuses: integers past 2^64 as numbers, objects with a `toJSON`
 * key, nesting deeper than its recursion allows), as a client's own encoder would write it.
 */
export function encodeFrame(value: unknown): Buffer {
  try {
    return encode(value);
  } catch {
    const parts: Uint8Array[] = [];
    writeValue(value, parts);
    return Buffer.concat(parts);
  }
}

/** Plain msgpack for `value`, without recursion (so any depth is written). */
function writeValue(root: unknown, out: Uint8Array[]): void {
  const todo: unknown[] = [root];
  const bytes = (...b: number[]) => out.push(Uint8Array.from(b));
  while (todo.length > 0) {
    const value = todo.pop();
    switch (typeof value) {
      case 'boolean':
        bytes(value ? 0xc3 : 0xc2);
        continue;
      case 'number': {
        if (Number.isInteger(value) && value >= 0 && value < 128) {
          bytes(value);
          continue;
        }
        const b = Buffer.alloc(9);
        b[0] = 0xcb;
        b.writeDoubleBE(value, 1);
        out.push(b);
        continue;
      }
      case 'bigint': {
        const b = Buffer.alloc(9);
        if (value >= 0n && value < 2n ** 64n) {
          b[0] = 0xcf;
          b.writeBigUInt64BE(value, 1);
        } else if (value < 0n && value >= -(2n ** 63n)) {
          b[0] = 0xd3;
          b.writeBigInt64BE(value, 1);
        } else {
          b[0] = 0xcb;
          b.writeDoubleBE(Number(value), 1);
        }
        out.push(b);
        continue;
      }
      case 'string': {
        const utf8 = Buffer.from(value, 'utf8');
        out.push(utf8.length < 32 ? Uint8Array.from([0xa0 | utf8.length]) : Uint8Array.from([0xdb, ...be(utf8.length, 4)]), utf8);
        continue;
      }
      case 'object': {
        if (value === null) {
          bytes(0xc0);
        } else if (value instanceof Uint8Array) {
          out.push(Uint8Array.from([0xc6, ...be(value.length, 4)]), value);
        } else if (value instanceof Date) {
          const b = Buffer.alloc(15);
          b.set([0xc7, 12, 0xff]);
          const ms = Number.isNaN(value.getTime()) ? 0 : value.getTime();
          b.writeUInt32BE((((ms % 1000) + 1000) % 1000) * 1e6, 3);
          b.writeBigInt64BE(BigInt(Math.floor(ms / 1000)), 7);
          out.push(b);
        } else if (Array.isArray(value)) {
          out.push(Uint8Array.from([0xdd, ...be(value.length, 4)]));
          for (let i = value.length - 1; i >= 0; i--) todo.push(value[i]);
        } else {
          const keys = Object.keys(value);
          out.push(Uint8Array.from([0xdf, ...be(keys.length, 4)]));
          for (let i = keys.length - 1; i >= 0; i--) todo.push((value as Record<string, unknown>)[keys[i]!], keys[i]);
        }
        continue;
      }
      default:
        // undefined, and what msgpack has no type for: nil.
        bytes(0xc0);
    }
  }
}

// Raw msgpack, byte by byte, for what no encoder writes.

export function rawStr(bytes: Uint8Array): Uint8Array {
  if (bytes.length < 32) return cat([0xa0 | bytes.length], bytes);
  if (bytes.length < 256) return cat([0xd9, bytes.length], bytes);
  return cat([0xda, ...be(bytes.length, 2)], bytes);
}

export function rawArray(items: Uint8Array[]): Uint8Array {
  const head = items.length < 16 ? [0x90 | items.length] : [0xdc, ...be(items.length, 2)];
  return cat(head, ...items);
}

export function rawMap(entries: Array<[Uint8Array, Uint8Array]>): Uint8Array {
  const head = entries.length < 16 ? [0x80 | entries.length] : [0xde, ...be(entries.length, 2)];
  return cat(head, ...entries.flat());
}

export function rawExt(type: number, data: Uint8Array): Uint8Array {
  return cat([0xc7, data.length, type & 0xff], data);
}

const anyBytes = fc.uint8Array({ maxLength: 24 });

/** msgpack leaves no encoder writes from plain data: msgpackr's extension types, bad UTF-8, absurd headers. */
export const rawLeaf: fc.Arbitrary<Uint8Array> = fc.oneof(
  anyLeaf.map((value) => encodeFrame(value)),
  // msgpackr's own extensions: 0x42 bigint of any size, 0x74 typed array, 0xff timestamp, 0x69/0x70 references, ...
  fc.tuple(fc.constantFrom(0x42, 0x74, 0xff, 0x69, 0x70, 0x62, 0x00, 0x01, 0x72), anyBytes).map(([type, data]) => rawExt(type, data)),
  fc.tuple(fc.integer({ min: 0, max: 255 }), anyBytes).map(([type, data]) => rawExt(type, data)),
  // Extensions that read the value after them: 0x65 Error, 0x73 Set, 0x78 RegExp.
  fc
    .tuple(fc.constantFrom(0x65, 0x73, 0x78), fc.constantFrom('Error', 'TypeError', 'AggregateError', '__proto__', 'constructor', 'x'), anyText, anyLeaf)
    .map(([type, name, message, cause]) => cat([0xd4, type, 0x00], encodeFrame([name, message, cause]))),
  fc.tuple(fc.constantFrom(0x65, 0x73, 0x78), anyLeaf).map(([type, next]) => cat([0xd4, type, 0x00], encodeFrame(next))),
  // A string of bytes that are not UTF-8.
  fc.uint8Array({ minLength: 1, maxLength: 40 }).map((bytes) => rawStr(bytes)),
  // 64-bit integers of any bit pattern, float64 NaN payloads.
  fc.tuple(fc.constantFrom(0xcf, 0xd3, 0xcb), fc.uint8Array({ minLength: 8, maxLength: 8 })).map(([head, bytes]) => cat([head], bytes)),
  // Never used (0xc1), truncated, or announcing billions of items.
  fc.constantFrom(
    Uint8Array.from([0xc1]),
    Uint8Array.from([0xdc, 0xff]),
    Uint8Array.from([0xdd, 0xff, 0xff, 0xff, 0xff]),
    Uint8Array.from([0xdf, 0xff, 0xff, 0xff, 0xff]),
    Uint8Array.from([0xdb, 0xff, 0xff, 0xff, 0xff]),
    Uint8Array.from([0xc6, 0x7f, 0xff, 0xff, 0xff]),
    Uint8Array.from([0xc9, 0xff, 0xff, 0xff, 0xff, 0x42]),
  ),
);

/** Map keys of any msgpack type (msgpackr turns them into property names somehow). */
export const rawKey: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 4, arbitrary: anyKey.map((key) => encodeFrame(key)) },
  fc.constantFrom(Uint8Array.from([0x05]), Uint8Array.from([0xc0]), Uint8Array.from([0xc3]), Uint8Array.from([0x91, 0x01]), Uint8Array.from([0x81, 0xa1, 0x61, 0x01])),
  rawLeaf,
);

export const rawValue: fc.Arbitrary<Uint8Array> = fc.letrec<{ value: Uint8Array; array: Uint8Array; map: Uint8Array }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, rawLeaf, tie('array'), tie('map')),
  array: fc.array(tie('value'), { maxLength: 4 }).map(rawArray),
  map: fc.array(fc.tuple(rawKey, tie('value')), { maxLength: 4 }).map(rawMap),
})).value;

/** Arrays or maps nested up to 200 000 levels, often around the codec's bound (nestingDepth). */
export const rawDeep: fc.Arbitrary<Uint8Array> = fc.tuple(nestingDepth(200_000), fc.boolean()).map(([depth, maps]) => {
  const head = maps ? [0x81, 0xa1, 0x61] : [0x91];
  const out = Buffer.alloc(depth * head.length + 1);
  for (let i = 0; i < depth; i++) out.set(head, i * head.length);
  out[out.length - 1] = 0xc0;
  return out;
});

// ---------------------------------------------------------------------------------------------------
// Valid frames

const name = (maxLength: number) => fc.oneof(fc.stringMatching(/^[a-z][a-z0-9-]{0,15}$/), fc.string({ unit: 'binary', minLength: 1, maxLength }));
const uint = fc.maxSafeNat();
const ns = (max: number) => fc.integer({ min: 0, max });

/** A realistic environment fingerprint (docs/protocol.md), with a few unknown keys. */
export const realisticEnv: fc.Arbitrary<Record<string, unknown>> = fc.record(
  {
    python: fc.constantFrom('3.11.7', '3.12.1'),
    torch: fc.constantFrom('2.4.0+cu124', '2.5.1'),
    cuda: fc.constantFrom('12.4', null),
    cudnn: fc.constantFrom(90100, null),
    gpu_name: fc.constantFrom('NVIDIA H100 80GB HBM3', 'NVIDIA A10G'),
    gpu_uuid: fc.constantFrom('GPU-0b7d1c0e-4f3a-4c5e-9a61-0b1b2c3d4e5f', 'GPU-1'),
    gpu_index: fc.integer({ min: 0, max: 7 }),
    cuda_visible_devices: fc.constantFrom('0,1,2,3', ''),
    loader: fc.record({ batch_size: fc.integer({ min: 1, max: 1024 }), num_workers: fc.integer({ min: 0, max: 32 }), pin_memory: fc.boolean(), prefetch_factor: fc.constantFrom(2, null), persistent_workers: fc.boolean() }),
    hook: fc.constant('0.1.0'),
    platform: fc.constant('Linux-6.8.0-x86_64-with-glibc2.39'),
    extra: fc.dictionary(fc.stringMatching(/^[a-z_]{1,12}$/), fc.oneof(fc.string({ maxLength: 40 }), fc.integer(), fc.boolean()), { maxKeys: 4 }),
  },
  { requiredKeys: [] },
);

export const validHello: fc.Arbitrary<Record<string, unknown>> = fc
  .record({
    job: name(128),
    worldSize: fc.integer({ min: 1, max: 65_536 }),
    rank: fc.nat(),
    local_rank: fc.integer({ min: 0, max: 65_535 }),
    session: name(64),
    pid: uint,
    host: fc.string({ maxLength: 255 }),
    wall: fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.maxSafeNat(), fc.constant(BigInt(T0) * 1_000_000n)),
    mono: uint,
    env: realisticEnv,
  })
  .map((h) => ({
    v: 1,
    type: 'hello',
    job: h.job,
    rank: h.rank % h.worldSize,
    local_rank: h.local_rank,
    world_size: h.worldSize,
    session: h.session,
    pid: h.pid,
    host: h.host,
    clock: { wall_ns: h.wall, mono_ns: h.mono },
    env: h.env,
  }));

/** The hook monotonic clock of the base hello (BASE_HELLO) at T0. */
export const BASE_MONO_NS = 1e12;

/** A valid hello, for frames that need one first. */
export const BASE_HELLO = {
  v: 1,
  type: 'hello',
  job: 'job-a',
  rank: 0,
  local_rank: 0,
  world_size: 2,
  session: 'sess-0',
  pid: 1,
  host: 'node-1',
  clock: { wall_ns: BigInt(T0) * 1_000_000n, mono_ns: BASE_MONO_NS },
  env: { python: '3.11.7' },
  acked: 0,
};

export interface RowSpec {
  durNs: number;
  dataNs: number;
  h2dNs: number;
  computeNs: number;
  samples: number | null;
  gpu: [number | null, number | null, number | null];
}

const DAY_NS = 86_400e9;
export const rowSpec: fc.Arbitrary<RowSpec> = fc
  .record({
    durNs: fc.integer({ min: 1, max: DAY_NS }),
    split: fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true })),
    samples: fc.option(fc.integer({ min: 0, max: 65_536 })),
    gpu: fc.tuple(fc.option(ns(DAY_NS)), fc.option(ns(DAY_NS)), fc.option(ns(DAY_NS))),
  })
  .map(({ durNs, split, samples, gpu }) => {
    const total = split[0] + split[1] + split[2] || 1;
    const part = (x: number) => Math.floor((durNs * x) / total / 1.0001);
    return { durNs, dataNs: part(split[0]), h2dNs: part(split[1]), computeNs: part(split[2]), samples, gpu };
  });

/** A protocol row in STEP_FIELDS order from named values (columns not named are nil). */
export function rowOf(values: Partial<Record<(typeof STEP_FIELDS)[number], number | null>>): (number | null)[] {
  return STEP_FIELDS.map((name) => values[name] ?? null);
}

/** One protocol row. */
export function stepRow(seq: number, endNs: number, spec: RowSpec): (number | null)[] {
  const [gpu_h2d_ns, gpu_compute_ns, gpu_idle_ns] = spec.gpu;
  return rowOf({ seq, step: Math.max(0, seq - 1), end_ns: endNs, dur_ns: spec.durNs, data_ns: spec.dataNs, h2d_ns: spec.h2dNs, compute_ns: spec.computeNs, samples: spec.samples, gpu_h2d_ns, gpu_compute_ns, gpu_idle_ns });
}

export const validSteps: fc.Arbitrary<Record<string, unknown>> = fc
  .record({
    // Mostly what a new session sends (seq 1 on, one apart, ending about now on BASE_MONO_NS's clock): that reaches the store.
    first: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 2 ** 40 })),
    gaps: fc.array(fc.oneof({ weight: 5, arbitrary: fc.constant(1) }, fc.integer({ min: 1, max: 3 })), { minLength: 1, maxLength: 6 }),
    specs: fc.array(rowSpec, { minLength: 6, maxLength: 6 }),
    end: fc.oneof(fc.constant(BASE_MONO_NS), ns(2 ** 52)),
    dropped: uint,
  })
  .map(({ first, gaps, specs, end, dropped }) => {
    let seq = first;
    const rows = gaps.map((gap, i) => {
      seq += i === 0 ? 0 : gap;
      return stepRow(seq, end + i * 1e6, specs[i]!);
    });
    return { v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped };
  });

export const validEnv: fc.Arbitrary<Record<string, unknown>> = realisticEnv.map((env) => ({ v: 1, type: 'env', env }));

export const validEnd: fc.Arbitrary<Record<string, unknown>> = fc.constantFrom('close', 'exit').map((reason) => ({ v: 1, type: 'end', reason }));

const figure = fc.option(fc.oneof(fc.integer({ min: 0, max: 100 }), fc.double({ min: 0, max: 1e6, noNaN: true })));
export const nvmlSample = fc.record({
  at_ns: uint,
  index: fc.option(fc.integer({ min: 0, max: 7 })),
  uuid: fc.option(fc.constantFrom('GPU-0b7d1c0e-4f3a-4c5e-9a61-0b1b2c3d4e5f', 'GPU-1')),
  name: fc.option(fc.constant('NVIDIA H100 80GB HBM3')),
  util_gpu: figure,
  util_mem: figure,
  mem_used_mib: figure,
  mem_total_mib: figure,
  temp_c: figure,
  power_w: figure,
  power_limit_w: figure,
  sm_clock_mhz: figure,
  sm_clock_max_mhz: figure,
  mem_clock_mhz: figure,
  pstate: fc.option(fc.constantFrom('P0', 'P2', 'P8')),
  throttle_reasons: fc.option(fc.integer({ min: 0, max: 2 ** 30 })),
});
export const processSample = fc.record({
  at_ns: uint,
  cpu_main_s: figure,
  cpu_workers_s: figure,
  workers: fc.option(fc.integer({ min: 0, max: 64 })),
  rss_bytes: figure,
  cgroup_nr_periods: figure,
  cgroup_nr_throttled: figure,
  cgroup_throttled_usec: figure,
  cgroup_quota_cores: figure,
  cgroup_usage_usec: figure,
  train_cpu_s: figure,
  train_wait_s: figure,
});

export const validCounters: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.array(nvmlSample, { minLength: 1, maxLength: 4 }).map((samples) => ({ v: 1, type: 'counters', source: 'nvml', samples })),
  fc.array(processSample, { minLength: 1, maxLength: 4 }).map((samples) => ({ v: 1, type: 'counters', source: 'process', samples })),
);

export const validFrame: fc.Arbitrary<Record<string, unknown>> = fc.oneof(validHello, validSteps, validEnv, validEnd, validCounters);

/** `env` (an env frame's, or a hello's) with keys of every kind (control characters, `__proto__`, 200 characters) and any values. */
const oddEnv = fc.dictionary(fc.oneof(anyKey, fc.string({ minLength: 65, maxLength: 200 })), anyValue, { minKeys: 1, maxKeys: 4 });
export const oddEnvFrame: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  oddEnv.map((env) => ({ v: 1, type: 'env', env })),
  fc.tuple(validHello, oddEnv).map(([hello, env]) => ({ ...hello, env })),
);

// ---------------------------------------------------------------------------------------------------
// Mutations: a valid frame with one part replaced, removed or added

export type Path = Array<string | number>;

function isContainer(value: unknown): value is Record<string, unknown> | unknown[] {
  return typeof value === 'object' && value !== null && (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null);
}

/** Every path inside `value` (not the root itself), parents before children. */
export function pathsOf(value: unknown, prefix: Path = []): Path[] {
  if (!isContainer(value)) return [];
  const keys: Array<string | number> = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
  return keys.flatMap((key) => [[...prefix, key], ...pathsOf((value as Record<string | number, unknown>)[key], [...prefix, key])]);
}

function containerPaths(value: unknown): Path[] {
  return [[], ...pathsOf(value)].filter((path) => isContainer(get(value, path)));
}

export function get(value: unknown, path: Path): unknown {
  return path.reduce<unknown>((at, key) => (at as Record<string | number, unknown>)[key], value);
}

function setOwn(target: Record<string | number, unknown>, key: string | number, value: unknown): void {
  // defineProperty: a key `__proto__` becomes a property, as msgpack maps carry it, not a prototype.
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export interface Mutation {
  op: 'replace' | 'delete' | 'add';
  /** Picks the path, modulo the number of candidates. */
  pick: number;
  key: string;
  value: unknown;
}

export const mutation: fc.Arbitrary<Mutation> = fc.record({
  op: fc.constantFrom('replace', 'replace', 'replace', 'delete', 'add'),
  pick: fc.nat(),
  key: anyKey,
  value: fc.oneof({ weight: 4, arbitrary: anyValue }, deepValue, hugeText),
});

/** Mutations with any value but the deep and the huge (which no field accepts): for frames that should still parse. */
export const lightMutation: fc.Arbitrary<Mutation> = fc.record({
  op: fc.constantFrom('replace', 'replace', 'replace', 'delete', 'add'),
  pick: fc.nat(),
  key: anyKey,
  value: anyValue,
});

/** `frame` with the mutation applied (a copy); `avoid` lists top-level keys never touched. */
export function mutate(frame: Record<string, unknown>, m: Mutation, avoid: readonly string[] = []): { frame: Record<string, unknown>; path: Path } {
  const copy = structuredClone(frame);
  const allowed = (path: Path) => path.length === 0 || !avoid.includes(String(path[0]));
  if (m.op === 'add') {
    const parents = containerPaths(copy).filter((path) => allowed(path) && !Array.isArray(get(copy, path)));
    const parent = parents[m.pick % parents.length]!;
    const key = parent.length === 0 && avoid.includes(m.key) ? `${m.key}_` : m.key;
    setOwn(get(copy, parent) as Record<string, unknown>, key, m.value);
    return { frame: copy, path: [...parent, key] };
  }
  const paths = pathsOf(copy).filter((path) => allowed(path));
  const path = paths[m.pick % paths.length]!;
  const parent = get(copy, path.slice(0, -1)) as Record<string | number, unknown>;
  const key = path.at(-1)!;
  if (m.op === 'delete') {
    if (Array.isArray(parent)) parent.splice(key as number, 1);
    else delete parent[key];
  } else {
    setOwn(parent, key, m.value);
  }
  return { frame: copy, path };
}

/** `frame` encoded as raw msgpack, with the value at `path` replaced by the bytes `replacement`. */
export function encodeReplacing(value: unknown, path: Path, replacement: Uint8Array): Uint8Array {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path;
  if (Array.isArray(value)) return rawArray(value.map((item, i) => (i === head ? encodeReplacing(item, rest, replacement) : encodeFrame(item))));
  if (isContainer(value)) {
    return rawMap(Object.entries(value).map(([key, item]): [Uint8Array, Uint8Array] => [encodeFrame(key), key === head ? encodeReplacing(item, rest, replacement) : encodeFrame(item)]));
  }
  return encodeFrame(value);
}

export interface RawMutation {
  pick: number;
  replacement: Uint8Array;
  /** Repeat one of the map's entries after the others (duplicate keys), by index. */
  duplicate: number | null;
}

export const rawMutation: fc.Arbitrary<RawMutation> = fc.record({
  pick: fc.nat(),
  replacement: fc.oneof({ weight: 4, arbitrary: rawValue }, rawDeep),
  duplicate: fc.option(fc.nat()),
});

/** A valid frame's bytes with one value replaced by raw msgpack, and maybe a top-level key repeated. */
export function rawMutate(frame: Record<string, unknown>, m: RawMutation): Uint8Array {
  const paths = pathsOf(frame);
  const path = paths[m.pick % paths.length]!;
  if (m.duplicate === null) return encodeReplacing(frame, path, m.replacement);
  const entries = Object.entries(frame).map(([key, item]): [Uint8Array, Uint8Array] => [encodeFrame(key), encodeFrame(item)]);
  const [key] = entries[m.duplicate % entries.length]!;
  return rawMap([...entries, [key, m.replacement]]);
}

// ---------------------------------------------------------------------------------------------------
// The frame path of src/ingest/connection.ts, and what its outcome may be

export type Outcome = { ok: true; message: HookMessage } | { ok: false; error: ProtocolError };

/**
 * What HookConnection does with a binary frame before acting on it (readHookFrame: decode, a failure
 * a 1007, and validate). Any exception other than a ProtocolError escapes: that is the bug to find.
 */
export function readFrame(bytes: Uint8Array): Outcome {
  try {
    return { ok: true, message: readHookFrame(bytes) };
  } catch (error) {
    if (error instanceof ProtocolError) return { ok: false, error };
    throw error;
  }
}

/** The close codes a refused frame may carry (never 1011: that is the sidecar failing). */
export const REFUSAL_CODES: readonly number[] = [CloseCode.protocolError, CloseCode.unsupportedData, CloseCode.invalidPayload, CloseCode.policyViolation, CloseCode.tooBig];

// ---------------------------------------------------------------------------------------------------
// JSON

/**
 * Where `value` stops being plain JSON data (what JSON.stringify writes and JSON.parse gives back
 * unchanged): the path and the offending kind, or null. Plain data: null, booleans, finite numbers,
 * strings, arrays, and objects whose prototype is Object.prototype or null.
 */
export function jsonProblem(value: unknown, path = '$'): string | null {
  const stack: Array<[unknown, string]> = [[value, path]];
  while (stack.length > 0) {
    const [item, where] = stack.pop()!;
    switch (typeof item) {
      case 'string':
      case 'boolean':
        continue;
      case 'number':
        if (!Number.isFinite(item)) return `${where}: ${item} is not a JSON number`;
        continue;
      case 'object': {
        if (item === null) continue;
        if (Array.isArray(item)) {
          item.forEach((child, i) => stack.push([child, `${where}[${i}]`]));
          continue;
        }
        const proto = Object.getPrototypeOf(item);
        if (proto !== Object.prototype && proto !== null) return `${where}: a ${Object.prototype.toString.call(item)} (${(item as object).constructor?.name ?? 'no constructor'}) is not plain JSON data`;
        for (const key of Object.keys(item)) stack.push([(item as Record<string, unknown>)[key], `${where}.${key.length > 40 ? key.slice(0, 40) + '…' : key}`]);
        continue;
      }
      default:
        return `${where}: ${typeof item} is not JSON`;
    }
  }
  return null;
}

/** The first key or string in `value` holding a control character (C0, DEL, C1), with its path, or null. */
export function controlProblem(value: unknown, path = '$'): string | null {
  const control = /[\u0000-\u001f\u007f-\u009f]/;
  const stack: Array<[unknown, string]> = [[value, path]];
  while (stack.length > 0) {
    const [item, where] = stack.pop()!;
    if (typeof item === 'string') {
      if (control.test(item)) return `${where}: ${JSON.stringify(item.slice(0, 60))}`;
    } else if (Array.isArray(item)) {
      item.forEach((child, i) => stack.push([child, `${where}[${i}]`]));
    } else if (typeof item === 'object' && item !== null) {
      for (const [key, child] of Object.entries(item)) {
        if (control.test(key)) return `${where}: key ${JSON.stringify(key.slice(0, 60))}`;
        stack.push([child, `${where}.${key}`]);
      }
    }
  }
  return null;
}

/** Short description of a value for failure messages (huge strings and deep values cut). */
export function brief(value: unknown, max = 300): string {
  let text: string;
  try {
    text = JSON.stringify(value, function (this: unknown, key: string, v: unknown) {
      // The value before toJSON (a Date, a Buffer): JSON.stringify hands the replacer the converted one.
      const raw = key === '' ? value : (this as Record<string, unknown>)[key];
      if (typeof raw === 'bigint') return `${raw}n`;
      if (raw instanceof Uint8Array) return `<${raw.length} bytes>`;
      if (typeof raw === 'object' && raw !== null && !Array.isArray(raw)) {
        const proto = Object.getPrototypeOf(raw);
        if (proto !== Object.prototype && proto !== null) {
          let shown: string;
          try {
            shown = String(raw);
          } catch {
            shown = '?';
          }
          return `<${Object.prototype.toString.call(raw).slice(8, -1)} ${shown.slice(0, 40)}>`;
        }
      }
      return v;
    });
  } catch (error) {
    text = `<${(error as Error).message}>`;
  }
  return text === undefined ? String(value) : text.length > max ? `${text.slice(0, max)}…(${text.length} chars)` : text;
}

// ---------------------------------------------------------------------------------------------------
// Journals

export interface ScriptParams {
  ranks: number;
  seconds: number;
  phases: { data: number; h2d: number; compute: number; other: number };
  env: Record<string, string | number | boolean>;
  ended: boolean;
  stopped: boolean;
  /** Steps kept as the frames they came in (as a live sidecar writes them when it keeps every record), else as rows. */
  framed: boolean;
}

/** A steps entry's rows as the frame a hook would have sent them in: the journal's other form of the same records. */
function asFrame(entry: JournalEntry): JournalEntry {
  if (entry.t !== 'steps' || !entry.rows?.length) return entry;
  const { rows, ...rest } = entry;
  return { ...rest, frame: Buffer.from(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: entry.dropped })).toString('base64') };
}

/** A realistic journal: a sidecar start, one or two ranks' hellos, steps, ticks, an env update, samples, an end, a stop. */
export function buildScript({ ranks, seconds, phases, env, ended, stopped, framed }: ScriptParams): JournalEntry[] {
  const entries: JournalEntry[] = [
    { t: 'start', at: T0, config: ENGINE_CONFIG },
    { t: 'source', at: T0, gpu: 'hook', reason: 'property test' },
  ];
  const timed: JournalEntry[] = [];
  for (let rank = 0; rank < ranks; rank++) {
    const session = `s${rank}`;
    timed.push(helloEntry(session, { rank, local_rank: rank, world_size: ranks, env: { python: '3.11.7' } }), { t: 'connect', at: T0, session });
    const steps = run(session, 0, seconds, phases).entries.filter((entry) => rank === 0 || entry.t !== 'tick');
    timed.push(...(framed ? steps.map(asFrame) : steps));
    timed.push({ t: 'env', at: T0 + 50, session, env });
    timed.push({
      t: 'counters',
      at: T0 + 60,
      session,
      batch: { source: 'process', samples: [{ at_ns: 60e6, cpu_main_s: 1, cpu_workers_s: 2, workers: 2, rss_bytes: 1e9, cgroup_nr_periods: null, cgroup_nr_throttled: null, cgroup_throttled_usec: null, cgroup_quota_cores: null, cgroup_usage_usec: null, train_cpu_s: null, train_wait_s: null }] },
    } as JournalEntry);
    if (ended) timed.push({ t: 'end', at: T0 + seconds * 1000, session, reason: 'close' }, { t: 'disconnect', at: T0 + seconds * 1000 + 1, session });
  }
  // Stable: entries of one time keep their order (a hello before its connect).
  entries.push(...timed.sort((a, b) => a.at - b.at), { t: 'tick', at: T0 + seconds * 1000 + 250 });
  if (stopped) entries.push({ t: 'stop', at: T0 + seconds * 1000 + 300 });
  // Counterexamples name the script rather than print its hundreds of rows.
  Object.defineProperty(entries, fc.toStringMethod, {
    value: () => `<journal of ${entries.length} entries: ${ranks} rank(s), ${seconds} s, phases ${JSON.stringify(phases)}${ended ? ', ended' : ''}${stopped ? ', stopped' : ''}${framed ? ', framed' : ''}>`,
  });
  return entries;
}

export const scriptParams: fc.Arbitrary<ScriptParams> = fc.record({
  ranks: fc.integer({ min: 1, max: 2 }),
  seconds: fc.integer({ min: 1, max: 2 }),
  phases: fc.record({ data: fc.integer({ min: 0, max: 20 }), h2d: fc.integer({ min: 0, max: 5 }), compute: fc.integer({ min: 1, max: 30 }), other: fc.integer({ min: 0, max: 10 }) }),
  env: fc.dictionary(fc.stringMatching(/^[a-z_]{1,10}$/), fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.boolean()), { maxKeys: 4 }),
  ended: fc.boolean(),
  stopped: fc.boolean(),
  framed: fc.boolean(),
});

export const journalScript: fc.Arbitrary<JournalEntry[]> = scriptParams.map(buildScript);

// ---------------------------------------------------------------------------------------------------
// The sidecar in this process, with hooks on fake sockets

/** A websocket as HookConnection uses it, closing as ws does: ws throws on a code or a reason a close frame cannot carry. */
export class FakeSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  /** What the sidecar sent, decoded. */
  readonly received: Array<Record<string, unknown>> = [];
  closed: { code: number; reason: string } | null = null;

  send(data: Uint8Array): void {
    this.received.push(decode(data) as Record<string, unknown>);
  }

  ping(): void {}

  /** Whether the sidecar stopped reading it (backpressure): frames sent to it still arrive, as ws's buffered ones do. */
  paused = false;
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }

  close(code: number, reason: string): void {
    const valid = (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999);
    if (!valid) throw new TypeError(`First argument must be a valid error code number (got ${code})`);
    if (Buffer.byteLength(reason) > MAX_REASON_BYTES) throw new RangeError('The message must not be greater than 123 bytes');
    if (this.closed) return;
    this.closed = { code, reason };
    this.readyState = 2;
    setImmediate(() => this.gone(code, reason));
  }

  /** The peer goes away (or the closing handshake ends). */
  gone(code = 1006, reason = ''): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.emit('close', code, Buffer.from(reason));
  }
}

export const SOURCES: SourceStatus = { gpu: { source: 'none', reason: 'GPU counters turned off (--gpu-source none)', health: null }, host: null, collectors: [] };
export const ENGINE_CONFIG = { windowMs: 4_000, holdMs: 0, endGraceMs: 3_600_000 };

export interface HookSidecar {
  engine: Engine;
  ingest: Ingest;
  recorder: Recorder;
  now(): number;
  advance(ms: number): void;
  /** A new hook connection, as the /v1/ingest route makes one. */
  connect(): FakeSocket;
  /** Sends a frame on a socket; an exception out of the sidecar's handler is kept in `crashes`. */
  send(socket: FakeSocket, bytes: Uint8Array | string, binary?: boolean): void;
  /** Waits until every entry recorded so far is applied and what follows from it is sent. */
  flush(): Promise<void>;
  /** Ticks at the current time and returns the /v1/state body. */
  state(): Promise<SidecarState>;
  /** Exceptions thrown out of the sidecar's handlers, and connections it closed as failing (1011). */
  crashes: string[];
  sockets: FakeSocket[];
  /** Drops every connection and waits for the disconnects. */
  close(): Promise<void>;
}

/**
 * The sidecar's ingest path as serve() builds it, in this process, on a simulated clock: Engine,
 * Recorder (with a journal if `wal` is given), Ingest, and a HookConnection per fake socket.
 */
export async function hookSidecar(options: { wal?: Wal | null; limits?: Partial<IngestLimits> } = {}): Promise<HookSidecar> {
  let now = T0;
  const pending = new Set<Promise<unknown>>();
  class TrackedRecorder extends Recorder {
    override record(entry: JournalEntry): Promise<EngineSnapshot | null> {
      const promise = super.record(entry);
      pending.add(promise);
      const done = () => void pending.delete(promise);
      promise.then(done, done);
      return promise;
    }
  }
  const log = createLogger('silent');
  // No frame-rate limit: a test sends faster than any hook, and a refusal for it is not what is tested.
  const limits = { ...DEFAULT_LIMITS, framesPerSecond: 1e9, burst: 1e9, ...options.limits };
  const engine = new Engine({ limits });
  const recorder = new TrackedRecorder(engine, options.wal ?? null, { checkpointBytes: 1 << 30, checkpointMs: 3_600_000, samplesGiveUpShare: 0.75, now: () => now, log });
  await recorder.record({ t: 'start', at: now, config: ENGINE_CONFIG });
  await recorder.record({ t: 'source', at: now, gpu: 'hook', reason: 'property test' });
  const ingest = new Ingest(engine.world.jobs, recorder, { now: () => now, limits, nvml: engine.world.hookGpu });
  const slots = new ConnectionSlots(ingest.limits.maxPending);
  const flow = new Flow(ingest.limits);
  const crashes: string[] = [];
  const sockets: FakeSocket[] = [];
  const settle = () => new Promise<void>((resolve) => setImmediate(resolve));
  const flush = async () => {
    const deadline = Date.now() + 10_000;
    for (let quiet = 0; quiet < 3; ) {
      if (Date.now() > deadline) throw new Error(`sidecar did not settle: ${pending.size} entries still pending`);
      const busy = pending.size > 0;
      if (busy) await Promise.allSettled([...pending]);
      await settle();
      quiet = busy ? 0 : quiet + 1;
    }
    for (const socket of sockets) {
      if (socket.closed?.code === CloseCode.internalError) {
        const crash = `connection closed as failing (1011): ${socket.closed.reason}`;
        if (!crashes.includes(crash)) crashes.push(crash);
      }
    }
  };
  return {
    engine,
    ingest,
    recorder,
    now: () => now,
    advance: (ms) => void (now += ms),
    crashes,
    sockets,
    connect() {
      const socket = new FakeSocket();
      sockets.push(socket);
      new HookConnection(socket as unknown as WebSocket, ingest, log, `fake:${sockets.length}`, slots, flow, () => false);
      return socket;
    },
    send(socket, bytes, binary = true) {
      try {
        socket.emit('message', typeof bytes === 'string' ? Buffer.from(bytes) : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), binary);
      } catch (error) {
        crashes.push(`the frame handler threw: ${(error as Error).stack ?? String(error)}`);
      }
    },
    flush,
    async state() {
      await flush();
      await recorder.record({ t: 'tick', at: now });
      return sidecarState({ snapshot: engine.snapshot(), ingest: ingest.stats, sources: SOURCES, journal: recorder.health(), version: 'test', startedAt: T0, windowMs: ENGINE_CONFIG.windowMs });
    },
    async close() {
      for (const socket of sockets) socket.gone();
      await flush();
    },
  };
}

/** Every ISO date-time string in `value` (the state's times), with its path. */
export function isoTimes(value: unknown, path = '$', out: Array<[string, number]> = []): Array<[string, number]> {
  if (typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/.test(value)) out.push([path, Date.parse(value)]);
  else if (Array.isArray(value)) value.forEach((item, i) => isoTimes(item, `${path}[${i}]`, out));
  else if (typeof value === 'object' && value !== null) for (const [key, item] of Object.entries(value)) isoTimes(item, `${path}.${key}`, out);
  return out;
}
