import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { liveSteps, parseEntry, recordsOf, toRow, type StepsEntry } from '../src/engine/entries.js';
import { BAD_LINE, decodeLine, encodeLine } from '../src/journal/wal-files.js';
import { parseHookMessage, type StepRecord } from '../src/protocol/messages.js';
import { STEP_FIELDS } from './support/hook-client.js';

/** A live frame's steps go to the engine as parsed; the journal writes and a replay reads what it always did. */

const ms = 1_000_000;
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

describe('a journal line', () => {
  it('is the crc of the JSON bytes, a space, the JSON and a newline, for text beyond ASCII too', () => {
    for (const json of ['{"t":"tick","at":1}', JSON.stringify({ t: 'end', at: 2, session: 'ß→🙂', reason: 'été' })]) {
      const body = Buffer.from(json, 'utf8');
      const expected = Buffer.concat([Buffer.from(crc32(body).toString(16).padStart(8, '0') + ' '), body, Buffer.from('\n')]);
      const line = encodeLine(json);
      expect(line.equals(expected)).toBe(true);
      const value = decodeLine(line, 0, line.length - 1, { reason: '' });
      expect(value).not.toBe(BAD_LINE);
      expect(value).toEqual(JSON.parse(json));
    }
  });
});
