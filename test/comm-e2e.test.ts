import { describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { decode, encode } from '../src/protocol/codec.js';
import { cleanupList } from './support/cleanup-list.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { startSidecar, waitFor } from './support/sidecar.js';
import { freePort } from './support/listening.js';

/**
 * Communication measured by the hook in real torch.distributed jobs (gloo on CPU, 2 and 4 processes,
 * forked from one Python so that torch is imported once): test/fixtures/comm_loop.py runs DDP (watched with stepscope.watch_ddp) and explicit collectives
 * (timed by the hook's wrappers of torch.distributed), with a rank made slow on purpose or an
 * all-reduce-heavy model. Each rank's `steps` rows are captured as they arrive, by a stand-in sidecar
 * that speaks the wire protocol (welcome, acks) and keeps the raw rows with their `comm_*` columns;
 * one scenario goes to the real sidecar, which must take the new columns.
 */

const torch = findPython(['torch', 'torch.distributed']);

const cleanups = cleanupList();

type Row = Record<string, number | null>;

/** A sidecar stand-in: welcomes every hello, acknowledges every frame, keeps every row by job and rank. */
async function captureSidecar() {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const rows = new Map<string, Row[]>(); // `${job}/${rank}` -> rows in seq order
  const refusals: string[] = [];
  server.on('connection', (socket: WebSocket) => {
    let key = '';
    const top = () => rows.get(key)?.at(-1)?.seq ?? 0; // what this job's rank holds, across reconnects
    socket.on('message', (data: Buffer) => {
      const message = decode(data) as any;
      const reply = (value: unknown) => socket.send(encode(value));
      if (message.type === 'hello') {
        key = `${message.job}/${message.rank}`;
        if (!rows.has(key)) rows.set(key, []);
        reply({ v: 1, type: 'welcome', session: message.session, ack: top(), resume: '0'.repeat(32), counters: { nvml: false, interval_ms: 500, process: false } });
      } else if (message.type === 'steps') {
        const held = rows.get(key)!;
        for (const values of message.rows as unknown[][]) {
          const row = Object.fromEntries((message.fields as string[]).map((field, i) => [field, values[i] as number | null]));
          if ((row.seq as number) > top()) held.push(row);
        }
        reply({ v: 1, type: 'ack', ack: top() });
      } else if (message.type === 'end') {
        reply({ v: 1, type: 'ack', ack: top(), end: true });
      } else if (message.type !== 'counters' && message.type !== 'env') {
        refusals.push(String(message.type));
      }
    });
  });
  const { port } = server.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}/v1/ingest`,
    rows: (job: string, rank: number) => rows.get(`${job}/${rank}`) ?? [],
    refusals,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}


/** Runs the scenarios on `worldSize` ranks of one gloo process group (forked from one Python process); returns each rank's result. */
async function runJob(worldSize: number, job: string, scenarios: string[], url: string) {
  const port = await freePort();
  const run = await runPython(
    torch.python!,
    fixture('comm_loop.py'),
    ['--port', String(port), '--world-size', String(worldSize), '--job', job, ...scenarios.flatMap((s) => ['--scenario', s])],
    { STEPSCOPE_URL: url },
    120_000,
  );
  expect(run.code, run.stderr).toBe(0);
  expect(run.result.ranks.map((r: any) => [r.rank, r.exitcode])).toEqual(Array.from({ length: worldSize }, (_, rank) => [rank, 0]));
  return run.result.ranks;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};
const ms = (ns: number) => ns / 1e6;

/** A rank's steady-state figures (its first two steps left out: DDP builds its buckets then), checked for consistency. */
function figures(rows: Row[], steps: number) {
  expect(rows.map((r) => r.step)).toEqual(Array.from({ length: steps }, (_, i) => i));
  for (const row of rows) {
    // Measured on every step (the process group existed before the scope began), and consistent.
    expect(row.comm_ns, JSON.stringify(row)).not.toBeNull();
    expect(row.comm_wait_ns).not.toBeNull();
    expect(row.comm_wait_ns!).toBeLessThanOrEqual(row.comm_ns!);
    expect(row.comm_ns!).toBeLessThanOrEqual(row.dur_ns!);
  }
  const steady = rows.slice(2);
  return {
    durMs: median(steady.map((r) => ms(r.dur_ns!))),
    commMs: median(steady.map((r) => ms(r.comm_ns!))),
    waitMs: median(steady.map((r) => ms(r.comm_wait_ns!))),
    waitShare: median(steady.map((r) => r.comm_wait_ns! / r.dur_ns!)),
    bytes: [...new Set(rows.map((r) => r.comm_bytes))],
  };
}

describe.skipIf(!torch.python)(`communication in real torch.distributed jobs (gloo)${torch.python ? '' : ` (skipped: ${torch.why})`}`, () => {
  it("2 ranks: DDP's fast rank waits in the all-reduce for a slow loader, the slow rank does not; an all-reduce-heavy model waits on both; the real sidecar takes the new columns", async () => {
    const capture = await captureSidecar();
    cleanups.push(() => capture.close());
    const sidecar = await startSidecar([]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const job = 'comm2';
    const results = await runJob(2, job, ['slow-data', 'heavy', `slow-compute@${sidecar.ingestUrl}`], capture.url);
    expect(capture.refusals).toEqual([]);
    for (const result of results) {
      for (const name of ['slow-data', 'heavy', 'slow-compute']) expect(result.scenarios[name], name).toMatchObject({ closed: true, watching: true });
    }

    // Rank 1 sleeps 40 ms a step in its loader: rank 0 spends that time waiting in the all-reduce.
    const slowData = [0, 1].map((rank) => figures(capture.rows(`${job}-slow-data`, rank), 30));
    const [fast, slow] = slowData;
    expect(fast!.waitMs - slow!.waitMs, JSON.stringify(slowData)).toBeGreaterThan(20);
    expect(fast!.waitShare).toBeGreaterThan(0.5);
    expect(slow!.waitShare).toBeLessThan(fast!.waitShare / 2);
    // Bytes: DDP all-reduces every parameter once a step: 2(n-1)/n of them = all of them on 2 ranks.
    const paramBytes = results[0].scenarios['slow-data'].param_bytes;
    for (const f of slowData) expect(f.bytes).toEqual([paramBytes]);

    // A model of 15 MB of parameters and next to no compute: most of every rank's step is the all-reduce.
    const heavy = [0, 1].map((rank) => figures(capture.rows(`${job}-heavy`, rank), 12));
    for (const f of heavy) {
      expect(f.waitShare, JSON.stringify(heavy)).toBeGreaterThan(0.4);
      expect(f.waitMs).toBeGreaterThan(0.8 * f.commMs);
      expect(f.bytes).toEqual([results[0].scenarios.heavy.param_bytes]);
    }

    // The real sidecar took the rows with their comm_* columns: every record acknowledged.
    const state = await waitFor(async () => {
      const s = await sidecar.state();
      const found = s.jobs.find((j: any) => j.job === `${job}-slow-compute`);
      return found && found.ranks.length === 2 && found.ranks.every((r: any) => r.steps === 24) ? found : null;
    }, 20_000);
    expect(state.ranks.map((r: any) => r.dropped)).toEqual([0, 0]);
  }, 150_000);

  it('4 ranks: the wrappers of torch.distributed time sync, async and barrier collectives; three ranks wait for the slow one', async () => {
    const capture = await captureSidecar();
    cleanups.push(() => capture.close());
    const job = 'comm4';
    const results = await runJob(4, job, ['collectives'], capture.url);
    expect(capture.refusals).toEqual([]);
    const all = [0, 1, 2, 3].map((rank) => figures(capture.rows(`${job}-collectives`, rank), 20));
    const slow = all[3]!;
    for (const fast of all.slice(0, 3)) {
      // Rank 3 sleeps 40 ms a step before its collectives; the others wait for it in theirs.
      expect(fast.waitMs - slow.waitMs, JSON.stringify(all)).toBeGreaterThan(20);
      expect(fast.waitShare).toBeGreaterThan(0.5);
      expect(slow.waitShare).toBeLessThan(fast.waitShare - 0.2);
    }
    // Bytes as nccl-tests counts them (n = 4): all_reduce 2(n-1)/n, all_gather (n-1)/n of the gathered size, broadcast 1x.
    const { all_reduce, all_gather, broadcast } = results[0].scenarios.collectives.payload;
    const expected =
      all_reduce.reduce((sum: number, b: number) => sum + Math.floor((b * 2 * 3) / 4), 0) +
      all_gather.reduce((sum: number, b: number) => sum + Math.floor((b * 3) / 4), 0) +
      broadcast.reduce((sum: number, b: number) => sum + b, 0);
    for (const f of all) expect(f.bytes).toEqual([expected]);
  }, 150_000);
});
