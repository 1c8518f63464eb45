import { afterEach, describe, expect, it } from 'vitest';
import { Wal } from '../src/journal/wal.js';
import { heldSyncs } from './support/held-syncs.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Acks are cumulative (docs/protocol.md): the frames one journal commit settles are acknowledged by
 * one ack, through the real connection path and a real journal. The frames are sent before the
 * welcome, which waits on the hello's held fdatasync, so that all of them are journaled in one commit.
 */

const tempDir = useTempDirs('stepscope-acks-');
let side: InProcess | null = null;
afterEach(async () => {
  await side?.app.close();
  side = null;
});

async function heldHook(): Promise<{ hook: TestHook; release: () => void; frames: (count: number) => Promise<void> }> {
  const { fs, hold, release } = heldSyncs();
  const wal = await Wal.open({ dir: tempDir(), maxBytes: 1 << 30, flushDelayMs: 0, fs });
  const sidecar = await inProcess({ now: Date.now, wal });
  side = sidecar;
  await sidecar.app.listen({ host: '127.0.0.1', port: 0 });
  const address = sidecar.app.server.address();
  const hook = await TestHook.connect(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`);
  hold();
  hook.send(hello());
  const frames = async (count: number) => {
    while (sidecar.ingest.stats.frames < count) await new Promise((resolve) => setTimeout(resolve, 5));
  };
  return { hook, release, frames };
}

const rows = (from: number, to: number) => steps(range(from, to).map((seq) => row({ seq })));

describe('acknowledgements', () => {
  it('gives the frames one commit settles one ack, for the highest seq', async () => {
    const { hook, release, frames } = await heldHook();
    hook.send(rows(1, 10));
    hook.send(rows(11, 20));
    hook.send(rows(21, 30));
    await frames(4);
    release();
    await hook.next((m) => m.type === 'ack' && m.ack === 30);
    // One ack a frame sent three here (each for the highest seq held by then: 30, 30, 30).
    expect(hook.received.filter((m) => m.type === 'ack')).toEqual([{ v: 1, type: 'ack', ack: 30 }]);
    hook.send(rows(31, 40));
    await hook.next((m) => m.type === 'ack' && m.ack === 40);
    expect(hook.received.filter((m) => m.type === 'ack').map((m) => m.ack)).toEqual([30, 40]);
  });

  it("answers an end settled with steps by the end's ack alone, which covers them", async () => {
    const { hook, release, frames } = await heldHook();
    hook.send(rows(1, 10));
    hook.send(rows(11, 20));
    hook.send({ v: 1, type: 'end', reason: 'exit' });
    await frames(4);
    release();
    await hook.next((m) => m.type === 'ack' && m.end === true);
    // Nothing owed is sent after it: whatever the sidecar sent comes before its answer to the close.
    hook.close();
    await hook.closed;
    expect(hook.received.filter((m) => m.type === 'ack')).toEqual([{ v: 1, type: 'ack', ack: 20, end: true }]);
  });
});
