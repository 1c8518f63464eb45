import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { open, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { IoLimiter, IoTimeoutError } from '../src/io/bounded-read.js';
import { nodeWalFs, type WalFs } from '../src/journal/wal-fs.js';
import { Wal } from '../src/journal/wal.js';
import { entryFileName, pastRunEntry, runRecord } from '../src/outputs/past-runs.js';
import { HISTORY_CACHE } from '../src/outputs/runs-store.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { ROOT } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * What requests and strange files can do to the sidecar's memory and to its file-system threads:
 * names asked of /v1/runs never grow memory past the history cache's bound; FIFOs (or a hung
 * volume) in the history folder never take the threads the journal needs, so a rank's acks keep
 * coming; a journal that stops acknowledging turns /readyz 503, whatever the cause.
 */

const tempDir = useTempDirs('stepscope-file-stalls-');
const cleanups = cleanupList();
const fixture = JSON.parse(readFileSync(path.join(ROOT, 'test/fixtures/summaries/a10-baseline.json'), 'utf8')) as Summary;

/** A history folder for `job` holding one valid entry. */
function keepRun(dir: string, job: string): void {
  const summary = { ...fixture, job };
  const record = runRecord(summary, 1, null, null);
  mkdirSync(path.join(dir, job), { recursive: true });
  writeFileSync(path.join(dir, job, entryFileName(record)), JSON.stringify(pastRunEntry(summary, record)));
}

/** Opens each FIFO for writing and closes it again: a reader blocked on it (never ours) gets end-of-file and lets its thread go. */
function release(fifos: string[]): void {
  for (const fifo of fifos) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // No reader on it: nothing was blocked.
    }
  }
}

describe('names asked of /v1/runs', () => {
  it('never enter the history cache: after 100,000 distinct names the cache holds exactly the known jobs its bound allows', async () => {
    const dir = tempDir();
    const known = Array.from({ length: HISTORY_CACHE.jobs + 20 }, (_, i) => `real-${i}`);
    for (const job of known) keepRun(dir, job);
    const side = await inProcess({ historyDir: dir });
    const runsOf = async (job: string) => {
      const response = await side.app.inject({ url: `/v1/runs?job=${encodeURIComponent(job)}` });
      expect(response.statusCode).toBe(200);
      return (response.json() as { runs: unknown[] }).runs.length;
    };
    // Every known job once, oldest first: the cache keeps the most recent it may hold.
    for (const job of known) expect(await runsOf(job)).toBe(1);
    // Checked in bulk (an expect per answer would cost more than the answers).
    const statuses = new Map<number, number>();
    for (let i = 0; i < 100_000; i += 100) {
      const answers = await Promise.all(range(i, i + 99).map((n) => side.app.inject({ url: `/v1/runs?job=no-such-job-${n}` })));
      for (const answer of answers) statuses.set(answer.statusCode, (statuses.get(answer.statusCode) ?? 0) + 1);
    }
    expect([...statuses]).toEqual([[200, 100_000]]);
    // With the files gone, a job still answered from memory is one the cache holds: the names asked
    // evicted none of them, and the jobs past the bound were let go (read again, they are empty now).
    for (const job of known) for (const file of readdirSync(path.join(dir, job))) rmSync(path.join(dir, job, file));
    const held = known.slice(known.length - HISTORY_CACHE.jobs);
    for (const job of held) expect(await runsOf(job)).toBe(1);
    for (const job of known.slice(0, known.length - HISTORY_CACHE.jobs)) expect(await runsOf(job)).toBe(0);
    await side.app.close();
  }, 120_000);
});

describe('FIFOs and reads that never return', () => {
  it("never delay a rank's acks: /v1/runs over FIFOs named like history entries answers, and the journal keeps acknowledging", async () => {
    const out = tempDir();
    const dir = path.join(out, 'history');
    const fifos: string[] = [];
    for (let j = 0; j < 8; j++) {
      keepRun(dir, `fifo-${j}`);
      const fifo = path.join(dir, `fifo-${j}`, '29990101T000000000Z-run9-0123456789ab.json');
      execFileSync('mkfifo', [fifo]);
      fifos.push(fifo);
    }
    cleanups.push(() => release(fifos));
    const wal = await Wal.open({ dir: path.join(out, 'journal'), maxBytes: 64 * 1024 * 1024 });
    const side = await inProcess({ wal, now: Date.now, historyDir: dir });
    const address = await listen(side);
    cleanups.push(() => side.app.close());

    const runs = Promise.all(range(0, 31).map((i) => side.app.inject({ url: `/v1/runs?job=fifo-${i % 8}` })));
    const hook = await TestHook.connect(address.ingestUrl);
    cleanups.push(() => hook.close());
    hook.send(hello({ job: 'bystander', session: 'bystander-0', clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: 1_000_000_000 } }));
    await hook.next((m) => m.type === 'welcome');
    for (let frame = 0; frame < 20; frame++) {
      hook.send(steps(range(frame * 5 + 1, frame * 5 + 5).map((seq) => row({ seq, durMs: 10 }))));
      await hook.next((m) => m.type === 'ack' && m.ack >= frame * 5 + 5);
    }
    for (const response of await runs) {
      expect(response.statusCode).toBe(200);
      expect(response.json()).toMatchObject({ runs: [expect.anything()], skipped: 1 });
    }
    expect(side.runs.store!.skippedOf('fifo-0')[0]!.reason).toMatch(/not a regular file/);
  });

  it('are given up on after the timeout, holding no more than their share of the threads, while other file-system calls go on', async () => {
    const fifo = path.join(tempDir(), 'never');
    execFileSync('mkfifo', [fifo]);
    cleanups.push(() => release([fifo]));
    const limiter = new IoLimiter({ concurrency: 2, timeoutMs: 200, maxWaiting: 2 });
    // A plain open of a FIFO blocks its thread until a writer comes: a read that never returns.
    const hung = range(1, 4).map(() => limiter.run('opening a FIFO', () => open(fifo, 'r')));
    await expect(limiter.run('one too many', () => open(fifo, 'r'))).rejects.toThrow(/too many file reads waiting/);
    for (const read of hung) await expect(read).rejects.toBeInstanceOf(IoTimeoutError);
    // The two that never returned keep their slots: a read that would return at once waits, and is given up on.
    await expect(limiter.run('a quick read', async () => 'read')).rejects.toBeInstanceOf(IoTimeoutError);
    // The pool's other threads are free: a write and its fdatasync, as the journal makes them, go through.
    const file = path.join(tempDir(), 'journal-like');
    await writeFile(file, 'x');
    const handle = await open(file, 'r+');
    await handle.datasync();
    await handle.close();
    release([fifo]);
    // Once they return, their slots are free again.
    const { waitFor } = await import('./support/sidecar.js');
    await waitFor(() => limiter.run('a quick read', async () => 'read').catch(() => null), 5_000);
  });
});

describe('a journal that stops acknowledging', () => {
  it('turns /readyz 503 with the reason while a write waits past its bound, and 200 again once it lands', async () => {
    let now = Date.parse('2026-12-01T12:00:00Z');
    let unblock: () => void = () => undefined;
    const blocked = new Promise<void>((resolve) => (unblock = resolve));
    let stall = false;
    const fs: WalFs = {
      ...nodeWalFs,
      async open(file, flags) {
        const handle = await nodeWalFs.open(file, flags);
        return { ...handle, write: handle.write.bind(handle), read: handle.read.bind(handle), truncate: handle.truncate.bind(handle), close: handle.close.bind(handle), datasync: async () => {
            if (stall) await blocked;
            await handle.datasync();
          },
        };
      },
    };
    const wal = await Wal.open({ dir: tempDir(), maxBytes: 1 << 26, fs, now: () => now, stallMs: 2_000 });
    const side = await inProcess({ wal, at: now });
    await listen(side);
    expect((await side.app.inject({ url: '/readyz' })).statusCode).toBe(200);
    stall = true;
    const written = side.record({ t: 'hello', at: now, hello: { type: 'hello', job: 'j', rank: 0, local_rank: 0, world_size: 1, session: 's', pid: 1, host: 'h', clock: { wall_ms: now, mono_ns: 0 }, env: {} }, secret: 'f'.repeat(32) });
    now += 1_000;
    expect((await side.app.inject({ url: '/readyz' })).statusCode).toBe(200);
    now += 1_500;
    const stalled = await side.app.inject({ url: '/readyz' });
    expect(stalled.statusCode).toBe(503);
    expect(stalled.json()).toEqual({ status: 'not ready', reason: 'journal stalled: a write has waited 2.5 s for the disk (or for a file-system thread)' });
    stall = false;
    unblock();
    await written;
    expect((await side.app.inject({ url: '/readyz' })).statusCode).toBe(200);
    await side.app.close();
  });
});
