import { describe, expect, it } from 'vitest';
import { rankStall, STALL, stallThresholdMs, type StallInput } from '../src/analysis/stall.js';
import { Engine } from '../src/engine/engine.js';
import { jobStop, rankList, type RankStop } from '../src/model/stall.js';
import type { Capture, CodeFrame } from '../src/protocol/capture.js';
import type { RankLiveness } from '../src/store/rank-history.js';
import { hello, rows, T0 } from './support/entries.js';
import { BACKWARD, capture, frame, HANG_CONFIG, hangScript, STUCK_AT, WAIT } from './support/hang-script.js';

/**
 * A job that stops (issue 29): each rank stalled, unresponsive, gone or idle by design, and the job
 * hung on the rank behind, from pure inputs; then a scripted two-rank job on the engine's simulated
 * clock, from its journal entries, to its summary.
 */

const config = { steps: 3, floorMs: 10_000 };
const LOADER = frame('__next__', '/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py', 630, 'lib');
const ALL_REDUCE = frame('all_reduce', '/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py', 2050, 'lib');

function live(more: Partial<RankLiveness> = {}): RankLiveness {
  return {
    connected: true,
    ended: false,
    pid: 42,
    host: 'node-a',
    heardAt: 0,
    heartbeatMs: 1000,
    captures: true,
    procStart: 1234,
    disconnectedAt: null,
    disconnectReason: null,
    lastStep: 149,
    capture: null,
    proc: null,
    ...more,
  };
}

/** Rank `rank` whose last step ended at 0, with 100 ms steps, judged at `at`. */
const input = (liveness: Partial<RankLiveness>, rank = 0, stepP50Ms = 100, worldSize = 2): StallInput => ({ rank, liveness: live(liveness), lastStepEndAt: 0, stepP50Ms, worldSize });

describe('a rank that stops stepping', () => {
  it('is stalled after k of its median steps, never before the floor: slow steps stretch it', () => {
    expect(stallThresholdMs(100, config)).toBe(10_000);
    expect(stallThresholdMs(1_000, config)).toBe(10_000);
    expect(stallThresholdMs(10_000, config)).toBe(30_000);
    const at = (ms: number, p50 = 100) => rankStall(input({ heardAt: ms, capture: capture(1, [frame('stuck')]) }, 0, p50), ms, config).stop.state;
    expect(at(500)).toBe('stepping');
    expect(at(5_000)).toBe('waiting');
    expect(at(10_000)).toBe('stalled');
    // A 10 s step is not a stall: 20 s without one is only waiting, 30 s is stalled.
    expect(at(20_000, 10_000)).toBe('waiting');
    expect(at(30_000, 10_000)).toBe('stalled');
  });

  it('is named where its stack stopped: the function of its own code, unmoved', () => {
    const stall = rankStall(input({ heardAt: 11_900, capture: capture(10_100, [WAIT, frame('wait_for_it', '/job/train.py', 48), frame('main', '/job/train.py', 87)]) }), 12_000, config);
    expect(stall.stop).toMatchObject({ state: 'stalled', cause: 'code', inCollective: null, progressing: false });
    expect(stall.judgement).toMatchObject({ verdict: 'stalled', cause: 'code', since: 0 });
    expect(stall.judgement!.evidence.rule).toMatch(/^no step for 12\.0 s \(stalled after 10\.0 s: 3 of its 100 ms median steps, at least 10\.0 s\), after step 149; alive: heard from 0\.1 s ago; stopped in wait_for_it \(train\.py:48\) at wait \(threading\.py:320\), unmoved for 30\.0 s$/);
    expect(stall.where.map((f) => f.function)).toEqual(['wait_for_it', 'main']);
    expect(stall.judgement!.recommendations.map((r) => r.id)).toEqual(['unstick-code', 'py-spy', 'collective-timeout']);
  });

  it('waits in a collective, as the hook, the Flight Recorder or the stack says', () => {
    const judged = (more: Partial<Capture>, frames = [frame('train')]) => rankStall(input({ heardAt: 11_000, capture: capture(10_100, frames, more) }), 12_000, config).stop;
    expect(judged({ comm: { entered: 2, completed: 1, waiting: { op: 'all_reduce', index: 2, for_ms: 1500 } } })).toMatchObject({
      cause: 'collective',
      inCollective: 'all_reduce (collective 2 of its step, entered 1.5 s before)',
      collectives: { count: 2, source: 'hook' },
    });
    const flight = { backend: 'gloo', error: null, groups: [{ id: '0', name: 'default_pg', ranks: '[0, 1]', enqueued: 46, started: -1, completed: 45, pending: [{ seq: 46, op: 'gloo:all_reduce', state: 'scheduled' }] }] };
    expect(judged({ flight })).toMatchObject({ cause: 'collective', inCollective: 'gloo:all_reduce (collective #46 of default_pg)', collectives: { count: 46, source: 'flight-recorder' } });
    expect(judged({}, [ALL_REDUCE, frame('train')])).toMatchObject({ cause: 'collective', inCollective: 'all_reduce (torch.distributed)' });
    expect(judged({}, [BACKWARD, frame('train')])).toMatchObject({ cause: 'collective', inCollective: "backward() (DDP's gradient all-reduce, most likely)" });
    // One rank alone has no all-reduce to wait for in its backward pass.
    expect(rankStall(input({ heardAt: 11_000, capture: capture(10_100, [BACKWARD, frame('train')]) }, 0, 100, 1), 12_000, config).stop.cause).toBe('code');
  });

  it('waits for its DataLoader: slow while a worker runs, stuck while none does', () => {
    const workers = (state: string) => [{ pid: 7, name: 'pt_data_worker', state, wchan: state === 'S' ? 'futex_wait_queue' : null, cpu_s: 0.1, frames: null, stack_error: null }];
    const sleeping = rankStall(input({ heardAt: 11_000, capture: capture(10_100, [LOADER, frame('train')], { workers: workers('S') }) }), 12_000, config);
    expect(sleeping.stop).toMatchObject({ cause: 'data-loader', progressing: false });
    expect(sleeping.judgement!.evidence.rule).toContain('waits for its DataLoader in train (train.py:10); its workers: pid 7 S (futex_wait_queue) 0.1 CPU-s');
    const running = rankStall(input({ heardAt: 11_000, capture: capture(10_100, [LOADER, frame('train')], { workers: workers('R') }) }), 12_000, config);
    expect(running.stop).toMatchObject({ cause: 'data-loader', progressing: true });
    // The worker's own stack, where it gave one: the Dataset's code that never returns comes first.
    const inDataset = [{ ...workers('S')[0]!, frames: [WAIT, frame('__getitem__', '/job/data.py', 31), frame('fetch', '/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py', 52, 'lib')] }, { ...workers('S')[0]!, pid: 8 }];
    const stuck = rankStall(input({ heardAt: 11_000, capture: capture(10_100, [LOADER, frame('train')], { workers: inDataset }) }), 12_000, config);
    expect(stuck.where.map((f) => f.function)).toEqual(['__getitem__', 'train']);
    expect(stuck.judgement!.evidence.rule).toContain('waits for its DataLoader in train (train.py:10); its worker pid 7 (S, futex_wait_queue) is in __getitem__ (data.py:31); its other workers: pid 8 S (futex_wait_queue) 0.1 CPU-s');
  });

  it('is busy where its stack moved lately (an evaluation), and idle by design where none of its code runs', () => {
    const busy = rankStall(input({ heardAt: 11_000, capture: capture(10_100, [frame('evaluate')], { still_ms: 300 }) }), 12_000, config);
    expect(busy.stop).toMatchObject({ state: 'stalled', cause: 'busy', progressing: true });
    const done = rankStall(input({ heardAt: 11_000, capture: capture(10_100, [frame('_shutdown', '/usr/lib/python3.11/threading.py', 1583, 'lib')]) }), 12_000, config);
    expect(done.stop.state).toBe('ended');
    expect(done.judgement).toMatchObject({ verdict: 'idle', cause: null });
    expect(done.judgement!.evidence.rule).toContain("none of the script's code is running (the training thread is in _shutdown (threading.py:1583))");
  });

  it('waits a little for its stack, and an older hook that takes none is stalled without one', () => {
    const asked = rankStall(input({ heardAt: 11_000 }), 12_000, config);
    expect(asked.stop).toMatchObject({ state: 'stalled', capturePending: true, cause: null });
    expect(rankStall(input({ heardAt: 10_000 + STALL.captureWaitMs + 500 }), 10_000 + STALL.captureWaitMs + 600, config).stop.capturePending).toBe(false);
    const older = rankStall(input({ heardAt: 11_000, captures: false, heartbeatMs: null }), 12_000, config);
    expect(older.stop).toMatchObject({ state: 'stalled', capturePending: false, cause: null });
    expect(older.judgement!.evidence.rule).toContain('its hook does not capture stacks (an older hook)');
    // A capture from before the last step is not where the rank is now.
    expect(rankStall({ ...input({ heardAt: 11_000, capture: capture(-5, [frame('old')]) }) }, 12_000, config).capture).toBeNull();
  });

  it('is unresponsive when heartbeats stop while its connection stays open, and says what /proc shows', () => {
    const silent = rankStall(input({ heardAt: 4_000 }), 12_000, config);
    expect(silent.unresponsive).toBe(true);
    expect(silent.stop).toMatchObject({ state: 'stalled', cause: 'unresponsive', capturePending: false });
    expect(silent.judgement!.evidence.rule).toContain('nothing from its hook for 8.0 s (heartbeats every 1.0 s) while its connection stays open: its training thread never lets the hook');
    const read = rankStall(input({ heardAt: 4_000, proc: { visible: true, state: 'R', wchan: null, cpu_s: 41.5, why: null, at: 11_000 } }), 12_000, config);
    expect(read.judgement!.evidence.rule).toContain('/proc/42: running (busy in a call that holds the GIL), 41.5 CPU-s in all');
    const hidden = rankStall(input({ heardAt: 4_000, proc: { visible: false, state: null, wchan: null, cpu_s: null, why: 'no process 42 in the sidecar\'s pid namespace', at: 11_000 } }), 12_000, config);
    expect(hidden.judgement!.evidence.rule).toContain("/proc/42 cannot say: no process 42 in the sidecar's pid namespace");
    // Heartbeats that stopped only recently, within its step threshold, are not a stall yet.
    expect(rankStall(input({ heardAt: 1_000 }), 8_000, config).stop.state).toBe('waiting');
  });

  it("stays stalled, not gone, once the sidecar closed its silent connection while /proc still shows its process", () => {
    const closed = { connected: false, heardAt: 4_000, disconnectedAt: 64_000, disconnectReason: 'silent' as const };
    expect(rankStall(input(closed), 70_000, config).stop).toMatchObject({ state: 'gone', cause: 'no-answer' });
    const alive = rankStall(input({ ...closed, proc: { visible: true, state: 'R', wchan: null, cpu_s: 70, why: null, at: 66_000 } }), 70_000, config);
    expect(alive.stop).toMatchObject({ state: 'stalled', cause: 'unresponsive' });
    expect(alive.judgement!.evidence.rule).toContain('the sidecar closed its silent connection, and its process is still there');
  });

  it('is gone once its connection dropped without an end and it did not come back', () => {
    const dropped = { connected: false, disconnectedAt: 3_000, disconnectReason: 'closed' as const };
    expect(rankStall(input(dropped), 3_000 + STALL.goneMs - 1, config).stop.state).toBe('waiting');
    const gone = rankStall(input(dropped), 3_000 + STALL.goneMs, config);
    expect(gone.stop).toMatchObject({ state: 'gone', cause: 'connection-closed', wentAt: 3_000 });
    expect(gone.judgement).toMatchObject({ verdict: 'gone', cause: 'connection-closed', since: 3_000 });
    expect(gone.judgement!.evidence.rule).toBe('gone 5.0 s ago, after step 149: its connection dropped without an end: the process was killed (SIGKILL, the out-of-memory killer), crashed hard, or its node was lost');
    // After a sidecar restart the hooks get longer to come back.
    const restart = { connected: false, disconnectedAt: 3_000, disconnectReason: 'restart' as const };
    expect(rankStall(input(restart), 3_000 + STALL.goneMs, config).stop.state).toBe('waiting');
    expect(rankStall(input(restart), 3_000 + STALL.restartGraceMs, config).stop).toMatchObject({ state: 'gone', cause: 'not-reconnected' });
    // One that said its end is ended, whatever its connection.
    expect(rankStall(input({ ...dropped, ended: true }), 60_000, config).stop.state).toBe('ended');
  });
});

const rank = (r: number, more: Partial<RankStop>): RankStop => ({
  rank: r,
  state: 'stalled',
  cause: 'collective',
  since: 0,
  wentAt: null,
  lastStep: 149,
  collectives: null,
  inCollective: 'all_reduce',
  progressing: false,
  capturePending: false,
  ...more,
});

describe('a job that stops', () => {
  it('is hung on the rank that never entered the collective the others wait in', () => {
    const ranks = [0, 1, 2, 3].map((r) => rank(r, { collectives: { count: r === 1 ? 45 : 46, source: 'flight-recorder' }, ...(r === 1 ? { cause: 'code', inCollective: null } : {}) }));
    expect(jobStop(ranks)).toEqual({ verdict: 'hung', cause: 'code', culprits: [1], waiting: [0, 2, 3], since: 0, waitsIn: 'all_reduce' });
    // The step first: a rank a step behind is behind whatever its collective counts.
    const steps = [rank(0, { lastStep: 150, collectives: { count: 1, source: 'hook' } }), rank(1, { lastStep: 149, collectives: { count: 3, source: 'hook' } })];
    expect(jobStop(steps)).toMatchObject({ culprits: [1], waiting: [0] });
  });

  it('with every rank in one collective, names none of them: the collective, or a rank elsewhere', () => {
    expect(jobStop([rank(0, {}), rank(1, {})])).toMatchObject({ verdict: 'hung', cause: 'collective', culprits: [], waiting: [0, 1] });
  });

  it('without collective counts, the ranks outside a collective hold the others', () => {
    expect(jobStop([rank(0, {}), rank(1, { cause: 'data-loader', inCollective: null })])).toMatchObject({ verdict: 'hung', cause: 'data-loader', culprits: [1], waiting: [0] });
  });

  it('is stalled, not hung, while the rank behind still works; hung on an unresponsive or gone rank', () => {
    expect(jobStop([rank(0, {}), rank(1, { cause: 'busy', inCollective: null, progressing: true })])).toMatchObject({ verdict: 'stalled', cause: 'busy', culprits: [1] });
    expect(jobStop([rank(0, {}), rank(1, { cause: 'unresponsive', inCollective: null })])).toMatchObject({ verdict: 'hung', cause: 'unresponsive', culprits: [1], waiting: [0] });
    expect(jobStop([rank(0, {}), rank(1, { state: 'gone', cause: 'connection-closed', wentAt: 500 })])).toMatchObject({ verdict: 'hung', cause: 'rank-gone', culprits: [1], waiting: [0] });
    expect(jobStop([rank(0, { state: 'ended', cause: null }), rank(1, { state: 'gone', cause: 'connection-closed', wentAt: 500 })])).toMatchObject({ verdict: 'gone', culprits: [1], since: 500 });
  });

  it('is a rank that stopped, not a hang, while others step on; and waits while a rank is only quiet or its stack is on its way', () => {
    expect(jobStop([rank(0, { state: 'stepping', cause: null }), rank(1, { cause: 'code', inCollective: null })])).toMatchObject({ verdict: 'stalled', culprits: [1], waiting: [] });
    expect(jobStop([rank(0, { state: 'waiting', cause: null }), rank(1, { cause: 'code', inCollective: null })])).toBe('pending');
    expect(jobStop([rank(0, {}), rank(1, { cause: null, inCollective: null, capturePending: true })])).toBe('pending');
    expect(jobStop([rank(0, { state: 'stepping', cause: null }), rank(1, { state: 'waiting', cause: null })])).toBeNull();
    // A rank that never ended a step: not waited for while the others step, behind them once they stopped.
    expect(jobStop([rank(0, { state: 'stepping', cause: null }), rank(1, { state: 'waiting', cause: null, lastStep: -1, inCollective: null })])).toBeNull();
    expect(jobStop([rank(0, { since: 700 }), rank(1, { state: 'waiting', cause: null, lastStep: -1, inCollective: null, since: null })])).toMatchObject({ verdict: 'hung', culprits: [1], waiting: [0], since: 700 });
  });

  it('lists ranks shortly', () => {
    expect(rankList([3, 0, 2, 7, 5, 6, 2])).toBe('0, 2, 3, 5–7');
    expect(rankList([0, 1])).toBe('0, 1');
    expect(rankList([1])).toBe('1');
  });
});

describe('a scripted two-rank job that hangs, on the simulated clock', () => {
  const script = () => hangScript([0, 1]);

  it('goes from stepping to hung on rank 1 when its threshold passes and the stacks came, and its summary leads with it', () => {
    const engine = new Engine();
    const ticks: Array<{ at: number; job: any }> = [];
    for (const entry of script()) {
      const published = engine.apply(entry);
      if (published && entry.t === 'tick') ticks.push({ at: entry.at - T0, job: published.jobs[0] });
    }
    const verdictAt = (ms: number) => ticks.find((t) => t.at === ms)?.job ?? (() => { throw new Error(`no tick at ${ms}: ${ticks.length} ticks, ${ticks.slice(0, 3).map((t) => t.at)}`); })();
    // Stepping, then quiet: not stalled before its threshold (3 × 10 ms, at least 5 s), nor while the stacks are asked for.
    expect(verdictAt(7_750).verdict.verdict).not.toMatch(/stalled|hung/);
    expect(verdictAt(8_000).ranks.map((r: any) => r.stall.state)).toEqual(['stalled', 'stalled']);
    expect(verdictAt(8_000).verdict.verdict).not.toBe('hung');
    const hung = verdictAt(8_250);
    expect(hung.verdict).toMatchObject({ verdict: 'hung', cause: 'code', since: T0 + STUCK_AT });
    expect(hung.verdict.evidence.rule).toBe(
      'hung for 5.3 s after step 299: rank 1 stopped in wait_for_it (train.py:48) at wait (threading.py:320), unmoved for 30.0 s; rank 1 never entered gloo:all_reduce (collective #301 of default_pg), which rank 0 waits in',
    );
    expect(hung.stop).toMatchObject({ verdict: 'hung', culprits: [1], waiting: [0], step: 299, waits_in: 'gloo:all_reduce (collective #301 of default_pg)' });
    expect(hung.stop.where.map((f: CodeFrame) => f.function)).toEqual(['wait_for_it', 'main']);
    expect(hung.ranks.map((r: any) => [r.verdict.verdict, r.verdict.cause])).toEqual([
      ['stalled', 'collective'],
      ['stalled', 'code'],
    ]);
    // Held through to the end, the stop dated from the last step.
    expect(verdictAt(39_750).stop.seconds).toBeCloseTo(36.8, 1);

    const [ended] = engine.snapshot().ended;
    const summary = ended!.summary;
    expect(summary.duration_s).toBeCloseTo(40.05, 1);
    expect(summary.headline).toMatch(/^Hung at step 299 for 37\.\d s \(9\d% of the wall time\): rank 1 stopped in wait_for_it \(train\.py:48\)/);
    expect(summary.stops).toHaveLength(1);
    expect(summary.stops![0]).toMatchObject({ verdict: 'hung', cause: 'code', culprits: [1], waiting: [0], step: 299, since_s: 3 });
    expect(summary.recommendations[0]!.id).toBe('unstick-code');
    for (const row of summary.timeline) expect(row.end_s).toBeGreaterThanOrEqual(row.start_s);
    expect(summary.timeline.at(-1)).toMatchObject({ verdict: 'hung', cause: 'code', start_s: 3, end_s: 40.05 });
    // Throughput while it stepped, not over the hang.
    expect(Math.abs(summary.samples_per_s! / ((600 * 32) / 3) - 1)).toBeLessThan(0.02);
  });

  it('replays the same way from a checkpoint taken while hung', () => {
    const entries = script();
    const whole = new Engine();
    for (const entry of entries) whole.apply(entry);
    const half = new Engine();
    const cut = entries.findIndex((e) => e.t === 'tick' && e.at === T0 + 20_000);
    for (const entry of entries.slice(0, cut + 1)) half.apply(entry);
    const resumed = Engine.fromCheckpoint(JSON.parse(JSON.stringify(half.toCheckpoint())));
    for (const entry of entries.slice(cut + 1)) resumed.apply(entry);
    expect(resumed.snapshot().ended[0]!.summary).toEqual(whole.snapshot().ended[0]!.summary);
  });

  it('never calls a job of slow steps stalled while it steps', () => {
    const engine = new Engine();
    engine.apply({ t: 'start', at: T0, config: HANG_CONFIG });
    engine.apply(hello('s0', { heartbeat_ms: 1000, capture: true }));
    engine.apply({ t: 'connect', at: T0, session: 's0' });
    const states = new Set<string>();
    for (let step = 0; step < 60; step++) {
      const end = (step + 1) * 1000;
      engine.apply({ t: 'steps', at: T0 + end, session: 's0', dropped: 0, rows: rows(step + 1, 1, step * 1000, { compute: 900, other: 100 }) });
      for (let tick = end + 250; tick <= end + 1000; tick += 250) {
        const published = engine.apply({ t: 'tick', at: T0 + tick });
        const rankState = published!.jobs[0]!.ranks[0]!;
        states.add(rankState.stall!.state);
        states.add(rankState.verdict?.verdict ?? 'none');
      }
    }
    expect([...states].filter((s) => s === 'stalled' || s === 'hung')).toEqual([]);
  });
});
