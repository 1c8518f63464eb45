import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Base64Text, TextSink, writeJson } from '../src/io/json-parts.js';
import { CHECKPOINT_LEVELS, encodeLine } from '../src/journal/wal-files.js';
import { hello, run, T0 } from './support/entries.js';

/**
 * The journal writes its lines' JSON in parts (src/io/json-parts.ts), never the whole text as
 * one string: what it writes must be JSON.stringify's text, byte for byte, whatever the value.
 */

const written = (value: unknown, levels = 6, hint = 16): string | undefined => {
  const sink = new TextSink(hint);
  return writeJson(sink, value, levels) ? sink.buffer.toString('utf8', 0, sink.length) : undefined;
};

class Point {
  constructor(
    readonly x: number,
    readonly y: number,
  ) {}
}

/** JSON.rawJSON's values where this Node has them (22 and later): JSON.stringify writes their text as it is. */
const rawJSON = (JSON as { rawJSON?: (text: string) => unknown }).rawJSON;
const rawValues = rawJSON ? [fc.integer().map((n) => rawJSON(String(n)))] : [];

/** Values as JSON.stringify meets them: nested past the opened levels, with what it leaves out or turns into null. */
const anyValue = fc.letrec((tie) => ({
  leaf: fc.oneof(
    fc.constant(null),
    fc.constant(undefined),
    fc.boolean(),
    fc.double(),
    fc.integer(),
    fc.string({ unit: 'binary' }),
    fc.constant(() => 1),
    fc.constant(Symbol('s')),
    fc.date({ noInvalidDate: true }),
    fc.integer().map((n) => new Number(n)),
    fc.tuple(fc.integer(), fc.integer()).map(([x, y]) => new Point(x, y)),
    fc.uint8Array({ maxLength: 64 }).map((bytes) => new Base64Text(Buffer.from(bytes))),
    ...rawValues,
  ),
  node: fc.oneof({ depthSize: 'small' }, tie('leaf'), tie('array'), tie('object'), tie('withToJSON')),
  array: fc.array(tie('node'), { maxLength: 5 }),
  object: fc.dictionary(fc.string({ unit: 'binary', maxLength: 6 }), tie('node'), { maxKeys: 5 }),
  withToJSON: tie('node').map((inner) => ({ toJSON: (key: string) => ({ key, inner }) })),
}));

describe('JSON written in parts', () => {
  it("is JSON.stringify's text for any value, nested deeper than the levels it opens", () => {
    fc.assert(
      fc.property(anyValue.node, fc.integer({ min: 0, max: 8 }), (value, levels) => {
        expect(written(value, levels)).toBe(JSON.stringify(value));
      }),
      { numRuns: 500 },
    );
  });

  it('writes a Base64Text as the base64 of its bytes, across slices and buffer growth alike', () => {
    for (const size of [0, 1, 2, 3, 49_151, 49_152, 49_153, 200_000]) {
      const bytes = Buffer.from(Array.from({ length: size }, (_, i) => (i * 7919) % 251));
      const value = { t: 'steps', frame: new Base64Text(bytes), deep: [[[[[[[{ frame: new Base64Text(bytes.subarray(0, 10)) }]]]]]]] };
      expect(written(value)).toBe(JSON.stringify(value));
      expect(JSON.parse(written(value)!).frame).toBe(bytes.toString('base64'));
    }
  });

  it('leaves out what JSON.stringify has no text for, and throws what it throws', () => {
    expect(written(undefined)).toBeUndefined();
    expect(written(() => 1)).toBeUndefined();
    expect(() => written({ a: [{ b: 1n }] })).toThrow(TypeError);
    const cycle: Record<string, unknown> = { a: {} };
    (cycle.a as Record<string, unknown>).back = [[[[[[cycle]]]]]];
    expect(() => written(cycle)).toThrow();
  });

  it("writes a real engine's checkpoint as JSON.stringify does, into a line the journal reads", () => {
    const engine = new Engine();
    engine.apply({ t: 'start', at: T0, config: { windowMs: 4_000, holdMs: 1_000, endGraceMs: 2_000, regressionThresholdPct: 10, regressionHoldMs: 5_000 } });
    engine.apply(hello('s0'));
    engine.apply({ t: 'connect', at: T0, session: 's0' });
    for (const entry of run('s0', 0, 400, { data: 3, compute: 7 }).entries) engine.apply(entry);
    const checkpoint = engine.toCheckpoint();
    const json = JSON.stringify(checkpoint);
    expect(json.length).toBeGreaterThan(20_000);
    for (const hint of [1, 256, json.length, json.length * 4]) {
      const line = encodeLine(checkpoint, hint, CHECKPOINT_LEVELS);
      expect(line.toString('utf8', 9, line.length - 1)).toBe(json);
      expect(line.toString('utf8', 0, 9)).toMatch(/^[0-9a-f]{8} $/);
      expect(line.at(-1)).toBe(0x0a);
      // Room it overestimated by far is not held with the line.
      expect(line.buffer.byteLength).toBeLessThanOrEqual(Math.max(2 * line.length, line.length + 8192));
    }
  });
});
