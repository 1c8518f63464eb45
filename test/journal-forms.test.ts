import { afterEach, describe, expect, it } from 'vitest';
import { Wal } from '../src/journal/wal.js';
import { readWal } from '../src/journal/wal-read.js';
import { readUsualSteps } from '../src/protocol/steps-bytes.js';
import { heldSyncs } from './support/held-syncs.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Which form the ingest journals a hook's steps in, through the real connection path and a real
 * journal: a whole usual frame of 8 records or more as its bytes, every other frame as rows.
 */

const tempDir = useTempDirs('stepscope-journal-forms-');
let side: InProcess | null = null;
afterEach(async () => {
  await side?.app.close();
  side = null;
});

describe('the journal of a live ingest', () => {
  it('keeps a whole frame of 8 or more records as its bytes; one held before welcome, a small one, one with duplicates, as rows', async () => {
    const dir = tempDir();
    const { fs, hold, release } = heldSyncs();
    const wal = await Wal.open({ dir, maxBytes: 1 << 30, flushDelayMs: 0, fs });
    side = await inProcess({ now: Date.now, wal });
    await side.app.listen({ host: '127.0.0.1', port: 0 });
    const address = side.app.server.address();
    const hook = await TestHook.connect(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`);
    const rows = (from: number, to: number) => steps(range(from, to).map((seq) => row({ seq })));

    hold();
    hook.send(hello());
    // Sent before the welcome, which waits on the hello's fdatasync: held, then journaled.
    hook.send(rows(1, 10));
    while (side.ingest.stats.frames < 2) await new Promise((resolve) => setTimeout(resolve, 5));
    release();
    await hook.next((m) => m.type === 'welcome');
    await hook.next((m) => m.type === 'ack' && m.ack === 10);
    hook.send(rows(11, 20));
    await hook.next((m) => m.type === 'ack' && m.ack === 20);
    hook.send(rows(21, 25));
    await hook.next((m) => m.type === 'ack' && m.ack === 25);
    // Two already held, eight new.
    hook.send(rows(24, 33));
    await hook.next((m) => m.type === 'ack' && m.ack === 33);
    hook.close();
    await side.recorder.close();

    const written: Array<{ form: string; seqs: number }> = [];
    for await (const item of readWal(dir, { onBad: () => undefined })) {
      const entry = item.kind === 'entry' ? (item.value as { t?: string; frame?: string; rows?: unknown[][]; duplicates?: number }) : null;
      if (entry?.t !== 'steps') continue;
      written.push(entry.frame !== undefined ? { form: 'frame', seqs: readUsualSteps(Buffer.from(entry.frame, 'base64'))!.records.length } : { form: 'rows', seqs: entry.rows!.length });
    }
    expect(written).toEqual([
      { form: 'rows', seqs: 10 },
      { form: 'frame', seqs: 10 },
      { form: 'rows', seqs: 5 },
      { form: 'rows', seqs: 8 },
    ]);
  });
});
