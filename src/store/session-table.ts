import type { Env, Hello, StepRecord } from '../protocol/messages.js';
import { ENV_LIMITS } from '../protocol/hook-schema.js';
import { envBytes } from '../protocol/messages.js';
import { secretMatches } from '../protocol/session-secret.js';
import { admitRows, EnvTooLargeError, LimitError, type AdmissionLimits, type AdmissionPort, type HelloRefusal, type SeqRange } from './admission.js';
import type { Capture, ProcReading } from '../protocol/capture.js';
import type { EndReason, Job, Rank, Session } from './job-records.js';
import { describeJob, type JobSnapshot } from './job-snapshot.js';
import type { JobsCheckpoint } from './jobs-checkpoint.js';
import { dumpHistory, loadHistory, newRank, type HeldSessions, type TakenRows } from './rank-history.js';

export interface TableOptions {
  /** Step records kept per rank for recent step times. */
  recentSteps?: number;
  /** Sessions (processes) kept per rank; older ones are folded into the rank's counts. */
  sessionsPerRank?: number;
  /**
   * Jobs and ranks per job kept: the ingest refuses a hello past them before logging it (asking
   * `refusal`), and a journal replayed with more (written with higher limits, or forged) cannot fill the heap.
   */
  limits?: AdmissionLimits | null;
}

/**
 * A job with nobody connected that has ended (its summary is written) or never sent a step (a hello
 * and nothing more): it can make room for a new job, so silent job names cannot keep a real job out.
 */
const evictable = (job: Job) => job.connections === 0 && (job.endedAt !== null || job.firstStepAt === null);
/** When a job stopped mattering, for evicting the oldest first. */
const staleSince = (job: Job) => job.endedAt ?? job.disconnectedSince ?? job.helloAt;

export class UnknownSessionError extends Error {}

/** A hello for a session id that another job or rank holds, or without the session's resume secret. */
export class SessionConflictError extends Error {}

export interface HelloResult {
  ack: number;
  resumed: boolean;
}

/** Whether a session held is bound to another job or rank than this hello's. */
const boundElsewhere = (session: Session, hello: Hello) => session.job.id !== hello.job || session.rank.rank !== hello.rank;

/**
 * The jobs that report to the sidecar, their ranks and each rank's processes (sessions): who is
 * bound to what, connected, heard from and ended, and how far each session's seqs go. It answers
 * the ingest's admission questions (AdmissionPort) by the rules it applies entries by. Pure: every
 * method takes the sidecar-clock time (`at`, ms since the epoch) it should use, so a journal
 * replays into exactly the same state.
 */
export class SessionTable implements AdmissionPort, HeldSessions {
  private readonly jobs = new Map<string, Job>();
  private readonly sessions = new Map<string, Session>();
  private readonly limits: AdmissionLimits;
  private readonly recentSteps: number;
  private readonly sessionsPerRank: number;

  constructor(options: TableOptions = {}) {
    this.recentSteps = options.recentSteps ?? 256;
    this.sessionsPerRank = options.sessionsPerRank ?? 16;
    this.limits = options.limits ?? { maxJobs: Number.POSITIVE_INFINITY, maxRanksPerJob: Number.POSITIVE_INFINITY };
  }

  refusal(hello: Hello): HelloRefusal | null {
    const limit = this.limitPassed(hello);
    if (limit === 'jobs') return { limit, reason: `too many jobs: this sidecar takes ${this.limits.maxJobs}` };
    if (limit === 'ranks') return { limit, reason: `too many ranks: a job may have ${this.limits.maxRanksPerJob}` };
    return null;
  }

  /**
   * The one rule for the limits, asked by the ingest before it journals a hello and applied to the
   * hello entry: a new job when the jobs held are at the limit and none can make room, or a new rank
   * of the run the hello joins when it has as many as a job may.
   */
  private limitPassed(hello: Hello): 'jobs' | 'ranks' | null {
    if (!this.jobs.has(hello.job) && this.jobs.size >= this.limits.maxJobs && ![...this.jobs.values()].some(evictable)) return 'jobs';
    const ranks = this.runJoined(hello)?.ranks;
    if (!ranks?.has(hello.rank) && (ranks?.size ?? 0) >= this.limits.maxRanksPerJob) return 'ranks';
    return null;
  }

  /** The run a hello joins: the job's current one, unless it ended and the hello's session is not of it (a new run replaces it). */
  private runJoined(hello: Hello): Job | null {
    const job = this.jobs.get(hello.job);
    if (job && job.endedAt !== null && this.sessions.get(hello.session)?.job !== job) return null;
    return job ?? null;
  }

  /**
   * Why this hello may not take its session, or null: a session id stays bound to the job and rank
   * that first used it, and only a hook that presents the secret handed out for it may resume it.
   * `resume` is what the hello presented (null: none). A session journaled before secrets existed
   * has none to present: only its own process (the same pid on the same host) may go on with it,
   * under a new secret; anyone else who knows its id is refused.
   */
  sessionConflict(hello: Hello, resume: string | null): string | null {
    const session = this.sessions.get(hello.session);
    if (!session) return null;
    if (boundElsewhere(session, hello)) {
      return `session ${hello.session} belongs to another job or rank: each process needs its own session id`;
    }
    if (session.secret === null && (session.pid !== hello.pid || session.host !== hello.host)) {
      return `session ${hello.session} was journaled before resume secrets and is held by another process: each process needs its own session id`;
    }
    if (session.secret !== null && !secretMatches(session.secret, resume)) {
      return `session ${hello.session} is already held: resuming it needs the secret its welcome handed out`;
    }
    return null;
  }

  /** The secret of a known session (null for an unknown one, or one journaled before secrets). */
  secretOf(sessionId: string): string | null {
    return this.sessions.get(sessionId)?.secret ?? null;
  }

  /**
   * `secret` is the session's resume secret: minted by the ingest for a new session, the held one
   * for a resumed session (both journaled with the hello, so a replay binds sessions the same way).
   */
  hello(hello: Hello, at: number, secret: string | null = null): HelloResult {
    const held = this.sessions.get(hello.session);
    if (held && boundElsewhere(held, hello)) throw new SessionConflictError(`session ${hello.session} belongs to another job or rank`);
    const limit = this.limitPassed(hello);
    if (limit) throw new LimitError(limit);
    const job = this.jobFor(hello, at);
    let session = this.sessions.get(hello.session);
    if (session && session.job !== job) session = undefined;
    const resumed = session !== undefined;
    if (!session) {
      const rank = this.rankFor(job, hello);
      session = {
        id: hello.session,
        job,
        rank,
        pid: hello.pid,
        host: hello.host,
        maxSeq: 0,
        dropped: 0,
        duplicates: 0,
        connections: 0,
        ended: false,
        clockOffsetMs: 0,
        helloAt: at,
        monoAtHello: 0,
        secret,
        seqBase: hello.acked ?? 0,
        refused: 0,
        skipped: 0,
        heardAt: at,
        heartbeatMs: null,
        captures: false,
        procStart: null,
        disconnectedAt: null,
        disconnectReason: null,
      };
      this.sessions.set(session.id, session);
      rank.sessions.push(session);
      // The new session is the rank's latest before old ones are forgotten, so it is never one of them.
      rank.latest = session;
      this.forgetOldSessions(rank);
    }
    session.ended = false;
    session.heartbeatMs = hello.heartbeat_ms ?? null;
    session.captures = hello.capture === true;
    session.procStart = hello.proc_start ?? null;
    session.disconnectedAt = null;
    session.disconnectReason = null;
    this.heard(session, at);
    session.clockOffsetMs = at - hello.clock.wall_ms;
    session.helloAt = at;
    session.monoAtHello = hello.clock.mono_ns;
    if (session.secret === null) session.secret = secret;
    // A hello carries the hook's whole env: it replaces the rank's, so repeated hellos cannot grow it.
    session.rank.env = { ...hello.env };
    if (job.endedAt !== null) {
      job.endedAt = null;
      job.endReason = null;
    }
    return { ack: session.maxSeq, resumed };
  }

  /** The rank's env with `update` merged in, or an EnvTooLargeError when that would pass the rank's bound. */
  mergedEnv(sessionId: string, update: Env): Env {
    const merged = { ...this.session(sessionId).rank.env, ...update };
    if (Object.keys(merged).length > ENV_LIMITS.entries || envBytes(merged) > ENV_LIMITS.rankBytes) {
      throw new EnvTooLargeError(`env: the rank's env would pass ${ENV_LIMITS.entries} keys or ${ENV_LIMITS.rankBytes} bytes`);
    }
    return merged;
  }

  env(sessionId: string, env: Env, at?: number): void {
    const session = this.session(sessionId);
    session.rank.env = this.mergedEnv(sessionId, env);
    if (at !== undefined) this.heard(session, at);
  }

  /** A frame came from the session (its process is alive, its sender thread runs). */
  beat(sessionId: string, at: number): void {
    this.heard(this.session(sessionId), at);
  }

  /** Where the rank was, as its hook answered a `capture` request. */
  stack(sessionId: string, capture: Capture, at: number): void {
    const session = this.session(sessionId);
    this.heard(session, at);
    session.rank.capture = capture;
  }

  /** The rank's process as read in /proc. */
  proc(sessionId: string, reading: ProcReading, at: number): void {
    this.session(sessionId).rank.proc = { ...reading, at };
  }

  private heard(session: Session, at: number): void {
    session.heardAt = Math.max(session.heardAt ?? at, at);
    session.job.lastHeardAt = Math.max(session.job.lastHeardAt ?? at, at);
  }

  /**
   * Counts a frame's rows against the session's seqs by the admission rule (src/store/admission.ts),
   * and gives the rows its rank keeps. `refused`: rows the ingest left out for implausible times,
   * up to seq `through`, which the acknowledgement covers all the same.
   */
  takeRows(sessionId: string, records: readonly StepRecord[], dropped: number, at: number, duplicatesSeen: number, refused: { count: number; through: number } | null): TakenRows {
    const session = this.session(sessionId);
    const from = Math.max(session.maxSeq, session.seqBase);
    // Rows ascend (a journal's are checked before they come here): the last new one is the highest.
    const admitted = admitRows(session, session.maxSeq, records, at);
    let taken = 0;
    for (const record of admitted.fresh) if (record.seq > from) taken++;
    session.maxSeq = Math.max(session.maxSeq, admitted.fresh.at(-1)?.seq ?? 0);
    // A journal written before the ingest left these out may hold them.
    session.refused += admitted.refused?.count ?? 0;
    this.heard(session, at);
    if (refused) {
      session.refused += refused.count;
      session.maxSeq = Math.max(session.maxSeq, refused.through);
    }
    const duplicates = duplicatesSeen + admitted.duplicates;
    session.duplicates += duplicates;
    session.dropped = Math.max(session.dropped, dropped);
    // The refused records lie between the rows; what is neither held nor refused was passed over.
    session.skipped += Math.max(0, session.maxSeq - from - taken - (refused?.count ?? 0));
    return { session, kept: admitted.kept, duplicates };
  }

  /**
   * What bounds the seqs a session may send next: the hook counts every record it makes, so past the
   * highest seq held (or what the hook said was acknowledged) only the records sent and those it
   * says it dropped can lie. Null for an unknown session.
   */
  seqRange(sessionId: string): SeqRange | null {
    const session = this.sessions.get(sessionId);
    if (!session) return null;
    return { base: Math.max(session.maxSeq, session.seqBase), skipped: session.skipped, helloAt: session.helloAt, monoAtHello: session.monoAtHello };
  }

  /** Highest sequence number held for the session (0 for one not known). */
  ack(sessionId: string): number {
    return this.sessions.get(sessionId)?.maxSeq ?? 0;
  }

  /** Whether a hello with this session would resume it (the same job's current run has it). */
  hasSession(sessionId: string, jobId: string): boolean {
    const session = this.sessions.get(sessionId);
    return session !== undefined && session.job.id === jobId;
  }

  end(sessionId: string, at?: number): void {
    const session = this.session(sessionId);
    session.ended = true;
    if (at !== undefined) this.heard(session, at);
  }

  /** After a replay nobody is connected yet: the end grace period starts from `at`. */
  restarted(at: number): void {
    for (const job of this.jobs.values()) {
      job.connections = 0;
      job.disconnectedSince = at;
    }
    for (const session of this.sessions.values()) {
      // Not the hook's doing: it reconnects within seconds, and one that does not is gone from here.
      if (session.connections > 0 && !session.ended) {
        session.disconnectedAt = at;
        session.disconnectReason = 'restart';
      }
      session.connections = 0;
    }
  }

  connected(sessionId: string): void {
    const session = this.session(sessionId);
    session.connections += 1;
    session.disconnectedAt = null;
    session.disconnectReason = null;
    session.job.connections += 1;
    session.job.disconnectedSince = null;
  }

  disconnected(sessionId: string, at: number, reason: 'silent' | null = null): void {
    const session = this.session(sessionId);
    session.connections = Math.max(0, session.connections - 1);
    if (session.connections === 0 && !session.ended) {
      session.disconnectedAt = at;
      session.disconnectReason = reason ?? 'closed';
      // Its process was there until its connection closed; a silent one was last heard before.
      if (reason === null) this.heard(session, at);
    }
    session.job.connections = Math.max(0, session.job.connections - 1);
    if (session.job.connections === 0) session.job.disconnectedSince = at;
  }

  /** Marks jobs that have ended at `at`; returns the ids of those that ended now. */
  settle(at: number, graceMs: number): string[] {
    const endedNow: string[] = [];
    for (const job of this.jobs.values()) {
      if (job.endedAt !== null) continue;
      const reason = this.endReason(job, at, graceMs);
      if (reason) {
        job.endedAt = at;
        job.endReason = reason;
        endedNow.push(job.id);
      }
    }
    return endedNow;
  }

  /** Ends every open job, as when the sidecar stops. */
  endAll(at: number): string[] {
    const endedNow: string[] = [];
    for (const job of this.jobs.values()) {
      if (job.endedAt !== null) continue;
      job.endedAt = at;
      job.endReason = 'shutdown';
      endedNow.push(job.id);
    }
    return endedNow;
  }

  get jobCount(): number {
    return this.jobs.size;
  }

  /**
   * Forgets the job that ended first and has no connection left, to make room; its summary is
   * already written. Returns its id.
   */
  private evictEndedJob(): string | null {
    let oldest: Job | null = null;
    for (const job of this.jobs.values()) {
      if (evictable(job) && (!oldest || staleSince(job) < staleSince(oldest))) oldest = job;
    }
    if (!oldest) return null;
    this.forgetJob(oldest);
    return oldest.id;
  }

  /** A rank's latest process: its session, pid, host and start time. */
  sessionOf(jobId: string, rank: number): { id: string; pid: number; host: string; procStart: number | null } | null {
    const latest = this.jobs.get(jobId)?.ranks.get(rank)?.latest;
    return latest ? { id: latest.id, pid: latest.pid, host: latest.host, procStart: latest.procStart } : null;
  }

  /** A rank's latest /proc reading, as the state shows it. */
  procOf(jobId: string, rank: number): (ProcReading & { at: number }) | null {
    return this.jobs.get(jobId)?.ranks.get(rank)?.proc ?? null;
  }

  /** The job's current run as held, for the engine's own reading. */
  job(jobId: string): Readonly<Job> | null {
    return this.jobs.get(jobId) ?? null;
  }

  hasJob(job: string): boolean {
    return this.jobs.has(job);
  }

  /**
   * One job as of `at`, or null if unknown. `throughSilence`: an ended run that had stopped stepping
   * (it hung, or lost a rank) lasts until it was last heard from, not only to its last step.
   */
  jobSnapshot(jobId: string, at: number, throughSilence = false): JobSnapshot | null {
    const job = this.jobs.get(jobId);
    return job ? describeJob(job, at, throughSilence) : null;
  }

  /** Whether a rank of a running job sent steps in the `withinMs` up to `since` and none after: its next frame is likely on the way. */
  stepsAwaited(since: number, withinMs: number): boolean {
    for (const job of this.jobs.values()) {
      if (job.endedAt !== null) continue;
      for (const rank of job.ranks.values()) {
        const at = rank.lastStepAt;
        if (at !== null && at <= since && at > since - withinMs) return true;
      }
    }
    return false;
  }

  /** Jobs still running. */
  liveJobs(): string[] {
    return [...this.jobs.values()].filter((job) => job.endedAt === null).map((job) => job.id);
  }

  /** The run of a job now held (a new run of an ended job replaces it), or null if unknown. */
  runOf(jobId: string): number | null {
    return this.jobs.get(jobId)?.run ?? null;
  }

  /** Ended runs whose summary files are not yet written. */
  unsummarized(): string[] {
    return [...this.jobs.values()].filter((job) => job.endedAt !== null && !job.summarized).map((job) => job.id);
  }

  summarized(jobId: string, run: number): void {
    const job = this.jobs.get(jobId);
    if (job && job.run === run) job.summarized = true;
  }

  snapshot(at: number, throughSilence: (jobId: string) => boolean = () => false): JobSnapshot[] {
    return [...this.jobs.values()].map((job) => describeJob(job, at, throughSilence(job.id)));
  }

  private endReason(job: Job, at: number, graceMs: number): EndReason | null {
    const everyRankSeen = job.ranks.size >= job.worldSize;
    const everyRankEnded = [...job.ranks.values()].every((rank) => rank.latest.ended);
    if (everyRankSeen && everyRankEnded) return 'all-ranks-ended';
    if (job.connections === 0 && job.disconnectedSince !== null && at - job.disconnectedSince >= graceMs) {
      return 'disconnected';
    }
    return null;
  }

  /**
   * A crash-looping rank starts a new session with every restart: keep the newest few, folding what
   * the others counted into the rank. A forgotten session that reconnects starts over at seq 0 and
   * its resent records count again, which only a process dead for dozens of restarts can do.
   */
  private forgetOldSessions(rank: Rank): void {
    while (rank.sessions.length > this.sessionsPerRank) {
      const index = rank.sessions.findIndex((session) => session.connections === 0 && session !== rank.latest);
      if (index < 0) return;
      const [old] = rank.sessions.splice(index, 1);
      rank.forgotten.sessions += 1;
      rank.forgotten.dropped += old!.dropped;
      rank.forgotten.duplicates += old!.duplicates;
      this.sessions.delete(old!.id);
    }
  }

  /** Every job held, or one. */
  *jobsOf(jobId?: string): Iterable<Job> {
    if (jobId === undefined) yield* this.jobs.values();
    else {
      const job = this.jobs.get(jobId);
      if (job) yield job;
    }
  }

  /** Everything the table holds, as plain data, for a checkpoint. */
  dump(): JobsCheckpoint {
    return [...this.jobs.values()].map((job) => ({
      ...job,
      ranks: [...job.ranks.values()].map((rank) => ({
        ...rank,
        latest: rank.latest.id,
        sessions: rank.sessions.map(({ job: _job, rank: _rank, ...session }) => session),
        ...dumpHistory(rank),
      })),
    }));
  }

  /** A table holding what `dump` gave; throws where a rank's latest session is not among its sessions. */
  static load(dump: JobsCheckpoint, options: TableOptions = {}): SessionTable {
    const store = new SessionTable(options);
    for (const { ranks, ...fields } of dump) {
      const job: Job = { ...fields, ranks: new Map() };
      for (const { latest, sessions, ...held } of ranks) {
        const rank: Rank = {
          ...held,
          latest: undefined as unknown as Session,
          sessions: [],
          ...loadHistory(held, store.recentSteps),
        };
        for (const session of sessions) {
          const loaded: Session = { ...session, job, rank };
          rank.sessions.push(loaded);
          store.sessions.set(loaded.id, loaded);
        }
        const found = rank.sessions.find((session) => session.id === latest);
        if (!found) throw new Error(`job ${job.id} rank ${rank.rank}: its latest session ${latest} is not among its sessions`);
        rank.latest = found;
        job.ranks.set(rank.rank, rank);
      }
      store.jobs.set(job.id, job);
    }
    return store;
  }

  session(sessionId: string): Session {
    const session = this.sessions.get(sessionId);
    if (!session) throw new UnknownSessionError(`unknown session ${sessionId}`);
    return session;
  }

  /**
   * The job's current run; a hello from a process the run never had, after the run ended, starts a
   * new run of the same name, which replaces the ended one (its summary is written and kept).
   */
  private jobFor(hello: Hello, at: number): Job {
    let job = this.jobs.get(hello.job);
    if (job && this.runJoined(hello) === null) {
      this.forgetJob(job);
      job = this.newJob(hello, at, job.run + 1);
    }
    if (!job) {
      // Room for a new job: the oldest ended one is forgotten (its summary is written).
      if (this.jobs.size >= this.limits.maxJobs) this.evictEndedJob();
      job = this.newJob(hello, at, 1);
    }
    job.worldSize = Math.max(job.worldSize, hello.world_size);
    return job;
  }

  private forgetJob(job: Job): void {
    this.jobs.delete(job.id);
    for (const [id, session] of this.sessions) if (session.job === job) this.sessions.delete(id);
  }

  private newJob(hello: Hello, at: number, run: number): Job {
    const job: Job = {
      id: hello.job,
      run,
      worldSize: hello.world_size,
      helloAt: at,
      firstStepAt: null,
      summarized: false,
      ranks: new Map(),
      connections: 0,
      disconnectedSince: at,
      endedAt: null,
      endReason: null,
      lastHeardAt: null,
    };
    this.jobs.set(job.id, job);
    return job;
  }

  private rankFor(job: Job, hello: Hello): Rank {
    let rank = job.ranks.get(hello.rank);
    if (!rank) {
      // Its latest session is set as soon as the hello's session is made, before anything reads it.
      rank = { ...newRank(hello, this.recentSteps), latest: undefined as unknown as Session };
      job.ranks.set(hello.rank, rank);
    }
    rank.localRank = hello.local_rank;
    return rank;
  }
}
