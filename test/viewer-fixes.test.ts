import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { JournalEntry } from '../src/engine/entries.js';
import { RUNS_SCHEMA, type RunsResponse } from '../src/protocol/runs.js';
import { buildView } from '../src/viewer/model/job-view.js';
import { applyFrame, initialSource } from '../src/viewer/model/source.js';
import { WatchStore } from '../src/viewer/model/watch-store.js';
import { pollRuns, runsUrl } from '../src/viewer/runs-client.js';
import { track } from './support/children.js';
import { hello, run, T0 } from './support/entries.js';
import { CLI, waitFor } from './support/sidecar.js';
import { EngineStream } from './support/viewer-stream.js';

/**
 * Where a user saw the viewer break: the history empty when `watch` started before the first job
 * (and with no GPU), an ended job that kept changing and lost its verdict, `watch --plain | head`
 * crashing with EPIPE; and the run history it now shows.
 */

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const ticks = (fromMs: number, toMs: number): JournalEntry[] => Array.from({ length: Math.floor((toMs - fromMs) / 250) }, (_, i) => ({ t: 'tick', at: T0 + fromMs + (i + 1) * 250 }));

describe('the viewer, where it broke', () => {
  it('keeps the history from the first step when it started before the first job, with no GPU', () => {
    const stream = new EngineStream();
    // The viewer connects at 1 s: no job, no GPU, nothing in the history yet.
    let source = applyFrame(initialSource('ws://a/v1/stream'), stream.frame('snapshot', T0 + 1_000), T0 + 1_000);
    stream.apply([hello('s0', {}, 2_000), { t: 'connect', at: T0 + 2_000, session: 's0' }]);
    source = stream.follow(source, run('s0', 2_000, 10, { data: 1, compute: 9 }).entries.filter((e) => e.at > T0 + 1_000));
    const history = buildView([source], null, T0 + 12_000).job!.history!;
    // Every second from the job's start is there, not just the last one.
    expect(history.slices).toBe(10);
    expect(history.stepMs[0]!.values.filter((v) => v !== null).length).toBeGreaterThanOrEqual(9);
    expect(history.stepMs[0]!.values[5]).toBeCloseTo(10, 5);
  });

  it('shows an ended job as it ended: its last verdict, its ranks, its history stopped at its last step', () => {
    const stream = new EngineStream();
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }]);
    let source = applyFrame(initialSource('ws://a/v1/stream'), stream.frame('snapshot', T0 + 250), T0 + 250);
    source = stream.follow(source, run('s0', 0, 12, { data: 9, compute: 3 }).entries.filter((e) => e.at > T0 + 250));
    const running = buildView([source], null, T0 + 12_000).job!;
    expect(running.banner).toMatchObject({ verdict: 'input-bound' });
    stream.apply([{ t: 'end', at: T0 + 12_100, session: 's0', reason: 'done' }]);
    source = stream.follow(source, ticks(12_000, 20_000));
    expect(source.state!.jobs[0]!.ended).toBe(true);
    const ended = buildView([source], null, T0 + 20_000).job!;
    expect(ended.ended).toBe(true);
    expect(ended.banner).toMatchObject({ verdict: 'input-bound', pending: null });
    expect(ended.ranks[0]).toMatchObject({ verdict: 'input-bound', state: 'ended' });
    expect(ended.ranks[0]!.p50).toBeCloseTo(running.ranks[0]!.p50!, 5);
    // Later frames change nothing of it.
    source = stream.follow(source, ticks(20_000, 40_000));
    const later = buildView([source], null, T0 + 40_000).job!;
    expect(later.history!.slices).toBe(ended.history!.slices);
    expect(later.history!.stepMs[0]!.values).toEqual(ended.history!.stepMs[0]!.values);
    expect(later.banner!.heldS).toBe(ended.banner!.heldS);
  });

  it("stops an ended job's clock at its last step, for a viewer that came after", () => {
    const stream = new EngineStream();
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...run('s0', 0, 8, { data: 9, compute: 3 }).entries, { t: 'end', at: T0 + 8_100, session: 's0', reason: 'done' }]);
    const source = applyFrame(initialSource('ws://a/v1/stream'), stream.frame('snapshot', T0 + 60_000), T0 + 60_000);
    const job = buildView([source], null, T0 + 60_000).job!;
    expect(job.finalVerdict).toMatchObject({ verdict: 'input-bound' });
    // Held until the job's last step, not until now.
    expect(job.banner!.heldS).toBeLessThan(8);
    expect(job.history!.slices).toBe(8);
  });

  it('asks the sidecar for the job’s earlier runs and shows them with the job', async () => {
    const response: RunsResponse = {
      schema: RUNS_SCHEMA,
      job: 'train',
      threshold_pct: 10,
      runs: [
        { job: 'train', run: 1, started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 60_000).toISOString(), fingerprint: 'abcdefabcdef', gpu_name: 'NVIDIA A10', world_size: 1, steps: 6000, duration_s: 60, samples_per_s: 3200, ms_per_sample: 0.3125, step_ms_mean: 10, verdict: 'compute-bound', cause: null, change_pct: null, regression: false },
      ],
      reference: { kind: 'history', label: 'the previous run (2026-12-01)', runs: 1, ms_per_sample: 0.3125 },
      skipped: 0,
    };
    const asked: string[] = [];
    const server = createServer((request, reply) => {
      asked.push(request.url ?? '');
      reply.setHeader('content-type', 'application/json');
      reply.end(JSON.stringify(response));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/stream`;
    expect(runsUrl(url, 'a b/c')).toBe(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/runs?job=a+b%2Fc`);

    const stream = new EngineStream();
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...run('s0', 0, 3, { compute: 10 }).entries]);
    const store = new WatchStore([url]);
    const stop = pollRuns(store, [url], { everyMs: 60_000 });
    cleanups.push(stop);
    store.frame(0, stream.frame('snapshot', T0 + 3_000), T0 + 3_000);
    const runs = await waitFor(() => store.view(T0 + 3_000).runs, 5_000);
    expect(runs.runs[0]).toMatchObject({ run: 1, samples_per_s: 3200, verdict: 'compute-bound' });
    expect(asked).toEqual(['/v1/runs?job=train']);
  });

  it('`watch --plain | head` ends quietly when head has its lines', async () => {
    // Port 9 (discard) refuses: a line per failed attempt, without any sidecar.
    const child = track(spawn(process.execPath, [CLI, 'watch', '--plain', 'ws://127.0.0.1:9'], { stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
    cleanups.push(() => void child.kill('SIGKILL'));
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // As head does: read a line, then close the pipe.
    await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
    child.stdout!.destroy();
    expect(await exited).toBe(0);
    expect(stderr).toBe('');
  });
});
