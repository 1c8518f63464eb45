import { afterEach, describe, expect, it } from 'vitest';
import { Flow } from '../src/ingest/flow.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';

/** A connection's socket as flow.ts sees it: told to stop reading, or to go on. */
function socket() {
  const said: string[] = [];
  return { said, valve: { pause: () => said.push('pause'), resume: () => said.push('resume') } };
}

describe('flow: bytes received and not settled are bounded', () => {
  it('pauses a connection past its own bound and resumes it once its frames settle', () => {
    const flow = new Flow({ heldBytesPerConnection: 100, heldBytes: 1000 });
    const a = socket();
    const connection = flow.open(a.valve);
    const first = connection.take(60);
    expect(a.said).toEqual([]);
    const second = connection.take(60);
    expect(a.said).toEqual(['pause']);
    // A frame already read before the pause took effect does not pause it twice.
    const third = connection.take(10);
    expect(a.said).toEqual(['pause']);
    first();
    expect(a.said).toEqual(['pause', 'resume']);
    second();
    third();
    third();
    expect(a.said).toEqual(['pause', 'resume']);
  });

  it('pauses every sender past the total and resumes all of them at once under it', () => {
    const flow = new Flow({ heldBytesPerConnection: 100, heldBytes: 150 });
    const a = socket();
    const b = socket();
    const settleA = flow.open(a.valve).take(80);
    const settleB = flow.open(b.valve).take(80);
    expect(a.said).toEqual([]);
    expect(b.said).toEqual(['pause']);
    settleA();
    expect(b.said).toEqual(['pause', 'resume']);
    settleB();
  });

  it('forgets a closed connection: it is never resumed', () => {
    const flow = new Flow({ heldBytesPerConnection: 10, heldBytes: 1000 });
    const a = socket();
    const connection = flow.open(a.valve);
    const settle = connection.take(20);
    connection.close();
    settle();
    expect(a.said).toEqual(['pause']);
  });
});

describe('backpressure over a real websocket', () => {
  let side: InProcess;
  afterEach(async () => {
    await side.app.close();
  });

  it('acknowledges every record while each frame pauses the socket (bounds of one byte)', async () => {
    side = await inProcess({ now: Date.now, limits: { heldBytesPerConnection: 1, heldBytes: 1 } });
    await side.app.listen({ host: '127.0.0.1', port: 0 });
    const address = side.app.server.address();
    const hook = await TestHook.connect(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
    for (let frame = 0; frame < 50; frame++) hook.send(steps(range(frame * 100 + 1, frame * 100 + 100).map((seq) => row({ seq }))));
    await hook.next((m) => m.type === 'ack' && m.ack === 5000);
    const state = (await side.readState()).json();
    expect(state.jobs[0].ranks[0].steps).toBe(5000);
    hook.close();
  });
});

describe('the seq bound', () => {
  let side: InProcess;
  afterEach(async () => {
    await side.app.close();
  });

  it("takes a gap that an earlier frame's dropped count already covered", async () => {
    side = await inProcess({ now: Date.now });
    await side.app.listen({ host: '127.0.0.1', port: 0 });
    const address = side.app.server.address();
    const hook = await TestHook.connect(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/v1/ingest`);
    hook.send(hello());
    await hook.next((m) => m.type === 'welcome');
    // The hook dropped 5 records (seqs 11-15) before it sent the frame before them: both frames say so.
    hook.send(steps(range(1, 10).map((seq) => row({ seq })), 5));
    await hook.next((m) => m.type === 'ack' && m.ack === 10);
    hook.send(steps(range(16, 20).map((seq) => row({ seq })), 5));
    await hook.next((m) => m.type === 'ack' && m.ack === 20);
    // The count is used up: a gap it does not cover is refused.
    hook.send(steps(range(30, 31).map((seq) => row({ seq })), 5));
    expect((await hook.closed).reason).toMatch(/seq 31 is beyond what this session can have sent \(20 held, 2 new, 0 dropped and not yet seen\)/);
  });
});
