import type { ProfileFrame, ProfileRequest } from '../protocol/profile.js';
import type { GpuSample } from '../counters/types.js';
import type { HostSample } from '../counters/host.js';
import { liveSteps, type JournalEntry } from '../engine/entries.js';
import type { CounterBatch } from '../protocol/counters.js';
import { CloseCode, ProtocolError, type Env, type Hello, type Steps, type StepRecord, type Welcome } from '../protocol/messages.js';
import { mintSecret } from '../protocol/session-secret.js';
import { plausibleAt, sidecarNow } from '../model/clock.js';
import { admitRows, EnvTooLargeError, plausibleFor, toSidecarMs, type AdmissionPort } from '../store/admission.js';
import type { Recorder } from '../journal/recorder.js';
import { captureOf, type ProcReading, type StackFrame } from '../protocol/capture.js';
import type { IngestStats } from '../protocol/state.js';
import { DEFAULT_LIMITS, type IngestLimits } from './limits.js';

export interface HelloResult {
  ack: number;
  resumed: boolean;
  /** The session's resume secret, for `welcome`. */
  secret: string;
  /** A session journaled before secrets, gone on with by its own process under this new secret. */
  legacy: boolean;
}

/**
 * Turns validated hook messages into journal entries: decides what is new, has the recorder log it
 * and apply it to the engine, and only then resolves the acknowledgement, so an acknowledged record
 * survives a SIGKILL, a full disk or a restart. A write that fails rejects (JournalRefused).
 */
interface OpenConnection {
  requestCapture(id: number): void;
  requestProfile(request: ProfileRequest): boolean;
}

export class Ingest {
  readonly stats: IngestStats = {
    connections: 0,
    connectionsTotal: 0,
    frames: 0,
    records: 0,
    duplicates: 0,
    rejected: {},
    limited: {},
    implausible: {},
  };

  private readonly now: () => number;
  /** What the hooks are asked to forward, in `welcome`. */
  readonly wants: Welcome['counters'];
  readonly limits: IngestLimits;
  /** Per session, the highest seq already sent to the journal (written or on its way). */
  private readonly logged = new Map<string, number>();
  /** Secrets decided for sessions whose hello is still being written: a second hello must present them too. */
  private readonly minted = new Map<string, string>();
  /** Each session's open connection, to ask its hook for its stack. */
  private readonly open = new Map<string, OpenConnection>();
  /** Where `profile` chunks go (src/ingest/profiles.ts); none: they are dropped. */
  onProfile: ((hello: Hello, frame: ProfileFrame) => void) | null = null;
  /** --stack-dumps: hooks send every thread's whole stack. */
  deepCaptures = false;

  /**
   * `admission`: what it asks of the engine's sessions before journaling (the engine's own, built
   * with the same jobs and ranks limits where the sidecar is put together). `nvml`: whether hooks
   * are asked to forward their GPU readings (they are the GPU source).
   */
  constructor(
    private readonly admission: AdmissionPort,
    private readonly recorder: Recorder,
    options: { now?: () => number; gpuIntervalMs?: number; limits?: Partial<IngestLimits>; nvml?: boolean } = {},
  ) {
    this.now = options.now ?? sidecarNow;
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.wants = { nvml: options.nvml ?? false, interval_ms: options.gpuIntervalMs ?? 500, process: true, memory: true };
  }

  /** The limit this hello would pass (a new job or rank past the engine's limits), or null. */
  refusal(hello: Hello): { limit: 'jobs' | 'ranks'; reason: string } | null {
    return this.admission.refusal(hello);
  }

  limited(limit: string): void {
    this.stats.limited[limit] = (this.stats.limited[limit] ?? 0) + 1;
  }

  /**
   * Binds the session to its job and rank and to a secret: a hello for a session that another job
   * or rank holds, or that does not present the session's secret, is refused (1008).
   */
  async hello(hello: Hello, resume: string | null = null): Promise<HelloResult> {
    const pending = this.minted.get(hello.session);
    const conflict = pending !== undefined && pending !== resume ? `session ${hello.session} is being opened by another connection` : this.admission.sessionConflict(hello, resume);
    if (conflict) throw new ProtocolError(CloseCode.policyViolation, `hello: ${conflict}`);
    const resumed = this.admission.hasSession(hello.session, hello.job);
    const legacy = resumed && pending === undefined && this.admission.secretOf(hello.session) === null;
    const secret = pending ?? this.admission.secretOf(hello.session) ?? mintSecret();
    this.minted.set(hello.session, secret);
    try {
      await this.record({ t: 'hello', at: this.now(), hello, secret });
    } finally {
      this.minted.delete(hello.session);
    }
    return { ack: this.admission.ack(hello.session), resumed, secret, legacy };
  }

  /** An env update that would grow the rank's env past its bound is refused (1007); the rank's env is kept. */
  env(session: string, env: Env): Promise<void> {
    try {
      this.admission.mergedEnv(session, env);
    } catch (error) {
      // 1007, like any frame that cannot become valid by resending it: the hook stops instead of retrying.
      if (error instanceof EnvTooLargeError) throw new ProtocolError(CloseCode.invalidPayload, error.message);
      throw error;
    }
    return this.record({ t: 'env', at: this.now(), session, env });
  }

  /**
   * Resolves to the sequence number to acknowledge, once what it covers is written and applied.
   * Refuses (1007) seqs no hook could have reached; leaves out, counts and acknowledges records
   * that end where the rank's clock could not put them.
   */
  async steps(session: string, message: Steps): Promise<number> {
    const at = this.now();
    const after = Math.max(this.admission.ack(session), this.logged.get(session) ?? 0);
    const { fresh, kept, duplicates, refused } = admitRows(this.admission.seqRange(session), after, message.records, at);
    this.stats.duplicates += duplicates;
    if (fresh.length > 0) {
      this.checkSeqs(session, after, fresh, message.dropped);
      if (refused) this.stats.implausible.steps = (this.stats.implausible.steps ?? 0) + refused.count;
      this.logged.set(session, Math.max(after, fresh.at(-1)!.seq));
      try {
        // The frame's bytes, for the journal to keep where liveSteps says (only a journal would read them).
        const frame = this.recorder.journaled ? (message.bytes ?? null) : null;
        await this.record(liveSteps(at, session, message.dropped, kept, duplicates, refused, frame));
      } catch (error) {
        // Nothing of it was acknowledged: after the hook reconnects, its resent records are new again.
        this.logged.delete(session);
        throw error;
      }
      this.stats.records += kept.length;
    } else {
      // A frame of duplicates still waits for what it covers to be written.
      await this.record({ t: 'steps', at: this.now(), session, dropped: message.dropped, rows: [], duplicates });
    }
    return this.admission.ack(session);
  }

  /** Resolves to the sequence number to acknowledge, once the end is recorded. */
  async end(session: string, reason: string): Promise<number> {
    await this.record({ t: 'end', at: this.now(), session, reason });
    return this.admission.ack(session);
  }

  /** Samples at times the rank's clock could not give are left out and counted. */
  async counters(session: string, batch: CounterBatch): Promise<void> {
    const at = this.now();
    const clock = this.admission.seqRange(session);
    const kept = (batch.samples as Array<{ at_ns: number }>).filter((sample) => plausibleFor(clock, sample.at_ns, at));
    const left = batch.samples.length - kept.length;
    if (left > 0) this.stats.implausible.counters = (this.stats.implausible.counters ?? 0) + left;
    if (kept.length === 0) return;
    await this.record({ t: 'counters', at, session, batch: { ...batch, samples: kept } as CounterBatch });
  }

  /**
   * A hook numbers every record it makes, so past what this session is known to hold (or what the
   * hook said had been acknowledged) there can only be the records it sends and those it says it
   * dropped. A seq beyond that would make the rank's real records look like duplicates.
   */
  private checkSeqs(session: string, after: number, fresh: readonly StepRecord[], dropped: number): void {
    const range = this.admission.seqRange(session);
    if (!range) throw new ProtocolError(CloseCode.policyViolation, 'steps: the session is not open');
    const base = Math.max(after, range.base);
    // The hook's count of what it dropped, less the gaps already seen: a frame's count can cover gaps that come in later frames.
    const unseen = Math.max(0, dropped - range.skipped);
    const limit = base + fresh.length + unseen;
    const last = fresh.at(-1)!.seq;
    if (last > limit) {
      throw new ProtocolError(
        CloseCode.invalidPayload,
        `steps.rows: seq ${last} is beyond what this session can have sent (${base} held, ${fresh.length} new, ${unseen} dropped and not yet seen)`,
      );
    }
  }

  /** Samples from the sidecar's own GPU collector. */
  gpuSamples(samples: GpuSample[]): Promise<void> {
    return this.record({ t: 'gpu', at: this.now(), samples });
  }

  hostSample(sample: HostSample): Promise<void> {
    return this.record({ t: 'host', at: this.now(), sample });
  }

  connected(session: string): Promise<void> {
    return this.record({ t: 'connect', at: this.now(), session });
  }

  /** `silent`: the sidecar closed it because nothing came from it for the idle timeout. */
  disconnected(session: string, reason: 'silent' | null = null): Promise<void> {
    this.logged.delete(session);
    return this.record({ t: 'disconnect', at: this.now(), session, ...(reason ? { reason } : {}) });
  }

  /** What `welcome` offers a hook that offered heartbeats and stack captures in its hello. */
  offers(hello: Hello): Pick<Welcome, 'heartbeat_ms' | 'capture'> {
    return {
      ...(hello.heartbeat_ms !== undefined ? { heartbeat_ms: hello.heartbeat_ms } : {}),
      ...(hello.capture === true ? { capture: { deep: this.deepCaptures } } : {}),
    };
  }

  attach(session: string, connection: OpenConnection): void {
    this.open.set(session, connection);
  }

  detach(session: string, connection: OpenConnection): void {
    if (this.open.get(session) === connection) this.open.delete(session);
  }

  /** Asks the session's hook for its stack; false where it has no open connection. */
  requestCapture(session: string, id: number): boolean {
    const connection = this.open.get(session);
    if (!connection) return false;
    connection.requestCapture(id);
    return true;
  }

  /** Asks the session's hook for a profiler window: whether it could be asked (connected, and it offers them). */
  requestProfile(session: string, request: ProfileRequest): 'sent' | 'not-connected' | 'not-offered' {
    const connection = this.open.get(session);
    if (!connection) return 'not-connected';
    return connection.requestProfile(request) ? 'sent' : 'not-offered';
  }

  /** A chunk of a profiler window: not journaled (the trace is a file beside the journal). */
  profile(hello: Hello, frame: ProfileFrame): void {
    this.onProfile?.(hello, frame);
  }

  /** A heartbeat: the process is alive and its hook's thread runs. */
  beat(session: string): Promise<void> {
    return this.record({ t: 'beat', at: this.now(), session });
  }

  /** A stack capture, its times placed on the sidecar's clock through the session's latest hello. */
  async stack(session: string, frame: StackFrame): Promise<void> {
    const range = this.admission.seqRange(session);
    const at = this.now();
    const toMs = (monoNs: number) => (range ? toSidecarMs(range, monoNs) : at);
    const capture = captureOf(frame, toMs);
    // A capture the rank's clock could not have taken is kept at the time it came.
    if (!plausibleAt(capture.at, at)) capture.at = at;
    await this.record({ t: 'stack', at, session, capture });
  }

  /** The rank's process as read in /proc. */
  proc(session: string, reading: ProcReading): Promise<void> {
    return this.record({ t: 'proc', at: this.now(), session, reading });
  }

  rejected(code: number): void {
    this.stats.rejected[code] = (this.stats.rejected[code] ?? 0) + 1;
  }

  private async record(entry: JournalEntry): Promise<void> {
    await this.recorder.record(entry);
  }
}
