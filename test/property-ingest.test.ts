import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { replayJournal } from '../src/journal/replay.js';
import { nodeWalFs, type WalFs } from '../src/journal/wal-fs.js';
import { Wal } from '../src/journal/wal.js';
import type { SidecarState } from '../src/protocol/state.js';
import {
  anyLeaf,
  brief,
  DAY_MS,
  encodeFrame,
  hookSidecar,
  isoTimes,
  jsonProblem,
  mutate,
  mutation,
  rawValue,
  readFrame,
  REFUSAL_CODES,
  rowOf,
  SEED,
  T0,
  type FakeSocket,
  type HookSidecar,
  type Mutation,
  type Outcome,
} from './support/arbitraries.js';
import { STEP_FIELDS } from './support/hook-client.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * Property tests of the whole ingest path in this process (HookConnection → Ingest → Recorder →
 * Engine, and the /v1/state body): sequences of valid and damaged frames from a few hook processes
 * of two jobs, one of which reuses another job's session id. After every frame:
 *
 * - nothing throws out of the sidecar and no connection is closed as failing (1011);
 * - a frame the parser refuses closes its connection with the parser's code; a frame a real hook
 *   would send (valid, its own session, times on its own clock, a small env) is never refused;
 * - acknowledgements of a session (welcome and ack) never decrease, and equal the highest seq held;
 * - each job holds exactly the records its own processes sent (never another job's, never one twice);
 * - the state is plain JSON, at most STATE_BOUND_BYTES, names no resume secret, and places no step
 *   more than a day ahead of the sidecar's clock.
 *
 * The model (what the sidecar must hold) only uses what the sidecar's decisions showed: whether a
 * hello was welcomed and whether a frame closed its connection.
 */

/**
 * The most the /v1/state body may take with these few ranks (2 jobs × 2 ranks, a few sessions),
 * whatever they send: a rank's env, its recent steps and samples are bounded, so repeated hellos or env
 * updates cannot grow it. A real rank's state is a few KiB; 2 MiB leaves room for an env bound of a few
 * hundred KiB per rank, not for an env that grows with every frame (frames are up to 1 MiB each).
 */
const STATE_BOUND_BYTES = 2 * 1024 * 1024;
/** A step may end at most this far ahead of the sidecar's clock (clock skew is seconds; a day is generous). */
const AHEAD_MS = DAY_MS;
/** What ws lets through (--max-frame-bytes): a bigger frame never reaches the connection. */
const MAX_FRAME_BYTES = 1 << 20;
/** A job is never complete here (ranks 0 and 1 of 1000), so no run ends and the store never moves to a new run. */
const WORLD_SIZE = 1000;

interface Identity {
  job: string;
  rank: number;
  session: string;
}

/** Hook processes: the third is another job's process that reuses the first one's session id, the fifth another rank's. */
const IDENTITIES: readonly Identity[] = [
  { job: 'job-a', rank: 0, session: 'proc-1' },
  { job: 'job-a', rank: 1, session: 'proc-2' },
  { job: 'job-b', rank: 0, session: 'proc-1' },
  { job: 'job-b', rank: 1, session: 'proc-3' },
  { job: 'job-a', rank: 1, session: 'proc-1' },
];

/** One simulated hook process (python-hook's sender): its records, what was acknowledged, its secret. */
class Hook {
  /** Records made so far (the last seq). */
  seq = 0;
  acked = 0;
  secret: string | null = null;
  socket: FakeSocket | null = null;
  welcomed = false;
  /** The last seq sent on the current connection. */
  sentThrough = 0;
  /** How many of the socket's received messages were looked at. */
  seen = 0;
  /**
   * A damaged frame was taken on this connection: what the sidecar holds may differ from what this
   * hook believes it sent (a row left out, a seq changed), so its next valid frames may be refused.
   */
  tainted = false;

  constructor(
    readonly id: Identity,
    readonly index: number,
  ) {}

  /** The hook's monotonic clock (ns) at sidecar time `now`: each process has its own origin. */
  mono(now: number): number {
    return 1e12 + this.index * 7e12 + (now - T0) * 1e6;
  }

  helloFrame(now: number, env: Record<string, unknown>): Record<string, unknown> {
    return {
      v: 1,
      type: 'hello',
      job: this.id.job,
      rank: this.id.rank,
      local_rank: this.id.rank,
      world_size: WORLD_SIZE,
      session: this.id.session,
      pid: 1000 + this.index,
      host: `node-${this.index}`,
      clock: { wall_ns: BigInt(now) * 1_000_000n, mono_ns: this.mono(now) },
      env,
      acked: this.acked,
      ...(this.secret ? { resume: this.secret } : {}),
    };
  }

  get open(): boolean {
    return this.socket !== null && this.socket.closed === null && this.socket.readyState === 1;
  }
}

/** What the sidecar must hold for one session of one job. */
interface SessionModel {
  maxSeq: number;
  /** Records it must count, and records it may count (times neither clearly right nor clearly wrong). */
  surely: number;
  maybe: number;
  lastAck: number;
  helloAt: number;
  monoAtHello: number;
}

/** A session of a process: its job, its rank and its id (another rank's process with the same id is another process). */
const key = (id: Identity) => `${id.job}/${id.rank}/${id.session}`;

// ---------------------------------------------------------------------------------------------------
// Actions

type Action =
  /** `big`: the env is one of the big ones (not what a real hook sends). */
  | { kind: 'connect'; hook: number; env: Record<string, unknown>; mutation: Mutation | null; big?: boolean }
  | { kind: 'steps'; hook: number; n: number; back: number; durMs: number; mutation: Mutation | null }
  | { kind: 'env'; hook: number; env: Record<string, unknown>; pristine: boolean; mutation: Mutation | null }
  | { kind: 'counters'; hook: number; source: 'nvml' | 'process'; mutation: Mutation | null }
  | { kind: 'end'; hook: number; mutation: Mutation | null }
  | { kind: 'garbage'; hook: number; bytes: Uint8Array; text: boolean }
  | { kind: 'drop'; hook: number }
  | { kind: 'tick'; ms: number };

const hookIndex = fc.integer({ min: 0, max: IDENTITIES.length - 1 });
/** A damaged frame one time in four. */
const maybeMutation = fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, mutation);

/** An env a hook really sends: a few known keys. */
const smallEnv = fc.record(
  { python: fc.constantFrom('3.11.7', '3.12.1'), torch: fc.constantFrom('2.5.1', null), loader: fc.record({ batch_size: fc.integer({ min: 1, max: 512 }), num_workers: fc.integer({ min: 0, max: 16 }) }) },
  { requiredKeys: [] },
);

/**
 * An env of up to 64 keys of up to 15 KiB each (one frame stays under 1 MiB): what a rank must not be
 * able to pile up. `odd`: one more key holding any value (bigint, bytes, NaN, ...).
 */
function bigEnv(odd: boolean): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .record({ keys: fc.integer({ min: 1, max: 64 }), first: fc.integer({ min: 0, max: 1000 }), chars: fc.integer({ min: 1, max: 15 * 1024 }), leaf: odd ? anyLeaf : fc.constant(undefined) })
    .map(({ keys, first, chars, leaf }) => {
      const env: Record<string, unknown> = odd ? { odd: leaf } : {};
      for (let i = 0; i < keys; i++) env[`k${first + i}`] = 'e'.repeat(chars);
      Object.defineProperty(env, fc.toStringMethod, { value: () => `<env of ${keys} keys k${first}..k${first + keys - 1} of ${chars} chars${odd ? `, odd: ${brief(leaf, 60)}` : ''}>` });
      return env;
    });
}

const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('connect' as const), hook: hookIndex, env: smallEnv, mutation: maybeMutation }) },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('steps' as const),
      hook: hookIndex,
      // Up to 16 records: a frame of 8 or more is journaled as its bytes, fewer as rows.
      n: fc.integer({ min: 1, max: 16 }),
      back: fc.integer({ min: 0, max: 3 }),
      durMs: fc.integer({ min: 1, max: 500 }),
      mutation: maybeMutation,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.oneof(
      fc.record({ kind: fc.constant('env' as const), hook: hookIndex, env: smallEnv, pristine: fc.constant(true), mutation: maybeMutation }),
      fc.record({ kind: fc.constant('env' as const), hook: hookIndex, env: bigEnv(true), pristine: fc.constant(false), mutation: fc.constant(null) }),
    ),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('counters' as const), hook: hookIndex, source: fc.constantFrom('nvml' as const, 'process' as const), mutation: maybeMutation }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('end' as const), hook: hookIndex, mutation: maybeMutation }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('garbage' as const), hook: hookIndex, bytes: fc.oneof(fc.uint8Array({ maxLength: 32 }), rawValue), text: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), hook: hookIndex }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 2_000 }) }) },
);

// ---------------------------------------------------------------------------------------------------
// The run: a sidecar, the hooks, the model, and the checks after every action

function safeRead(bytes: Uint8Array): Outcome | null {
  try {
    return readFrame(bytes);
  } catch {
    return null;
  }
}

class Run {
  readonly hooks = IDENTITIES.map((id, i) => new Hook(id, i));
  readonly model = new Map<string, SessionModel>();
  /** The job and rank a session id was first welcomed for. */
  readonly owner = new Map<string, Identity>();
  readonly secrets = new Set<string>();
  readonly log: string[] = [];
  /** The state after the last action. */
  state: SidecarState | null = null;

  constructor(readonly sidecar: HookSidecar) {}

  private session(id: Identity): SessionModel {
    let model = this.model.get(key(id));
    if (!model) this.model.set(key(id), (model = { maxSeq: 0, surely: 0, maybe: 0, lastAck: 0, helloAt: 0, monoAtHello: 0 }));
    return model;
  }

  private fail(what: string): never {
    throw new Error(`${what}\nafter: ${this.log.join(' → ')}`);
  }

  /** Sends a frame from a hook; returns the parser's verdict on it (null: the parser threw, which the frame properties report). */
  private async send(hook: Hook, frame: Record<string, unknown> | Uint8Array, text = false): Promise<Outcome | null | 'too-big'> {
    const bytes = frame instanceof Uint8Array ? frame : encodeFrame(frame);
    if (bytes.length > MAX_FRAME_BYTES) return 'too-big';
    const outcome = text ? ({ ok: false, error: { code: 1003, message: 'text frame' } } as unknown as Outcome) : safeRead(bytes);
    this.sidecar.send(hook.socket!, text ? Buffer.from(bytes).toString('latin1') : bytes, !text);
    await this.sidecar.flush();
    return outcome;
  }

  /** The acknowledgements that arrived for a hook since the last look: each never below the session's last one. */
  private acks(hook: Hook): Array<Record<string, unknown>> {
    const socket = hook.socket!;
    const fresh = socket.received.slice(hook.seen);
    hook.seen = socket.received.length;
    const model = this.session(hook.id);
    for (const message of fresh) {
      if (typeof message.ack !== 'number') continue;
      if (message.ack < model.lastAck) this.fail(`${key(hook.id)}: ${message.type} acknowledged ${message.ack} after ${model.lastAck}`);
      model.lastAck = message.ack;
      hook.acked = Math.max(hook.acked, message.ack);
      if (typeof message.resume === 'string') this.secrets.add(message.resume);
    }
    return fresh;
  }

  /** After a frame the parser refused: the connection is closed with the parser's code. `pristine`: what a real hook sends, which the parser must take. */
  private expectRefused(hook: Hook, outcome: Outcome & { ok: false }, pristine = false): void {
    if (pristine) this.fail(`${key(hook.id)}: the parser refuses a frame a real hook sends: ${outcome.error.message}`);
    const closed = hook.socket!.closed;
    if (!closed) this.fail(`${key(hook.id)}: a frame the parser refuses (${outcome.error.message}) left the connection open`);
    if (closed.code !== outcome.error.code) this.fail(`${key(hook.id)}: refused with ${closed.code} (${closed.reason}), the parser says ${outcome.error.code}`);
  }

  private expectOpen(hook: Hook, what: string): void {
    const closed = hook.socket!.closed;
    if (closed) this.fail(`${key(hook.id)}: ${what} a real hook sends was refused: ${closed.code} ${closed.reason}`);
  }

  async apply(a: Action): Promise<void> {
    const sidecar = this.sidecar;
    const now = sidecar.now();
    if (a.kind === 'tick') {
      this.log.push(`tick +${a.ms}`);
      sidecar.advance(a.ms);
      return;
    }
    const hook = this.hooks[a.hook]!;
    const model = this.session(hook.id);
    const name = `${hook.id.job}/r${hook.id.rank}/${hook.id.session}`;
    if (a.kind === 'connect') {
      this.log.push(`${name} hello${a.mutation ? ' (damaged)' : ''}`);
      if (hook.socket) {
        hook.socket.gone();
        await sidecar.flush();
      }
      hook.socket = sidecar.connect();
      hook.welcomed = false;
      hook.seen = 0;
      hook.tainted = a.mutation !== null;
      const pristine = hook.helloFrame(now, a.env);
      const frame = a.mutation ? mutate(pristine, a.mutation, ['job', 'session', 'rank', 'world_size']).frame : pristine;
      const outcome = await this.send(hook, frame);
      if (outcome === 'too-big' || outcome === null) return;
      if (!outcome.ok) return this.expectRefused(hook, outcome, !a.mutation && !a.big);
      const owner = this.owner.get(hook.id.session);
      const ownSession = owner === undefined || (owner.job === hook.id.job && owner.rank === hook.id.rank);
      const welcome = this.acks(hook).find((message) => message.type === 'welcome');
      if (!welcome) {
        if (!hook.socket.closed) this.fail(`${name}: hello neither welcomed nor refused`);
        if (!a.mutation && !a.big && ownSession) this.expectOpen(hook, 'the hello');
        return;
      }
      if (welcome.ack !== model.maxSeq) this.fail(`${name}: welcome acknowledges ${String(welcome.ack)}, the session holds ${model.maxSeq}`);
      if (!owner) this.owner.set(hook.id.session, hook.id);
      hook.welcomed = true;
      hook.secret = typeof welcome.resume === 'string' ? welcome.resume : null;
      hook.sentThrough = welcome.ack as number;
      const parsed = outcome.message as unknown as { hello?: { clock: { mono_ns: number } }; clock?: { mono_ns: number } };
      model.helloAt = now;
      model.monoAtHello = (parsed.hello ?? parsed).clock!.mono_ns;
      return;
    }
    if (!hook.welcomed || !hook.open) {
      // A hook that is not connected connects first (with its own, valid hello), as python-hook's sender does.
      if (a.kind === 'drop') return;
      await this.apply({ kind: 'connect', hook: a.hook, env: { python: '3.11.7' }, mutation: null });
      if (!hook.welcomed || !hook.open) return;
    }
    switch (a.kind) {
      case 'drop': {
        this.log.push(`${name} drops`);
        hook.socket!.gone();
        await sidecar.flush();
        return;
      }
      case 'garbage': {
        this.log.push(`${name} garbage`);
        const outcome = await this.send(hook, a.bytes, a.text);
        if (outcome !== null && outcome !== 'too-big' && !outcome.ok) this.expectRefused(hook, outcome);
        this.acks(hook);
        return;
      }
      case 'steps': {
        const first = Math.max(1, hook.sentThrough + 1 - a.back);
        const last = Math.min(hook.seq + a.n, first + 63);
        const durNs = a.durMs * 1e6;
        const mono = hook.mono(now);
        const rows: Array<Array<number | null>> = [];
        for (let seq = first; seq <= last; seq++) {
          rows.push(rowOf({ seq, step: seq - 1, end_ns: mono - (last - seq) * durNs, dur_ns: durNs, data_ns: Math.floor(durNs * 0.3), h2d_ns: Math.floor(durNs * 0.1), compute_ns: Math.floor(durNs * 0.5), samples: 32 }));
        }
        const pristine = { v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 };
        const frame = a.mutation ? mutate(pristine, a.mutation).frame : pristine;
        this.log.push(`${name} steps ${first}..${last}${a.mutation ? ' (damaged)' : ''}`);
        hook.seq = Math.max(hook.seq, last);
        hook.sentThrough = last;
        const outcome = await this.send(hook, frame);
        if (outcome === 'too-big' || outcome === null) return;
        if (!outcome.ok) return this.expectRefused(hook, outcome, !a.mutation);
        if (hook.socket!.closed) {
          if (!a.mutation && !hook.tainted) this.expectOpen(hook, 'a steps frame');
          return;
        }
        if (a.mutation) hook.tainted = true;
        if (outcome.message.type === 'steps') {
          for (const record of outcome.message.records) {
            if (record.seq <= model.maxSeq) continue;
            model.maxSeq = record.seq;
            const endAt = model.helloAt + (record.endNs - model.monoAtHello) / 1e6;
            if (Math.abs(endAt - now) <= 60_000) {
              model.surely += 1;
              model.maybe += 1;
            } else if (endAt <= now + AHEAD_MS) {
              model.maybe += 1;
            }
          }
          const acks = this.acks(hook).filter((message) => message.type === 'ack');
          if (acks.at(-1)?.ack !== model.maxSeq) this.fail(`${name}: steps acknowledged ${brief(acks.map((m) => m.ack))}, the session holds ${model.maxSeq}`);
        } else {
          this.acks(hook);
        }
        return;
      }
      case 'env':
      case 'counters':
      case 'end': {
        let pristine: Record<string, unknown>;
        if (a.kind === 'env') pristine = { v: 1, type: 'env', env: a.env };
        else if (a.kind === 'end') pristine = { v: 1, type: 'end', reason: 'close' };
        else {
          const at_ns = hook.mono(now);
          pristine =
            a.source === 'nvml'
              ? { v: 1, type: 'counters', source: 'nvml', samples: [{ at_ns, index: hook.id.rank, uuid: `GPU-${hook.index}`, util_gpu: 97, sm_clock_mhz: 1980, sm_clock_max_mhz: 1980 }] }
              : { v: 1, type: 'counters', source: 'process', samples: [{ at_ns, cpu_main_s: 12.5, cpu_workers_s: 40, workers: 4, rss_bytes: 2e9 }] };
        }
        const frame = a.mutation ? mutate(pristine, a.mutation).frame : pristine;
        this.log.push(`${name} ${a.kind}${a.mutation ? ' (damaged)' : a.kind === 'env' && !a.pristine ? ' (big)' : ''}`);
        const outcome = await this.send(hook, frame);
        if (outcome === 'too-big' || outcome === null) return;
        if (!outcome.ok) return this.expectRefused(hook, outcome, !a.mutation && (a.kind !== 'env' || a.pristine));
        if (hook.socket!.closed) {
          if (!a.mutation && !hook.tainted && (a.kind !== 'env' || a.pristine)) this.expectOpen(hook, `a ${a.kind} frame`);
          return;
        }
        if (a.mutation) hook.tainted = true;
        const fresh = this.acks(hook);
        if (outcome.message.type === 'end') {
          const ack = fresh.find((message) => message.type === 'ack' && message.end === true);
          if (ack?.ack !== model.maxSeq) this.fail(`${name}: end acknowledged ${String(ack?.ack)}, the session holds ${model.maxSeq}`);
        }
        return;
      }
    }
  }

  /** The checks on the sidecar as a whole, after each action. */
  async check(): Promise<SidecarState> {
    const sidecar = this.sidecar;
    const state = await sidecar.state();
    if (sidecar.crashes.length > 0) this.fail(`the sidecar failed: ${sidecar.crashes.join('; ')}`);
    for (const socket of sidecar.sockets) {
      if (socket.closed && !REFUSAL_CODES.includes(socket.closed.code)) this.fail(`a connection was closed with ${socket.closed.code}: ${socket.closed.reason}`);
    }
    let json: string;
    try {
      json = JSON.stringify(state);
    } catch (error) {
      return this.fail(`the state does not serialise: ${(error as Error).message}`);
    }
    const problem = jsonProblem(state, 'state');
    if (problem) this.fail(`the state is not plain JSON: ${problem}`);
    if (json.length > STATE_BOUND_BYTES) this.fail(`the state takes ${json.length} bytes, more than ${STATE_BOUND_BYTES}`);
    for (const secret of this.secrets) if (json.includes(secret)) this.fail('the state shows a session resume secret');
    const now = sidecar.now();
    for (const [path, at] of isoTimes(state)) if (at > now + AHEAD_MS) this.fail(`${path} is ${new Date(at).toISOString()}, more than a day ahead of ${new Date(now).toISOString()}`);
    for (const view of sidecar.engine.world.history.views()) {
      for (const step of view.recent()) {
        if (step.endAt > now + AHEAD_MS) this.fail(`${view.job} rank ${view.rank} holds step seq ${step.record.seq} ending ${new Date(step.endAt).toISOString()}, more than a day ahead`);
      }
    }
    for (const job of state.jobs) {
      let surely = 0;
      let maybe = 0;
      for (const [name, model] of this.model) {
        if (!name.startsWith(`${job.job}/`)) continue;
        surely += model.surely;
        maybe += model.maybe;
      }
      if (job.steps < surely || job.steps > maybe) {
        const held = job.steps < surely ? `lost ${surely - job.steps} of its records` : `holds ${job.steps - maybe} records its processes never sent`;
        this.fail(`${job.job} ${held}: ${job.steps} steps, its processes sent ${surely === maybe ? surely : `${surely} to ${maybe}`}`);
      }
    }
    return state;
  }
}

async function play(actions: Action[], options: Parameters<typeof hookSidecar>[0] = {}): Promise<Run> {
  const sidecar = await hookSidecar({ ...options, limits: { helloTimeoutMs: 600_000, idleTimeoutMs: 600_000 } });
  const run = new Run(sidecar);
  try {
    for (const a of actions) {
      await run.apply(a);
      run.state = await run.check();
    }
  } finally {
    await sidecar.close();
  }
  return run;
}

const tempDir = useTempDirs('stepscope-property-ingest-');

/** The real file system without fdatasync: the same bytes, milliseconds faster (durability is not what is tested here). */
const noSyncFs: WalFs = {
  ...nodeWalFs,
  syncDir: async () => undefined,
  async open(file, flags) {
    const handle = await nodeWalFs.open(file, flags);
    return { write: (data, at) => handle.write(data, at), read: (into, at) => handle.read(into, at), datasync: async () => undefined, truncate: (length) => handle.truncate(length), close: () => handle.close() };
  },
};

// ---------------------------------------------------------------------------------------------------

describe('ingest: sequences of frames from a few hooks, through the real connection path', () => {
  it('never crash, never decrease an acknowledgement, keep each job to its own records, and keep the state plain JSON, bounded and on the clock', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 4, maxLength: 25, size: 'medium' }), async (actions) => {
        await play(actions);
      }),
      { seed: SEED, numRuns: 25 },
    );
  });

  it('with a journal (--out): the same holds, and replaying the journal gives the state the live sidecar had', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 4, maxLength: 25, size: 'medium' }), async (actions) => {
        const dir = tempDir();
        const wal = await Wal.open({ dir, maxBytes: 1 << 30, flushDelayMs: 0, fs: noSyncFs });
        const run = await play(actions, { wal });
        // After the hooks are gone: one more tick, then the journal is closed and replayed.
        await run.sidecar.state();
        await run.sidecar.recorder.close();
        const live = run.sidecar.engine;
        const { engine: replayed, report } = await replayJournal(dir);
        expect(report.entries).toBeGreaterThan(2);
        expect(report.problems, run.log.join(' → ')).toBe(0);
        expect(report.skipped, run.log.join(' → ')).toBe(0);
        expect(JSON.stringify(replayed.snapshot().jobs), run.log.join(' → ')).toBe(JSON.stringify(live.snapshot().jobs));
        expect(JSON.stringify(replayed.toCheckpoint()), run.log.join(' → ')).toBe(JSON.stringify(live.toCheckpoint()));
      }),
      { seed: SEED, numRuns: 8 },
    );
  });

  it('a hello from another job (or rank) that reuses a session id leaves that session alone', async () => {
    // Hook 0 (job-a rank 0, session proc-1) sends records; the intruder (job-b rank 0 or job-a
    // rank 1, same session id) says hello and sends records at any point; hook 0 goes on, reconnects
    // and goes on again. job-a must hold exactly hook 0's records, acknowledged in order.
    const scenario = fc.record({
      intruder: fc.constantFrom(2, 4),
      before: fc.integer({ min: 1, max: 5 }),
      between: fc.integer({ min: 0, max: 5 }),
      after: fc.integer({ min: 1, max: 5 }),
      intruderSteps: fc.integer({ min: 0, max: 6 }),
      intruderAt: fc.integer({ min: 0, max: 2 }),
      intruderStays: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const steps = (hook: number, n: number): Action => ({ kind: 'steps', hook, n, back: 0, durMs: 100, mutation: null });
        const hello = (hook: number): Action => ({ kind: 'connect', hook, env: { python: '3.11.7' }, mutation: null });
        const intruder: Action[] = [hello(s.intruder), ...(s.intruderSteps > 0 ? [steps(s.intruder, s.intruderSteps)] : []), ...(s.intruderStays ? [] : [{ kind: 'drop', hook: s.intruder } as Action])];
        const owner: Action[][] = [[hello(0), steps(0, s.before)], s.between > 0 ? [steps(0, s.between)] : [], [{ kind: 'drop', hook: 0 }, hello(0), steps(0, s.after)]];
        const actions = owner.flatMap((part, i) => (i === s.intruderAt ? [...part, ...intruder] : part));
        // play() checks job totals and every acknowledgement against the model after each frame; here, rank 0 of job-a itself.
        const run = await play(actions);
        const sent = s.before + s.between + s.after;
        const rank0 = run.state?.jobs.find((job) => job.job === 'job-a')?.ranks.find((rank) => rank.rank === 0);
        expect(rank0?.steps, run.log.join(' → ')).toBe(sent);
        expect(run.hooks[0]!.acked, run.log.join(' → ')).toBe(sent);
      }),
      { seed: SEED, numRuns: 25 },
    );
  });

  it(`repeated hellos and env updates with big envs never grow the state past ${STATE_BOUND_BYTES / 1024 / 1024} MiB`, async () => {
    const frame = fc.record({ hook: fc.constantFrom(0, 1), hello: fc.boolean(), env: bigEnv(false) });
    await fc.assert(
      fc.asyncProperty(fc.array(frame, { minLength: 1, maxLength: 8 }), async (frames) => {
        const actions: Action[] = [
          { kind: 'connect', hook: 0, env: {}, mutation: null },
          { kind: 'connect', hook: 1, env: {}, mutation: null },
          ...frames.map(
            ({ hook, hello, env }): Action => (hello ? { kind: 'connect', hook, env, mutation: null, big: true } : { kind: 'env', hook, env, pristine: false, mutation: null }),
          ),
        ];
        // A hook whose big hello was refused reconnects with a small one, so that the others go on.
        const withRetries = actions.flatMap((a) => (a.kind === 'connect' && a.big ? [a, { kind: 'connect', hook: a.hook, env: {}, mutation: null } as Action] : [a]));
        await play(withRetries);
      }),
      // Shrinking multi-MiB states is slow: what it reached after 10 s is reported (a failure either way).
      { seed: SEED, numRuns: 10, interruptAfterTimeLimit: 10_000, markInterruptAsFailure: false },
    );
  });

  it('a step record that ends far from the hook clock is never placed more than a day ahead of the sidecar clock', async () => {
    // After hello (mono_ns = M at sidecar time T), a record ending at end_ns maps to T + (end_ns - M) / 1e6.
    const offset = fc.oneof(fc.integer({ min: -1e12, max: 9e15 }), fc.constantFrom(100 * 86_400e9, 2 * 86_400e9, 86_400e9 + 1, 3_600e9, 0));
    await fc.assert(
      fc.asyncProperty(offset, fc.integer({ min: 1, max: 5 }), async (delta, n) => {
        const sidecar = await hookSidecar({ limits: { helloTimeoutMs: 600_000, idleTimeoutMs: 600_000 } });
        try {
          const socket = sidecar.connect();
          const mono = 1e12;
          sidecar.send(socket, encodeFrame({ v: 1, type: 'hello', job: 'job-a', rank: 0, local_rank: 0, world_size: 1, session: 'proc-1', pid: 1, host: 'node-1', clock: { wall_ns: BigInt(T0) * 1_000_000n, mono_ns: mono }, env: {}, acked: 0 }));
          await sidecar.flush();
          const rows = Array.from({ length: n }, (_, i) => rowOf({ seq: i + 1, step: i, end_ns: Math.max(0, mono + delta + i * 1e6), dur_ns: 1e6, data_ns: 0, h2d_ns: 0, compute_ns: 0 }));
          sidecar.send(socket, encodeFrame({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 }));
          const state = await sidecar.state();
          expect(sidecar.crashes).toEqual([]);
          const now = sidecar.now();
          for (const view of sidecar.engine.world.history.views()) for (const step of view.recent()) expect(step.endAt).toBeLessThanOrEqual(now + AHEAD_MS);
          for (const [path, at] of isoTimes(state)) expect(at, path).toBeLessThanOrEqual(now + AHEAD_MS);
        } finally {
          await sidecar.close();
        }
      }),
      { seed: SEED, numRuns: 30 },
    );
  });
});
