import { describe, expect, it } from 'vitest';
import { cleanupList } from './support/cleanup-list.js';
import { rows } from './support/entries.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { capturedLogger } from './support/logger.js';
import { waitFor } from './support/sidecar.js';

/**
 * No session without its secret: one recovered from a journal written before resume secrets has
 * none to ask for, so only its own process (same pid, same host) goes on with it, under a new
 * secret; a stranger who knows its id is refused, and the real rank loses nothing acknowledged.
 * And a refused hello never repeats a secret it was sent, in its close reason or in a log line.
 */

const cleanups = cleanupList();

async function sidecar() {
  const captured = capturedLogger();
  const side = await inProcess({ now: Date.now, log: captured.log });
  const address = await listen(side);
  cleanups.push(() => side.app.close());
  const connect = async () => {
    const hook = await TestHook.connect(address.ingestUrl);
    cleanups.push(() => hook.close());
    return hook;
  };
  return { side, connect, lines: captured.lines };
}

describe('a session journaled before resume secrets', () => {
  it('is refused to a stranger who knows only its id, and goes on for its own process under a new secret, with what it had', async () => {
    const { side, connect, lines } = await sidecar();
    const legacy = { type: 'hello' as const, job: 'job-a', rank: 0, local_rank: 0, world_size: 1, session: 'old-session', pid: 4242, host: 'node-7', clock: { wall_ms: Date.now(), mono_ns: 0 }, env: {} };
    // As a journal from before secrets replays it: a hello entry without one.
    await side.record({ t: 'hello', at: Date.now(), hello: legacy });
    await side.record({ t: 'steps', at: Date.now(), session: 'old-session', dropped: 0, rows: rows(1, 50, 0, { compute: 10 }) });

    const stranger = await connect();
    stranger.send(hello({ session: 'old-session', pid: 999, host: 'elsewhere', resume: null }));
    const refused = await stranger.closed;
    expect(refused.code).toBe(1008);
    expect(refused.reason).toMatch(/^hello: session old-session was journaled before resume secrets and is held by another/);
    expect(stranger.received.some((m) => m.type === 'welcome')).toBe(false);

    const real = await connect();
    real.send(hello({ session: 'old-session', pid: 4242, host: 'node-7', resume: null }));
    const welcome = await real.next((m) => m.type === 'welcome');
    expect(welcome.ack).toBe(50);
    expect(welcome.resume).toMatch(/^[0-9a-f]{32}$/);
    expect(lines.find((line) => line.msg.startsWith('session journaled before resume secrets'))).toMatchObject({ session: 'old-session', pid: 4242, host: 'node-7', ack: 50 });
    real.send(steps(range(51, 60).map((seq) => row({ seq }))));
    await real.next((m) => m.type === 'ack' && m.ack === 60);

    // From now on it is like any other session: its secret, and only its secret.
    const lateStranger = await connect();
    lateStranger.send(hello({ session: 'old-session', pid: 4242, host: 'node-7', resume: null }));
    expect((await lateStranger.closed).reason).toMatch(/already held/);
    const state = (await side.readState()).json() as { jobs: Array<{ steps: number }> };
    expect(state.jobs[0]!.steps).toBe(60);
  });
});

describe('a refused hello', () => {
  it('never repeats the secret it was sent, in its close reason or the log', async () => {
    const { connect, lines } = await sidecar();
    const nearMiss = 'c0ffee'.repeat(5) + 'g';
    const hook = await connect();
    hook.send(hello({ session: 'guess', resume: nearMiss }));
    const closed = await hook.closed;
    expect(closed.code).toBe(1007);
    expect(closed.reason).toMatch(/^hello\.resume: .*\(got \[redacted\]\)$/);
    // The log line may follow the close.
    const logged = await waitFor(() => JSON.stringify(lines).includes('[redacted]') && JSON.stringify(lines));
    expect(logged).not.toContain(nearMiss.slice(0, 12));
  });
});
