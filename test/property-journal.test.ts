import { writeFileSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { parseEntry, type JournalEntry } from '../src/engine/entries.js';
import { decode, encode } from '../src/protocol/codec.js';
import { replayJournal } from '../src/journal/replay.js';
import { encodeLine, segmentName } from '../src/journal/wal-files.js';
import { readWal, type WalItem, type WalProblem } from '../src/journal/wal-read.js';
import { sidecarState } from '../src/outputs/state.js';
import { anyValue, brief, buildScript, ENGINE_CONFIG, journalScript as script, scriptParams, jsonProblem, mutate, SEED, SOURCES, T0, TRICKY_KEYS, type Mutation } from './support/arbitraries.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Property tests of the journal's read side: whatever a line holds, the reader and parseEntry never
 * throw; garbage among valid entries is skipped and counted and changes nothing else; and any journal
 * of entries parseEntry accepts replays into a state that serialises.
 */

const tempDir = useTempDirs('stepscope-property-journal-');

const ENTRY_TYPES = ['start', 'source', 'hello', 'connect', 'disconnect', 'env', 'steps', 'end', 'counters', 'gpu', 'host', 'tick', 'stop', 'summarized'] as const;

/** JSON values with the numbers JSON can carry at their extremes. */
const extremeNumber = fc.constantFrom(1e308, -1e308, 1e25, -1e25, 5e-324, -0, 2 ** 53 + 2, -(2 ** 53), 1e15, 1e15 + 1, 8.64e15, 9e15, -1, 0.5, 4294967296);
const jsonish: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  extremeNumber,
  fc.dictionary(fc.oneof(fc.constantFrom(...TRICKY_KEYS), fc.string({ maxLength: 6 })), fc.oneof(fc.jsonValue({ maxDepth: 2 }), extremeNumber), { maxKeys: 6 }),
);

/** Garbage a journal can hold: a torn or foreign line, a line whose CRC does not match, a sound line that is no entry. */
type Garbage = { kind: 'bytes'; bytes: Uint8Array } | { kind: 'flip'; of: number; at: number; bit: number } | { kind: 'not-entry'; value: unknown };
const garbage: fc.Arbitrary<Garbage> = fc.oneof(
  fc.record({ kind: fc.constant('bytes' as const), bytes: fc.oneof(fc.uint8Array({ maxLength: 60 }), fc.string({ unit: 'binary', maxLength: 40 }).map((text) => Buffer.from(text))) }),
  fc.record({ kind: fc.constant('flip' as const), of: fc.nat(), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc
    .record({
      kind: fc.constant('not-entry' as const),
      value: fc.oneof(
        jsonish,
        fc.record({ t: fc.constantFrom(...ENTRY_TYPES), at: fc.oneof(fc.constant(T0), extremeNumber), rest: jsonish }),
        // Entry-shaped, with a `t` that is not a type name (an object, maybe with its own toString).
        fc.record({ t: fc.oneof(jsonish, fc.dictionary(fc.constantFrom('toString', 'valueOf', 'x'), jsonish, { minKeys: 1, maxKeys: 2 })), at: fc.constant(T0) }),
      ),
    })
    .filter((g) => {
      try {
        return typeof parseEntry(g.value) === 'string';
      } catch {
        // parseEntry fails on it (the property above reports that): garbage all the same.
        return true;
      }
    }),
);

const NEWLINE = 0x0a;
const withoutNewlines = (bytes: Uint8Array): Buffer => Buffer.from(Array.from(bytes, (byte) => (byte === NEWLINE ? 0x20 : byte)));

/** The bytes of a garbage line (newline excluded); `lines` are the valid lines (a flip damages a copy of one). */
function garbageLine(g: Garbage, lines: Buffer[]): Buffer {
  if (g.kind === 'bytes') return withoutNewlines(g.bytes);
  if (g.kind === 'not-entry') return encodeLine(g.value).subarray(0, -1);
  const line = Buffer.from(lines[g.of % lines.length]!.subarray(0, -1));
  const at = g.at % line.length;
  line[at] = line[at]! ^ (1 << g.bit);
  // A flip that makes a newline would split the line in two: flip another bit there.
  if (line[at] === NEWLINE) line[at] = NEWLINE ^ 0x80;
  return line;
}

async function readAll(dir: string): Promise<{ items: WalItem[]; bad: WalProblem[] }> {
  const items: WalItem[] = [];
  const bad: WalProblem[] = [];
  for await (const item of readWal(dir, { onBad: (problem) => bad.push(problem) })) items.push(item);
  return { items, bad };
}

function writeJournal(lines: Buffer[]): string {
  const dir = tempDir();
  writeFileSync(path.join(dir, segmentName(1)), Buffer.concat(lines));
  return dir;
}

function stateOf(engine: Engine) {
  return sidecarState({
    snapshot: engine.snapshot(),
    ingest: { connections: 0, connectionsTotal: 0, frames: 0, records: 0, duplicates: 0, rejected: {}, limited: {}, implausible: {} },
    sources: SOURCES,
    journal: null,
    version: 'test',
    startedAt: T0,
    windowMs: ENGINE_CONFIG.windowMs,
  });
}

describe('journal: reading never throws', () => {
  it('parseEntry returns an entry or a reason for any value: JSON, values JSON cannot hold, entry-shaped objects, damaged valid entries', () => {
    const entryShaped = fc.record({ t: fc.constantFrom(...ENTRY_TYPES), at: fc.oneof(fc.constant(T0), extremeNumber, anyValue) }).chain((base) =>
      fc.dictionary(fc.oneof(fc.constantFrom('session', 'hello', 'rows', 'env', 'batch', 'samples', 'sample', 'config', 'gpu', 'reason', 'job', 'run', 'dropped'), fc.string({ maxLength: 6 })), anyValue, { maxKeys: 5 }).map((rest) => ({ ...rest, ...base })),
    );
    const damaged = fc.tuple(script, fc.nat(), fc.record({ op: fc.constantFrom('replace', 'delete', 'add'), pick: fc.nat(), key: fc.string({ maxLength: 8 }), value: fc.oneof(jsonish, anyValue) })).map(([entries, i, m]) => mutate(entries[i % entries.length] as unknown as Record<string, unknown>, m as Mutation).frame);
    fc.assert(
      fc.property(fc.oneof(jsonish, anyValue, entryShaped, damaged), (value) => {
        const parsed = parseEntry(value);
        expect(typeof parsed === 'string' || (typeof parsed === 'object' && parsed !== null)).toBe(true);
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  it('readWal never throws on arbitrary lines, yields exactly the sound record lines in order and reports every other one', async () => {
    const line = fc.oneof({ weight: 2, arbitrary: jsonish.map((value) => ({ sound: true as const, value })) }, garbage.map((g) => ({ sound: false as const, g })));
    await fc.assert(
      fc.asyncProperty(fc.array(line, { maxLength: 30 }), fc.option(fc.uint8Array({ minLength: 1, maxLength: 20 })), async (lines, tail) => {
        const sound = lines.flatMap((l) => (l.sound ? [encodeLine(l.value)] : []));
        const bytes = lines.map((l) => (l.sound ? encodeLine(l.value) : Buffer.concat([garbageLine(l.g, sound.length > 0 ? sound : [encodeLine(0)]), Buffer.from([NEWLINE])])));
        // A torn tail: bytes after the last newline.
        if (tail) bytes.push(withoutNewlines(tail));
        const { items, bad } = await readAll(writeJournal(bytes));
        const expected = lines.flatMap((l) => (l.sound ? [JSON.parse(JSON.stringify(l.value)) as unknown] : l.g.kind === 'not-entry' ? [JSON.parse(JSON.stringify(l.g.value)) as unknown] : []));
        expect(items.map((item) => item.value)).toEqual(expected);
        expect(bad).toHaveLength(lines.filter((l) => !l.sound && l.g.kind !== 'not-entry').length + (tail ? 1 : 0));
      }),
      { seed: SEED, numRuns: 100 },
    );
  });
});

describe('journal: replay', () => {
  it('garbage among valid entries is skipped and counted, and the replayed state is the one the valid entries give alone', async () => {
    const insertion = fc.record({ at: fc.nat(), garbage });
    await fc.assert(
      fc.asyncProperty(script, fc.array(insertion, { minLength: 1, maxLength: 12 }), async (entries, insertions) => {
        const valid = entries.map((entry) => encodeLine(entry));
        const damaged = valid.slice();
        for (const { at, garbage: g } of insertions) damaged.splice(at % (damaged.length + 1), 0, Buffer.concat([garbageLine(g, valid), Buffer.from([NEWLINE])]));
        const clean = await replayJournal(writeJournal(valid));
        const dirty = await replayJournal(writeJournal(damaged));
        const notEntries = insertions.filter((i) => i.garbage.kind === 'not-entry').length;
        expect(dirty.report.entries).toBe(clean.report.entries);
        expect(dirty.report.skipped).toBe(clean.report.skipped + notEntries);
        expect(dirty.report.problems).toBe(clean.report.problems + insertions.length - notEntries);
        expect(JSON.stringify(dirty.engine.toCheckpoint())).toBe(JSON.stringify(clean.engine.toCheckpoint()));
        expect(JSON.stringify(stateOf(dirty.engine))).toBe(JSON.stringify(stateOf(clean.engine)));
      }),
      { seed: SEED, numRuns: 30 },
    );
  });

  it('steps kept as frames replay to the state the same steps kept as rows give', async () => {
    await fc.assert(
      fc.asyncProperty(scriptParams, async (params) => {
        const journal = (list: JournalEntry[]) => writeJournal(list.map((entry) => encodeLine(entry)));
        const entries = buildScript({ ...params, framed: false });
        const framed = buildScript({ ...params, framed: true });
        expect(framed.filter((entry) => entry.t === 'steps' && entry.frame !== undefined)).toHaveLength(entries.filter((entry) => entry.t === 'steps' && (entry.rows?.length ?? 0) > 0).length);
        const asRows = await replayJournal(journal(entries));
        const asFrames = await replayJournal(journal(framed));
        expect(asFrames.report).toMatchObject({ entries: asRows.report.entries, skipped: 0, problems: 0 });
        expect(JSON.stringify(asFrames.engine.toCheckpoint())).toBe(JSON.stringify(asRows.engine.toCheckpoint()));
        expect(JSON.stringify(stateOf(asFrames.engine))).toBe(JSON.stringify(stateOf(asRows.engine)));
      }),
      { seed: SEED, numRuns: 20 },
    );
  });

  it('a journal of entries parseEntry accepts (one valid entry changed, any JSON in it) replays without throwing, to a state that is plain JSON and ticks on', async () => {
    // Any part of any entry, or (most of the paths being step rows) a value of one of the first rows of a steps entry.
    const anyPart = fc.record({ op: fc.constantFrom('replace', 'replace', 'delete', 'add'), pick: fc.nat(), key: fc.string({ maxLength: 8 }), value: jsonish }) as fc.Arbitrary<Mutation>;
    // (end_ns and dur_ns, columns 2 and 3, place the step in time: the likeliest to break what is computed from them.)
    const rowValue = fc.record({ row: fc.nat({ max: 2 }), column: fc.oneof(fc.constantFrom(2, 3), fc.nat({ max: 10 })), value: fc.oneof({ weight: 3, arbitrary: extremeNumber }, jsonish) });
    // Or one of its own fields left out (which its schema may not require).
    const drop = fc.nat().map((k) => ({ drop: k }));
    const change = fc.oneof(anyPart.map((m) => ({ m })), { weight: 2, arbitrary: rowValue.map((r) => ({ r })) }, drop);
    await fc.assert(
      fc.asyncProperty(script, fc.nat(), change, async (entries, which, c) => {
        let i = which % entries.length;
        let changed: Record<string, unknown>;
        if ('m' in c) {
          changed = mutate(entries[i] as unknown as Record<string, unknown>, c.m).frame;
        } else if ('drop' in c) {
          changed = structuredClone(entries[i]) as unknown as Record<string, unknown>;
          const keys = Object.keys(changed).filter((k) => k !== 't');
          delete changed[keys[c.drop % keys.length]!];
        } else {
          const steps = entries.flatMap((entry, k) => (entry.t === 'steps' ? [k] : []));
          i = steps[which % steps.length]!;
          changed = structuredClone(entries[i]) as unknown as Record<string, unknown>;
          // A kept frame is changed inside: its bytes decoded, the value set, encoded again.
          const frame = typeof changed.frame === 'string' ? (decode(Buffer.from(changed.frame, 'base64')) as { rows: unknown[][] }) : null;
          const rows = frame ? frame.rows : (changed.rows as unknown[][]);
          const row = rows[c.r.row % rows.length]!;
          row[c.r.column % row.length] = c.r.value;
          if (frame) {
            // A value no msgpack integer holds (1e308 is an integer to JavaScript) cannot be in a frame.
            let bytes: Uint8Array | null = null;
            try {
              bytes = encode(frame);
            } catch {
              /* left out below */
            }
            fc.pre(bytes !== null);
            changed.frame = Buffer.from(bytes!).toString('base64');
          }
        }
        fc.pre(typeof parseEntry(JSON.parse(JSON.stringify(changed))) !== 'string');
        const journal = entries.map((entry, k) => encodeLine(k === i ? changed : entry));
        const { engine } = await replayJournal(writeJournal(journal));
        const at = Math.max(...entries.map((entry) => entry.at)) + 250;
        for (const next of [stateOf(engine), (engine.apply({ t: 'tick', at }), stateOf(engine))]) {
          expect(() => JSON.stringify(next)).not.toThrow();
          expect(jsonProblem(next, 'state'), brief(changed)).toBeNull();
        }
        expect(engine.snapshot().at, `the tick after the replay did not publish (changed entry: ${brief(changed)})`).toBe(at);
      }),
      { seed: SEED, numRuns: 40 },
    );
  });
});
