import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { liveSteps, parseEntry, recordsOf, toRow, type StepsEntry } from '../src/engine/entries.js';
import { BAD_LINE, decodeLine, encodeLine } from '../src/journal/wal-files.js';
import { encode } from '../src/protocol/codec.js';
import { MAX_ROWS_PER_FRAME } from '../src/protocol/hook-schema.js';
import { parseHookMessage, readHookFrame, type StepRecord, type Steps } from '../src/protocol/messages.js';
import { STEP_FIELDS } from './support/hook-client.js';

/** A live frame's steps go to the engine as parsed; the journal writes and a replay reads what it always did. */

const ms = 1_000_000;
const REAL_HOOK_FRAME =
  'haF2AaR0eXBlpXN0ZXBzpmZpZWxkc5+jc2VxpHN0ZXCmZW5kX25zpmR1cl9uc6dkYXRhX25zpmgyZF9uc6pjb21wdXRlX25zp3NhbXBsZXOqZ3B1X2gyZF9uc65ncHVfY29tcHV0ZV9uc6tncHVfaWRsZV9uc6djb21tX25zrGNvbW1fd2FpdF9uc6pjb21tX2J5dGVzp2V2YWxfbnOkcm93c5ifzgAAAAHOAAAAAM8AACAAAAAAAM4AD0JAzgADDUDOAAGGoM4ACSfAzgAAACDAwMDAwMDAn84AAAACzgAAAAHPAAAgAAAPQkDOAA9CQM4AAw1AzgAAAADOAAknwMDAwMDAwMDOAAATiJ/OAAAAA84AAAACzwAAIAAAHoSAzgAPQkDOAAMNQM4AAYagzgAJJ8DOAAAAIMDAwMDAwMCfzgAAAATOAAAAA88AACAAAC3GwM4AD0JAzgADDUDOAAAAAM4ACSfAwMDAwMDAwM4AABOIn84AAAAFzgAAAATPAAAgAAA9CQDOAA9CQM4AAw1AzgABhqDOAAknwM4AAAAgwMDAwMDAwJ/OAAAABs4AAAAFzwAAIAAATEtAzgAPQkDOAAMNQM4AAAAAzgAJJ8DAwMDAwMDAzgAAE4ifzgAAAAfOAAAABs8AACAAAFuNgM4AD0JAzgADDUDOAAGGoM4ACSfAzgAAACDAwMDAwMDAn84AAAAIzgAAAAfPAAAgAABqz8DOAA9CQM4AAw1AzgAAAADOAAknwMDAwMDAwMDOAAATiKdkcm9wcGVkAw==';
const row = (seq: number) => [seq, seq - 1, seq * 100 * ms, 100 * ms, 10 * ms, 0, 40 * ms, 8, null, null, null];

function parsed(rows: unknown[][]): StepRecord[] {
  const message = parseHookMessage({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 });
  if (message.type !== 'steps') throw new Error('not steps');
  return message.records;
}

describe('a live steps entry', () => {
  it('is journaled byte for byte as its rows alone, and its replay applies the same records', () => {
    const records = parsed([row(1), row(2), row(3)]);
    for (const refused of [null, { count: 1, through: 3 }]) {
      const live = liveSteps(1_000, 's', 2, records, 1, refused);
      const plain = { t: 'steps', at: 1_000, session: 's', dropped: 2, rows: records.map(toRow), duplicates: 1, ...(refused ? { refused } : {}) };
      expect(JSON.stringify(live)).toBe(JSON.stringify(plain));
      expect(recordsOf(live)).toBe(records);
      const replayed = parseEntry(JSON.parse(JSON.stringify(live)));
      expect(typeof replayed).toBe('object');
      expect(recordsOf(replayed as StepsEntry)).toEqual(records);
    }
  });

  it('read back from the journal, is checked by the frame rule: a row that a frame could not hold throws', () => {
    const records = parsed([row(1), row(2)]);
    const rows = records.map(toRow);
    // Phases that exceed the step's duration, and seqs out of order: both refused in a frame.
    const bad = [
      [rows[0]!, [...rows[1]!.slice(0, 6), 200 * ms, ...rows[1]!.slice(7)]],
      [rows[1]!, rows[0]!],
    ];
    for (const badRows of bad) {
      const entry = parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, rows: badRows });
      expect(typeof entry).toBe('object');
      expect(() => recordsOf(entry as StepsEntry)).toThrow('bad row');
    }
  });
});

/** A frame as a hook sends it, read as the connection reads it: records and the bytes they came from. */
function received(rows: unknown[][], extra: Record<string, unknown> = {}): Steps & { bytes: Uint8Array } {
  const message = readHookFrame(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0, ...extra }));
  if (message.type !== 'steps' || !message.bytes) throw new Error('not steps');
  return message as Steps & { bytes: Uint8Array };
}

describe('a live steps entry whose every record was kept', () => {
  it("is one line as JSON.stringify writes it at a hook's largest frame, whose base64 the line writes in slices", () => {
    const message = received(Array.from({ length: MAX_ROWS_PER_FRAME }, (_, i) => row(i + 1)));
    expect(message.bytes.length * (4 / 3)).toBeGreaterThan(128 * 1024);
    const live = liveSteps(1_000, 's', 0, message.records, 0, null, message.bytes);
    const line = encodeLine(live);
    expect(line.toString('utf8', 9, line.length - 1)).toBe(JSON.stringify(live));
    const value = decodeLine(line, 0, line.length - 1, { reason: '' });
    expect(recordsOf(parseEntry(value) as StepsEntry)).toEqual(message.records);
  });

  it('is journaled as the frame it came in, and its replay reads the same records from it', () => {
    const message = received(Array.from({ length: 64 }, (_, i) => row(i + 1)));
    const live = liveSteps(1_000, 's', 3, message.records, 0, null, message.bytes);
    const text = JSON.stringify(live);
    expect(JSON.parse(text)).toEqual({ t: 'steps', at: 1_000, session: 's', dropped: 3, frame: Buffer.from(message.bytes).toString('base64'), duplicates: 0 });
    expect(recordsOf(live)).toBe(message.records);
    const replayed = parseEntry(JSON.parse(text));
    expect(typeof replayed).toBe('object');
    expect(recordsOf(replayed as StepsEntry)).toEqual(message.records);
  });

  it("reads back a real hook's frame as journaled before (kept literally: a change to the wire's frames must not strand journaled ones)", () => {
    // python-hook's _protocol.steps() of 8 _protocol.encode_record() rows: 64-bit ends, samples or eval time every other row.
    const entry = parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 3, frame: REAL_HOOK_FRAME, duplicates: 0 });
    expect(typeof entry).toBe('object');
    const records = recordsOf(entry as StepsEntry);
    expect(records.map((r) => [r.seq, r.endNs, r.durNs, r.dataNs, r.computeNs, r.samples, r.evalNs])).toEqual(
      Array.from({ length: 8 }, (_, i) => [i + 1, 2 ** 45 + i * 1e6, 1e6, 2e5, 6e5, i % 2 ? null : 32, i % 2 ? 5000 : null]),
    );
  });

  it('is kept as rows where the general path read the frame: whatever else it held (a key, a column of text) is not journaled', () => {
    const rows = Array.from({ length: 8 }, (_, i) => row(i + 1));
    const frames = [
      { dropped: 0, rows, fields: [...STEP_FIELDS], type: 'steps', v: 1 },
      { v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0, padding: 'x'.repeat(100_000) },
      { v: 1, type: 'steps', fields: [...STEP_FIELDS, 'note'], rows: rows.map((r) => [...r, 'y'.repeat(1_000)]), dropped: 0 },
    ];
    for (const frame of frames) {
      const message = readHookFrame(encode(frame)) as Steps;
      expect(message.type).toBe('steps');
      expect(message.bytes).toBeUndefined();
      const stored = JSON.parse(JSON.stringify(liveSteps(1_000, 's', 0, message.records, 0, null, message.bytes ?? null))) as Record<string, unknown>;
      expect(stored.frame).toBeUndefined();
      expect(stored.rows).toEqual(message.records.map(toRow));
    }
  });

  it('is kept as rows where the frame holds fewer than 8 records: its header would make it as large as they are, or larger', () => {
    for (const count of [1, 4]) {
      const message = received(Array.from({ length: count }, (_, i) => row(i + 1)));
      const stored = JSON.parse(JSON.stringify(liveSteps(1_000, 's', 0, message.records, 0, null, message.bytes))) as Record<string, unknown>;
      expect(stored.frame).toBeUndefined();
      expect(stored.rows).toEqual(message.records.map(toRow));
      expect(JSON.stringify(stored.rows).length).toBeLessThan(Buffer.from(message.bytes).toString('base64').length);
    }
    const eight = received(Array.from({ length: 8 }, (_, i) => row(i + 1)));
    expect(JSON.stringify(eight.records.map(toRow)).length).toBeGreaterThan(Buffer.from(eight.bytes).toString('base64').length);
  });

  it('is kept as rows where records were left out (duplicates, refused), whatever the frame', () => {
    const message = received(Array.from({ length: 9 }, (_, i) => row(i + 1)));
    const kept = message.records.slice(1);
    for (const [duplicates, refused] of [[1, null], [0, { count: 1, through: 3 }]] as const) {
      const live = liveSteps(1_000, 's', 0, kept, duplicates, refused, message.bytes);
      const stored = JSON.parse(JSON.stringify(live)) as Record<string, unknown>;
      expect(stored.frame).toBeUndefined();
      expect(stored.rows).toEqual(kept.map(toRow));
    }
  });

  it('read back, is refused whole unless it is one readable steps frame: not another frame, not rows and a frame at once', () => {
    const good = received([row(1), row(2)]);
    const base64 = (value: Uint8Array) => Buffer.from(value).toString('base64');
    const unreadable = [
      base64(encode({ v: 1, type: 'heartbeat' })),
      base64(encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows: [row(2), row(1)], dropped: 0 })),
      base64(good.bytes.subarray(0, good.bytes.length - 3)),
      'not base64 at all!',
    ];
    for (const frame of unreadable) {
      const entry = parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, frame });
      expect(typeof entry).toBe('object');
      expect(() => recordsOf(entry as StepsEntry)).toThrow('bad frame');
    }
    const both = parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, frame: base64(good.bytes), rows: good.records.map(toRow) });
    expect(both).toMatch(/^steps: must match exactly one schema/);
    // One form sound and the other not: refused, not read by the sound one.
    expect(parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, rows: good.records.map(toRow), frame: 123 })).toMatch(/^steps\.frame: /);
    expect(parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, frame: base64(good.bytes), rows: 'junk' })).toMatch(/^steps\.rows: /);
    expect(parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0 })).toMatch(/^steps: /);
    expect(parseEntry({ t: 'steps', at: 1_000, session: 's', dropped: 0, frame: '' })).toMatch(/^steps/);
  });
});

describe('a journal line', () => {
  it('is the crc of the JSON bytes, a space, the JSON and a newline, for text beyond ASCII too', () => {
    for (const json of ['{"t":"tick","at":1}', JSON.stringify({ t: 'end', at: 2, session: 'ß→🙂', reason: 'été' })]) {
      const body = Buffer.from(json, 'utf8');
      const expected = Buffer.concat([Buffer.from(crc32(body).toString(16).padStart(8, '0') + ' '), body, Buffer.from('\n')]);
      const line = encodeLine(JSON.parse(json));
      expect(line.equals(expected)).toBe(true);
      const value = decodeLine(line, 0, line.length - 1, { reason: '' });
      expect(value).not.toBe(BAD_LINE);
      expect(value).toEqual(JSON.parse(json));
    }
  });
});
