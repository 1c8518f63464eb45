import { describe, expect, it } from 'vitest';
import { RateLimiter } from '../src/ingest/limits.js';
import { hello, row, steps, TestHook } from './support/hook-client.js';
import { startSidecar } from './support/sidecar.js';

describe('limits that hold under abuse', () => {
  it('closes the connection past --max-connections with 1013, and the others keep working', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-connections', '2']);
    const [a, b] = await Promise.all([TestHook.connect(sidecar.ingestUrl), TestHook.connect(sidecar.ingestUrl)]);
    const extra = await TestHook.connect(sidecar.ingestUrl);
    expect(await extra.closed).toEqual({ code: 1013, reason: 'too many connections: this sidecar takes 2' });
    a!.send(hello({ session: 'a' }));
    a!.send(steps([row({ seq: 1 })]));
    expect((await a!.next((m) => m.type === 'ack')).ack).toBe(1);
    const state = await sidecar.state();
    expect(state.ingest.limited).toEqual({ connections: 1 });
    a!.close();
    b!.close();
    await sidecar.stop();
  });

  it('closes a connection that sends frames faster than --max-frame-rate', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-frame-rate', '20']);
    const hook = await TestHook.connect(sidecar.ingestUrl);
    hook.send(hello());
    for (let seq = 1; seq <= 100; seq++) hook.send(steps([row({ seq })]));
    expect(await hook.closed).toEqual({ code: 1008, reason: 'too many frames: at most 20 a second' });
    expect((await sidecar.state()).ingest.limited).toEqual({ 'frame-rate': 1 });
    await sidecar.stop();
  });

  it('refuses a job past --max-jobs and a rank past --max-ranks, keeping the jobs it has', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-jobs', '1', '--max-ranks', '2']);
    const first = await TestHook.connect(sidecar.ingestUrl);
    first.send(hello({ job: 'one', world_size: 8 }));
    await first.next((m) => m.type === 'welcome');
    const secondJob = await TestHook.connect(sidecar.ingestUrl);
    secondJob.send(hello({ job: 'two', session: 's2' }));
    expect(await secondJob.closed).toEqual({ code: 1008, reason: 'hello: too many jobs: this sidecar takes 1' });
    const rank1 = await TestHook.connect(sidecar.ingestUrl);
    rank1.send(hello({ job: 'one', rank: 1, world_size: 8, session: 'r1' }));
    await rank1.next((m) => m.type === 'welcome');
    const rank2 = await TestHook.connect(sidecar.ingestUrl);
    rank2.send(hello({ job: 'one', rank: 2, world_size: 8, session: 'r2' }));
    expect(await rank2.closed).toEqual({ code: 1008, reason: 'hello: too many ranks: a job may have 2' });
    const state = await sidecar.state();
    expect(state.jobs.map((j: { job: string; ranks: unknown[] }) => [j.job, j.ranks.length])).toEqual([['one', 2]]);
    expect(state.ingest.limited).toEqual({ jobs: 1, ranks: 1 });
    const metrics = await (await fetch(`${sidecar.http}/metrics`)).text();
    expect(metrics).toMatch(/stepscope_ingest_limited_connections_total\{limit="jobs"\} 1/);
    await sidecar.stop();
  });

  it('makes room for a new job by forgetting the job that ended first', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-jobs', '1']);
    const first = await TestHook.connect(sidecar.ingestUrl);
    first.send(hello({ job: 'one' }));
    first.send({ v: 1, type: 'end', reason: 'close' });
    await first.next((m) => m.type === 'ack' && m.end);
    await sidecar.waitForLog((line) => line.msg === 'job ended');
    first.close();
    await first.closed;
    const second = await TestHook.connect(sidecar.ingestUrl);
    second.send(hello({ job: 'two', session: 's2' }));
    await second.next((m) => m.type === 'welcome');
    expect((await sidecar.state()).jobs.map((j: { job: string }) => j.job)).toEqual(['two']);
    await sidecar.stop();
  });

  it('rate limiter: a burst, then the sustained rate', () => {
    const limiter = new RateLimiter(10, 5, 0);
    expect(Array.from({ length: 6 }, () => limiter.take(0))).toEqual([true, true, true, true, true, false]);
    expect(limiter.take(100)).toBe(true);
    expect(limiter.take(100)).toBe(false);
  });
});
