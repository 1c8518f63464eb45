import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { JOURNAL_FILE, Journal } from '../src/store/journal.js';
import { tempDir } from './support/sidecar.js';

describe('Journal', () => {
  it('replays what was appended, in order', async () => {
    const dir = tempDir();
    const { journal } = await Journal.open(dir);
    await Promise.all([
      journal.append({ t: 'end', at: 1, session: 'a', reason: 'close' }),
      journal.append({ t: 'steps', at: 2, session: 'a', dropped: 0, rows: [[1, 0, 5, 5, 1, 1, 1, null, null, null, null]] }),
    ]);
    await journal.close();
    const { replay, journal: again } = await Journal.open(dir);
    expect(replay.entries.map((e) => e.t)).toEqual(['end', 'steps']);
    expect(replay.corrupt).toBe(0);
    await again.close();
  });

  it('cuts off a torn last line so that new entries start on a line of their own', async () => {
    const dir = tempDir();
    const file = path.join(dir, JOURNAL_FILE);
    writeFileSync(file, JSON.stringify({ t: 'end', at: 1, session: 'a', reason: 'close' }) + '\n');
    appendFileSync(file, '{"t":"steps","at":2,"sess');
    const { journal, replay } = await Journal.open(dir);
    expect(replay.entries).toHaveLength(1);
    expect(replay.truncatedBytes).toBe(25);
    await journal.append({ t: 'end', at: 3, session: 'b', reason: 'close' });
    await journal.close();
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    expect(lines.map((line) => JSON.parse(line).session)).toEqual(['a', 'b']);
  });

  it('resolves append only after the bytes are in the file', async () => {
    const dir = tempDir();
    const { journal } = await Journal.open(dir);
    await journal.append({ t: 'end', at: 1, session: 'a', reason: 'close' });
    expect(readFileSync(path.join(dir, JOURNAL_FILE), 'utf8')).toContain('"session":"a"');
    await journal.close();
  });
});
