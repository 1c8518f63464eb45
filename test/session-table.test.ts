import { describe, expect, it } from 'vitest';
import type { Hello, StepRecord } from '../src/protocol/messages.js';
import { LimitError } from '../src/store/admission.js';
import { RankHistory } from '../src/store/rank-history.js';
import { SessionTable, type TableOptions } from '../src/store/session-table.js';

/** A session table and its ranks' history, as the engine's world holds them. */
function tableOf(options: TableOptions = {}) {
  const store = new SessionTable(options);
  return { store, history: new RankHistory(store) };
}

const hello = (overrides: Partial<Hello> = {}): Hello => ({
  type: 'hello',
  job: 'j',
  rank: 0,
  local_rank: 0,
  world_size: 1,
  session: 's0',
  pid: 1,
  host: 'h',
  clock: { wall_ms: 1_000, mono_ns: 0 },
  env: {},
  ...overrides,
});

const record = (seq: number, ms: { dur?: number; data?: number; h2d?: number; compute?: number; gpuIdle?: number } = {}): StepRecord => ({
  seq,
  step: seq - 1,
  endNs: seq * 1e7,
  durNs: (ms.dur ?? 10) * 1e6,
  dataNs: (ms.data ?? 0) * 1e6,
  h2dNs: (ms.h2d ?? 0) * 1e6,
  computeNs: (ms.compute ?? 10) * 1e6,
  samples: null,
  gpuH2dNs: null,
  gpuComputeNs: ms.gpuIdle === undefined ? null : 5e6,
  gpuIdleNs: ms.gpuIdle === undefined ? null : ms.gpuIdle * 1e6, commNs: null, commWaitNs: null, commBytes: null, evalNs: null,
});

describe('the session table and the ranks\' history', () => {
  it('counts every record once across resends, per session', () => {
    const { store, history } = tableOf();
    store.hello(hello(), 0);
    expect(history.steps('s0', [record(1), record(2), record(3)], 0, 1).ack).toBe(3);
    const resend = history.steps('s0', [record(2), record(3), record(4)], 0, 2);
    expect(resend.accepted.map((r) => r.seq)).toEqual([4]);
    expect(resend.duplicates).toBe(2);
    expect(store.hello(hello(), 3)).toEqual({ ack: 4, resumed: true });
    const [job] = store.snapshot(4);
    expect(job!.steps).toBe(4);
    expect(job!.duplicates).toBe(2);
  });

  it('a restarted process (new session) of the same rank adds to the rank', () => {
    const { store, history } = tableOf();
    store.hello(hello(), 0);
    history.steps('s0', [record(1), record(2)], 0, 1);
    expect(store.hello(hello({ session: 's1' }), 2)).toEqual({ ack: 0, resumed: false });
    history.steps('s1', [record(1)], 0, 3);
    const rank = store.snapshot(4)[0]!.ranks[0]!;
    expect(rank.steps).toBe(3);
    expect(rank.sessions).toBe(2);
  });

  it('keeps a bounded number of sessions per rank, folding the forgotten ones into its counts', () => {
    const { store, history } = tableOf({ sessionsPerRank: 3 });
    for (let i = 0; i < 10; i++) {
      store.hello(hello({ session: `restart-${i}` }), i);
      history.steps(`restart-${i}`, [record(1), record(2)], i, i);
      history.steps(`restart-${i}`, [record(2)], i, i);
    }
    const rank = store.snapshot(20)[0]!.ranks[0]!;
    expect(rank.sessions).toBe(10);
    expect(rank.steps).toBe(20);
    expect(rank.duplicates).toBe(10);
    expect(rank.dropped).toBe(45);
    expect(history.views()).toHaveLength(1);
  });

  it('splits step time into data, h2d, compute and the rest', () => {
    const { store, history } = tableOf();
    store.hello(hello(), 0);
    history.steps('s0', [record(1, { dur: 20, data: 5, h2d: 2, compute: 10 }), record(2, { dur: 20, data: 5, h2d: 2, compute: 10 })], 0, 1);
    const rank = store.snapshot(2)[0]!.ranks[0]!;
    expect(rank.phase_s).toEqual({ data: 0.01, h2d: 0.004, compute: 0.02, other: 0.006 });
    expect(rank.breakdown.data).toBeCloseTo(0.25);
    expect(rank.breakdown.other).toBeCloseTo(0.15);
  });

  it('keeps GPU-side phases and idle gaps apart from wall-clock phases', () => {
    const { store, history } = tableOf();
    store.hello(hello(), 0);
    history.steps('s0', [record(1), record(2, { gpuIdle: 3 }), record(3, { gpuIdle: 1 })], 0, 1);
    const gpu = store.snapshot(2)[0]!.ranks[0]!.gpu_phase_s;
    expect(gpu).toEqual({ timed_steps: 2, h2d: 0, compute: 0.01, idle_steps: 2, idle: 0.004 });
  });

  it('keeps the highest dropped count a session reported', () => {
    const { store, history } = tableOf();
    store.hello(hello(), 0);
    history.steps('s0', [record(1)], 7, 1);
    history.steps('s0', [record(2)], 5, 2);
    expect(store.snapshot(3)[0]!.dropped).toBe(7);
  });

  it('ends a job when every rank has said end, and not before every rank was seen', () => {
    const { store } = tableOf();
    store.hello(hello({ world_size: 2 }), 0);
    store.connected('s0');
    store.end('s0');
    expect(store.settle(10, 10_000)).toEqual([]);
    store.hello(hello({ world_size: 2, rank: 1, session: 's1' }), 11);
    store.connected('s1');
    store.end('s1');
    expect(store.settle(12, 10_000)).toEqual(['j']);
    expect(store.snapshot(13)[0]!.end_reason).toBe('all-ranks-ended');
  });

  it('ends a job whose connections have been gone for the grace period', () => {
    const { store } = tableOf();
    store.hello(hello(), 0);
    store.connected('s0');
    store.disconnected('s0', 1_000);
    expect(store.settle(1_500, 1_000)).toEqual([]);
    expect(store.settle(2_000, 1_000)).toEqual(['j']);
    expect(store.snapshot(2_000).map((job) => [job.job, job.ended, job.end_reason])).toEqual([['j', true, 'disconnected']]);
  });

  it('gives reconnecting hooks a fresh grace period after a restart', () => {
    const { store } = tableOf();
    store.hello(hello(), 0);
    store.restarted(60_000);
    expect(store.settle(60_500, 1_000)).toEqual([]);
  });

  it('reopens an ended job when one of its ranks comes back', () => {
    const { store } = tableOf();
    store.hello(hello(), 0);
    store.end('s0');
    store.settle(1, 1_000);
    store.hello(hello(), 2);
    expect(store.snapshot(3)[0]!.ended).toBe(false);
  });

  it('reports step time percentiles over recent steps', () => {
    const { store, history } = tableOf({ recentSteps: 100 });
    store.hello(hello(), 0);
    history.steps('s0', Array.from({ length: 200 }, (_, i) => record(i + 1, { dur: i + 1, compute: 0 })), 0, 1);
    const stepMs = store.snapshot(2)[0]!.ranks[0]!.step_ms;
    expect(stepMs).toEqual({ last: 200, mean: 150.5, p50: 150, p90: 190 });
  });

  it('refuses a hello live exactly when applying it would pass the limits: one rule for both', () => {
    const { store, history } = tableOf({ limits: { maxJobs: 1, maxRanksPerJob: 2 } });
    /** What `refusal` says of the hello, then what applying it did: the two must agree. */
    const both = (h: Hello, at: number) => {
      const asked = store.refusal(h)?.limit ?? null;
      let applied: string | null = null;
      try {
        store.hello(h, at);
      } catch (error) {
        if (!(error instanceof LimitError)) throw error;
        applied = error.limit;
      }
      return [asked, applied];
    };
    expect(both(hello({ session: 'a0' }), 0)).toEqual([null, null]);
    expect(both(hello({ session: 'a1', rank: 1 }), 1)).toEqual([null, null]);
    expect(both(hello({ session: 'a2', rank: 2 }), 2), 'a third rank').toEqual(['ranks', 'ranks']);
    store.connected('a0');
    history.steps('a0', [record(1)], 0, 3);
    // Job j steps and has a connection: it cannot make room.
    expect(both(hello({ job: 'k', session: 'k0' }), 4), 'a second job').toEqual(['jobs', 'jobs']);
    store.disconnected('a0', 5);
    store.settle(20_000, 1_000);
    // Ended, with nobody connected: a new job takes its place.
    expect(both(hello({ job: 'k', session: 'k0' }), 20_001)).toEqual([null, null]);
    expect(both(hello({ job: 'k', session: 'k1', rank: 1 }), 20_002)).toEqual([null, null]);
    expect(store.snapshot(20_003).map((job) => [job.job, job.ranks.length])).toEqual([['k', 2]]);
    store.settle(40_000, 1_000);
    // A new run of the ended job k starts with no ranks: a rank its full old run did not have is not past the limit.
    expect(both(hello({ job: 'k', session: 'k2', rank: 2 }), 40_001)).toEqual([null, null]);
    expect(store.snapshot(40_002).map((job) => [job.job, job.run, job.ranks.length])).toEqual([['k', 2, 1]]);
    expect(both(hello({ job: 'k', session: 'k3', rank: 0 }), 40_003)).toEqual([null, null]);
    expect(both(hello({ job: 'k', session: 'k4', rank: 3 }), 40_004)).toEqual(['ranks', 'ranks']);
  });
});
