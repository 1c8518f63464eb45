import { describe, expect, it } from 'vitest';
import type { IngestLimits } from '../src/ingest/limits.js';
import { RateLimiter } from '../src/ingest/limits.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, row, steps, TestHook } from './support/hook-client.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { startSidecar } from './support/sidecar.js';

const cleanups = cleanupList();

/** The sidecar assembled in this process with these limits, listening for real websockets. */
async function sidecar(limits: Partial<IngestLimits>): Promise<InProcess & { ingestUrl: string; state(): Promise<any> }> {
  const side = await inProcess({ limits });
  const { ingestUrl } = await listen(side);
  cleanups.push(() => side.app.close());
  return { ...side, ingestUrl, state: async () => (await side.readState()).json() };
}

async function connect(url: string): Promise<TestHook> {
  const hook = await TestHook.connect(url);
  cleanups.push(() => hook.close());
  return hook;
}

describe('limits that hold under abuse', () => {
  it('closes the connection past the connection limit with 1013, and the others keep working', async () => {
    const side = await sidecar({ maxConnections: 2 });
    const [a, b] = await Promise.all([connect(side.ingestUrl), connect(side.ingestUrl)]);
    const extra = await connect(side.ingestUrl);
    expect(await extra.closed).toEqual({ code: 1013, reason: 'too many connections: this sidecar takes 2' });
    a!.send(hello({ session: 'a' }));
    a!.send(steps([row({ seq: 1 })]));
    expect((await a!.next((m) => m.type === 'ack')).ack).toBe(1);
    const state = await side.state();
    expect(state.ingest.limited).toEqual({ connections: 1 });
    expect(b!.socket.readyState).toBe(b!.socket.OPEN);
  });

  // The one test here on the real process: --max-frame-rate reaches the server (with the burst the CLI derives from it).
  it('closes a connection that sends frames faster than --max-frame-rate', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-frame-rate', '20']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const hook = await connect(sidecar.ingestUrl);
    hook.send(hello());
    for (let seq = 1; seq <= 100; seq++) hook.send(steps([row({ seq })]));
    expect(await hook.closed).toEqual({ code: 1008, reason: 'too many frames: at most 20 a second' });
    expect((await sidecar.state()).ingest.limited).toEqual({ 'frame-rate': 1 });
    expect(await sidecar.stop()).toEqual({ code: 0, signal: null });
  });

  it('refuses a job past the job limit and a rank past the rank limit, keeping the jobs it has', async () => {
    const side = await sidecar({ maxJobs: 1, maxRanksPerJob: 2 });
    const first = await connect(side.ingestUrl);
    first.send(hello({ job: 'one', world_size: 8 }));
    await first.next((m) => m.type === 'welcome');
    const secondJob = await connect(side.ingestUrl);
    secondJob.send(hello({ job: 'two', session: 's2' }));
    expect(await secondJob.closed).toEqual({ code: 1008, reason: 'hello: too many jobs: this sidecar takes 1' });
    const rank1 = await connect(side.ingestUrl);
    rank1.send(hello({ job: 'one', rank: 1, world_size: 8, session: 'r1' }));
    await rank1.next((m) => m.type === 'welcome');
    const rank2 = await connect(side.ingestUrl);
    rank2.send(hello({ job: 'one', rank: 2, world_size: 8, session: 'r2' }));
    expect(await rank2.closed).toEqual({ code: 1008, reason: 'hello: too many ranks: a job may have 2' });
    const state = await side.state();
    expect(state.jobs.map((j: { job: string; ranks: unknown[] }) => [j.job, j.ranks.length])).toEqual([['one', 2]]);
    expect(state.ingest.limited).toEqual({ jobs: 1, ranks: 1 });
    const metrics = (await side.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/stepscope_ingest_limited_connections_total\{limit="jobs"\} 1/);
  });

  it('makes room for a new job by forgetting the job that ended first', async () => {
    const side = await sidecar({ maxJobs: 1 });
    const first = await connect(side.ingestUrl);
    first.send(hello({ job: 'one' }));
    first.send({ v: 1, type: 'end', reason: 'close' });
    await first.next((m) => m.type === 'ack' && m.end);
    // The tick after the end, as the sidecar's timer would: the job ends.
    expect((await side.tick()).ended.map((run) => run.job)).toEqual(['one']);
    first.close();
    await first.closed;
    const second = await connect(side.ingestUrl);
    second.send(hello({ job: 'two', session: 's2' }));
    await second.next((m) => m.type === 'welcome');
    expect((await side.state()).jobs.map((j: { job: string }) => j.job)).toEqual(['two']);
  });

  it('rate limiter: a burst, then the sustained rate', () => {
    const limiter = new RateLimiter(10, 5, 0);
    expect(Array.from({ length: 6 }, () => limiter.take(0))).toEqual([true, true, true, true, true, false]);
    expect(limiter.take(100)).toBe(true);
    expect(limiter.take(100)).toBe(false);
  });
});
