import WebSocket from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { hello, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { listen } from './support/listening.js';

/**
 * Whether a viewer watches, told to the hooks (issue 24, target 5: a hook batches less often while no
 * one does): in `welcome`, then a `watch` frame each time the first viewer comes or the last one leaves.
 */
describe('hooks are told whether a viewer watches', () => {
  let side: InProcess | null = null;
  afterEach(async () => {
    await side?.app.close();
    side = null;
  });

  it('says so in welcome and in a watch frame on each change, to every welcomed hook', async () => {
    side = await inProcess({ now: Date.now });
    const { ingestUrl, streamUrl } = await listen(side);
    const hook = await TestHook.connect(ingestUrl);
    hook.send(hello());
    expect((await hook.next((m) => m.type === 'welcome')).watched).toBe(false);

    const viewer = await openViewer(streamUrl);
    expect(await hook.next((m) => m.type === 'watch')).toEqual({ v: 1, type: 'watch', watched: true });
    // A second viewer changes nothing the hook needs to hear; a hook that comes now is told in its welcome.
    const second = await openViewer(streamUrl);
    const late = await TestHook.connect(ingestUrl);
    late.send(hello({ session: 'sess-late', rank: 1, world_size: 2 }));
    expect((await late.next((m) => m.type === 'welcome')).watched).toBe(true);

    viewer.close();
    second.close();
    const unwatched = (m: { type: string; watched?: boolean }) => m.type === 'watch' && m.watched === false;
    await hook.next(unwatched);
    await late.next(unwatched);
    expect(hook.received.filter((m) => m.type === 'watch').map((m) => m.watched)).toEqual([true, false]);
    expect(late.received.filter((m) => m.type === 'watch').map((m) => m.watched)).toEqual([false]);
    hook.close();
    late.close();
  });
});

async function openViewer(url: string): Promise<WebSocket> {
  const socket = new WebSocket(url);
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  return socket;
}
