import { spawnSync } from 'node:child_process';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decode, encode } from '../src/protocol/codec.js';
import { parseHookMessage, readHookFrame } from '../src/protocol/messages.js';
import { RECORD_COLUMNS, REQUIRED_COLUMNS } from '../src/protocol/step-records.js';
import { readUsualSteps } from '../src/protocol/steps-bytes.js';
import { findPython } from './support/python.js';
import { ROOT } from './support/sidecar.js';

/** What the general path makes of the bytes: the message, or the refusal's text. */
function general(bytes: Uint8Array): unknown {
  try {
    return parseHookMessage(decode(bytes));
  } catch (error) {
    return { refused: (error as Error).message };
  }
}

const OPTIONAL = RECORD_COLUMNS.filter((c) => !(REQUIRED_COLUMNS as readonly string[]).includes(c));
const wide = (n: number) => (n >= 2 ** 32 ? BigInt(n) : n); // as the hook writes it: a 64-bit integer, not a double

/** A frame the hook could send: its columns (the required ones and some optional ones, in any order) and rows that pass every check. */
const usualFrame = fc
  .record({
    optional: fc.subarray(OPTIONAL),
    order: fc.array(fc.nat(), { minLength: RECORD_COLUMNS.length, maxLength: RECORD_COLUMNS.length }),
    rows: fc.array(
      fc.record({
        gap: fc.integer({ min: 1, max: 3 }),
        end: fc.oneof(fc.nat({ max: 1000 }), fc.integer({ min: 2 ** 31, max: 2 ** 53 - 1 })),
        dur: fc.integer({ min: 1, max: 86_400e9 }),
        parts: fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true })),
        samples: fc.option(fc.nat({ max: 100_000 })),
        gpu: fc.option(fc.integer({ min: 0, max: 86_400e9 })),
        commBytes: fc.option(fc.integer({ min: 0, max: 2 ** 53 - 1 })),
      }),
      { minLength: 1, maxLength: 40 },
    ),
    dropped: fc.oneof(fc.nat({ max: 200 }), fc.integer({ min: 2 ** 32, max: 2 ** 53 - 1 })),
  })
  .map(({ optional, order, rows, dropped }) => {
    const fields = [...REQUIRED_COLUMNS, ...optional].map((c, i) => [order[i]!, c] as const).sort((a, b) => a[0] - b[0]).map(([, c]) => c);
    let seq = 0;
    const records = rows.map((row) => {
      seq += row.gap;
      // Each phase a share of what the step has left, so that they never exceed it.
      const data = Math.floor(row.dur * row.parts[0] * 0.3);
      const h2d = Math.floor(row.dur * row.parts[1] * 0.3);
      const compute = Math.floor(row.dur * row.parts[2] * 0.3);
      const values: Record<string, number | null> = {
        seq,
        step: seq - 1,
        end_ns: row.end,
        dur_ns: row.dur,
        data_ns: data,
        h2d_ns: h2d,
        compute_ns: compute,
        samples: row.samples,
        gpu_h2d_ns: row.gpu,
        gpu_compute_ns: row.gpu,
        gpu_idle_ns: row.gpu === null ? null : 0,
        comm_ns: row.gpu === null ? null : Math.min(row.gpu, row.dur),
        comm_wait_ns: row.gpu === null ? null : Math.floor(Math.min(row.gpu, row.dur) / 2),
        comm_bytes: row.commBytes,
        eval_ns: row.samples === null ? null : Math.floor(row.dur * 0.05),
      };
      return fields.map((f) => (values[f] === null ? null : wide(values[f]!)));
    });
    return { v: 1, type: 'steps', fields, rows: records, dropped: wide(dropped) };
  });

/** The first row with `column`'s value replaced. */
const firstRow = (column: string, value: unknown) => (f: any) => ({ ...f, rows: [f.rows[0].map((v: unknown, i: number) => (f.fields[i] === column ? value : v)), ...f.rows.slice(1)] });

/** Ways a usual frame becomes one the general path refuses or reads another way. */
const spoil = fc.oneof(
  // In any required column: nil, negative, not an integer, past 2^53 - 1, text.
  fc.tuple(fc.constantFrom(...REQUIRED_COLUMNS), fc.constantFrom<unknown>(null, -1, 1.5, 2n ** 53n, 'x', -(2n ** 40n))).map(([column, value]) => firstRow(column, value)),
  fc.constant(firstRow('seq', 0)),
  fc.constant((f: any) => ({ ...f, rows: f.rows.map((r: unknown[], i: number) => (i === 0 ? r.slice(1) : r)) })), // a short row
  fc.constant((f: any) => ({ ...f, rows: [...f.rows, f.rows[0]] })), // a seq that does not follow
  fc.constant((f: any) => ({ ...f, fields: f.fields.filter((c: string) => c !== 'samples'), rows: f.rows.map((r: unknown[]) => r.filter((_v, i) => f.fields[i] !== 'samples')) })), // a required column missing
  fc.constant((f: any) => ({ ...f, fields: [...f.fields, 'extra_ns'], rows: f.rows.map((r: unknown[]) => [...r, 1]) })), // a column of a newer hook
  fc.constant((f: any) => ({ ...f, fields: [...f.fields, f.fields[0]], rows: f.rows.map((r: unknown[]) => [...r, r[0]]) })), // a column twice
  fc.constant((f: any) => ({ ...f, note: 'x' })), // a key of a newer hook
  fc.constant((f: any) => ({ ...f, v: 2 })),
  fc.constant((f: any) => ({ ...f, dropped: -1 })),
  fc.constant((f: any) => ({ ...f, rows: [] })),
  fc.constant(({ fields, ...f }: any) => ({ rows: f.rows, fields, ...f })), // rows before fields
  fc.constant(({ dropped, ...f }: any) => f), // no dropped
);

describe('a steps frame read straight from its bytes', () => {
  it('reads every frame the hook could send, into the records the general path makes of it', () => {
    fc.assert(
      fc.property(usualFrame, (frame) => {
        const bytes = encode(frame);
        const fast = readUsualSteps(bytes);
        expect(fast).not.toBeNull();
        expect(fast).toEqual(general(bytes));
      }),
      { numRuns: 300 },
    );
  });

  it('leaves every other frame to the general path, which refuses it or reads it its own way', () => {
    fc.assert(
      fc.property(usualFrame, spoil, (frame, change) => {
        const bytes = encode(change(frame));
        const fast = readUsualSteps(bytes);
        const slow = general(bytes);
        // Where it reads one, it reads it as the general path does; readHookFrame gives what the general path gives.
        if (fast !== null) expect(fast).toEqual(slow);
        let read: unknown;
        try {
          const message = readHookFrame(bytes);
          // A steps frame carries the bytes it was read from where this reader read it (the journal keeps them), else none.
          if (message.type === 'steps') {
            const { bytes: carried, ...rest } = message;
            expect(carried).toBe(fast !== null ? bytes : undefined);
            read = rest;
          } else read = message;
        } catch (error) {
          read = { refused: (error as Error).message };
        }
        expect(read).toEqual(slow);
      }),
      { numRuns: 300 },
    );
  });

  it('reads nothing but steps frames, and nothing cut short', () => {
    const frame = { v: 1, type: 'steps', fields: [...REQUIRED_COLUMNS], rows: [[1, 0, 2n ** 40n, 10, 1, 1, 1, 4]], dropped: 0 };
    const bytes = encode(frame);
    expect(readUsualSteps(bytes)).not.toBeNull();
    for (let cut = 0; cut < bytes.length; cut++) expect(readUsualSteps(bytes.subarray(0, cut))).toBeNull();
    expect(readUsualSteps(Buffer.concat([bytes, Buffer.from([0])]))).toBeNull();
    expect(readUsualSteps(encode({ ...frame, type: 'heartbeat' }))).toBeNull();
    expect(readUsualSteps(encode({ v: 1, type: 'heartbeat' }))).toBeNull();
    expect(readUsualSteps(encode([1, 2]))).toBeNull();
  });

  const python = findPython();
  it.skipIf(!python.python)("reads the real hook's frames (its encoder, CPU and GPU rows, 64-bit ends)", () => {
    const script = `import sys, binascii
sys.path.insert(0, ${JSON.stringify(path.join(ROOT, 'python-hook'))})
from stepscope import _protocol
rows = [_protocol.encode_record((1, 2**45, 1_000_000, 200_000, 100_000, 600_000, 32, None, None), 0, (None, None, None)),
        _protocol.encode_record((2, 2**45 + 10**6, 1_000_000, 200_000, 0, 600_000, None, None, 5000), 0, (None, None, None)),
        _protocol.encode_row(3, 2, 2**45 + 2 * 10**6, 5 * 10**9, 10, 20, 30, 64, 1000, 2000, 3000, 4000, 100, 2**40, 7)]
sys.stdout.write(binascii.hexlify(_protocol.steps(rows, 2**33)).decode())
`;
    const run = spawnSync(python.python!, ['-c', script], { encoding: 'utf8' });
    expect(run.status, run.stderr).toBe(0);
    const bytes = Buffer.from(run.stdout.trim(), 'hex');
    const fast = readUsualSteps(bytes);
    expect(fast?.records.map((r) => [r.seq, r.endNs, r.samples, r.gpuComputeNs, r.commBytes, r.evalNs])).toEqual([
      [1, 2 ** 45, 32, null, null, null],
      [2, 2 ** 45 + 1e6, null, null, null, 5000],
      [3, 2 ** 45 + 2e6, 64, 2000, 2 ** 40, 7],
    ]);
    expect(fast).toEqual(general(bytes));
  });
});
