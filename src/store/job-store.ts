import type { ProcessAt } from '../analysis/window.js';
import type { CounterBatch, NvmlSample } from '../protocol/counters.js';
import type { Env, Hello, StepRecord } from '../protocol/messages.js';
import { emptyGpuSample, type GpuSample } from '../counters/types.js';
import { LogHistogram } from './histogram.js';
import { percentile, Ring } from './ring.js';
import { addStep, emptySums, StepBuckets, type StepSums } from './step-buckets.js';

/**
 * What the sidecar knows about the jobs that report to it. Pure: every method takes the
 * sidecar-clock time (`at`, ms since the epoch) it should use, so a journal replays into
 * exactly the same state.
 */

export type EndReason = 'all-ranks-ended' | 'disconnected' | 'shutdown';

interface Session {
  id: string;
  job: Job;
  rank: Rank;
  pid: number;
  host: string;
  maxSeq: number;
  dropped: number;
  duplicates: number;
  connections: number;
  ended: boolean;
  /** Sidecar clock minus hook wall clock, measured when hello arrived (includes transit). */
  clockOffsetMs: number;
  /** Sidecar time and hook monotonic time at the latest hello: maps hook times onto the sidecar's clock. */
  helloAt: number;
  monoAtHello: number;
}

/** A step record placed on the sidecar's clock. */
export interface TimedStep {
  record: StepRecord;
  endAt: number;
}

interface Rank {
  rank: number;
  localRank: number;
  latest: Session;
  sessions: Session[];
  env: Env;
  steps: number;
  lastStep: number;
  lastStepAt: number | null;
  /** Sidecar-clock end of the newest step. */
  lastStepEndAt: number | null;
  totals: StepSums;
  recent: Ring<TimedStep>;
  buckets: StepBuckets;
  histogram: LogHistogram;
  process: Ring<ProcessAt>;
}

/** Read-only access to one rank's recent history, for windows and verdicts. */
export interface RankView {
  job: string;
  rank: number;
  localRank: number;
  env: Env;
  buckets: StepBuckets;
  histogram: LogHistogram;
  totals: StepSums;
  steps(): number;
  lastStepEndAt(): number | null;
  recent(): TimedStep[];
  process(): ProcessAt[];
}

interface Job {
  id: string;
  worldSize: number;
  startedAt: number;
  ranks: Map<number, Rank>;
  connections: number;
  disconnectedSince: number | null;
  endedAt: number | null;
  endReason: EndReason | null;
}

export interface HelloResult {
  ack: number;
  resumed: boolean;
}

export interface StepsResult {
  accepted: StepRecord[];
  duplicates: number;
  ack: number;
}

export interface StoreOptions {
  /** Step records kept per rank for recent step times. */
  recentSteps?: number;
}

export class UnknownSessionError extends Error {}

export class JobStore {
  private readonly jobs = new Map<string, Job>();
  private readonly sessions = new Map<string, Session>();
  private readonly recentSteps: number;

  constructor(options: StoreOptions = {}) {
    this.recentSteps = options.recentSteps ?? 256;
  }

  hello(hello: Hello, at: number): HelloResult {
    const job = this.jobFor(hello, at);
    let session = this.sessions.get(hello.session);
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
      };
      this.sessions.set(session.id, session);
      rank.sessions.push(session);
      rank.latest = session;
    }
    session.ended = false;
    session.clockOffsetMs = at - hello.clock.wall_ms;
    session.helloAt = at;
    session.monoAtHello = hello.clock.mono_ns;
    Object.assign(session.rank.env, hello.env);
    if (job.endedAt !== null) {
      job.endedAt = null;
      job.endReason = null;
    }
    return { ack: session.maxSeq, resumed };
  }

  env(sessionId: string, env: Env): void {
    Object.assign(this.session(sessionId).rank.env, env);
  }

  /** Adds the records not seen before; records at or below the session's highest seq are duplicates. */
  steps(sessionId: string, records: readonly StepRecord[], dropped: number, at: number): StepsResult {
    const session = this.session(sessionId);
    const rank = session.rank;
    const accepted: StepRecord[] = [];
    let duplicates = 0;
    for (const record of records) {
      if (record.seq <= session.maxSeq) {
        duplicates += 1;
        continue;
      }
      session.maxSeq = record.seq;
      accepted.push(record);
      addStep(rank.totals, record);
      const endAt = toSidecarMs(session, record.endNs);
      rank.recent.push({ record, endAt });
      rank.buckets.add(record, endAt);
      rank.histogram.add(record.durNs / 1e6);
      rank.lastStepEndAt = Math.max(rank.lastStepEndAt ?? endAt, endAt);
      rank.steps += 1;
      rank.lastStep = record.step;
    }
    if (accepted.length > 0) rank.lastStepAt = at;
    session.duplicates += duplicates;
    session.dropped = Math.max(session.dropped, dropped);
    return { accepted, duplicates, ack: session.maxSeq };
  }

  /**
   * Keeps the process counters on the rank; returns forwarded NVML samples as GPU samples, both
   * placed on the sidecar's clock.
   */
  counters(sessionId: string, batch: CounterBatch): GpuSample[] {
    const session = this.session(sessionId);
    if (batch.source === 'process') {
      for (const sample of batch.samples) session.rank.process.push({ ...sample, at: toSidecarMs(session, sample.at_ns) });
      return [];
    }
    return batch.samples.map((sample) => nvmlToGpuSample(sample, toSidecarMs(session, sample.at_ns)));
  }

  /** Every rank's view, or one job's. */
  rankViews(jobId?: string): RankView[] {
    const views: RankView[] = [];
    const jobs = jobId === undefined ? [...this.jobs.values()] : [this.jobs.get(jobId)].filter((job) => job !== undefined);
    for (const job of jobs) {
      for (const rank of job.ranks.values()) {
        views.push({
          job: job.id,
          rank: rank.rank,
          localRank: rank.localRank,
          env: rank.env,
          buckets: rank.buckets,
          histogram: rank.histogram,
          totals: rank.totals,
          steps: () => rank.steps,
          lastStepEndAt: () => rank.lastStepEndAt,
          recent: () => rank.recent.toArray(),
          process: () => rank.process.toArray(),
        });
      }
    }
    return views;
  }

  /** Highest sequence number held for the session. */
  ack(sessionId: string): number {
    return this.session(sessionId).maxSeq;
  }

  end(sessionId: string): void {
    this.session(sessionId).ended = true;
  }

  /** After a replay nobody is connected yet: the end grace period starts from `at`. */
  restarted(at: number): void {
    for (const job of this.jobs.values()) {
      job.connections = 0;
      job.disconnectedSince = at;
    }
    for (const session of this.sessions.values()) session.connections = 0;
  }

  connected(sessionId: string): void {
    const session = this.session(sessionId);
    session.connections += 1;
    session.job.connections += 1;
    session.job.disconnectedSince = null;
  }

  disconnected(sessionId: string, at: number): void {
    const session = this.session(sessionId);
    session.connections = Math.max(0, session.connections - 1);
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
  evictEndedJob(): string | null {
    let oldest: Job | null = null;
    for (const job of this.jobs.values()) {
      if (job.endedAt !== null && job.connections === 0 && (!oldest || job.endedAt < oldest.endedAt!)) oldest = job;
    }
    if (!oldest) return null;
    this.jobs.delete(oldest.id);
    for (const [id, session] of this.sessions) if (session.job === oldest) this.sessions.delete(id);
    return oldest.id;
  }

  hasJob(job: string): boolean {
    return this.jobs.has(job);
  }

  hasRank(job: string, rank: number): boolean {
    return this.jobs.get(job)?.ranks.has(rank) ?? false;
  }

  rankCount(job: string): number {
    return this.jobs.get(job)?.ranks.size ?? 0;
  }

  allEnded(): boolean {
    return this.jobs.size > 0 && [...this.jobs.values()].every((job) => job.endedAt !== null);
  }

  /** One job as of `at`, or null if unknown. */
  jobSnapshot(jobId: string, at: number): JobSnapshot | null {
    const job = this.jobs.get(jobId);
    return job ? this.describeJob(job, at) : null;
  }

  /** Jobs still running, with when they started. */
  liveJobs(): Array<{ job: string; startedAt: number }> {
    return [...this.jobs.values()].filter((job) => job.endedAt === null).map((job) => ({ job: job.id, startedAt: job.startedAt }));
  }

  startedAt(jobId: string): number | null {
    return this.jobs.get(jobId)?.startedAt ?? null;
  }

  snapshot(at: number): JobSnapshot[] {
    return [...this.jobs.values()].map((job) => this.describeJob(job, at));
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

  private session(sessionId: string): Session {
    const session = this.sessions.get(sessionId);
    if (!session) throw new UnknownSessionError(`unknown session ${sessionId}`);
    return session;
  }

  private jobFor(hello: Hello, at: number): Job {
    let job = this.jobs.get(hello.job);
    if (!job) {
      job = {
        id: hello.job,
        worldSize: hello.world_size,
        startedAt: at,
        ranks: new Map(),
        connections: 0,
        disconnectedSince: at,
        endedAt: null,
        endReason: null,
      };
      this.jobs.set(job.id, job);
    }
    job.worldSize = Math.max(job.worldSize, hello.world_size);
    return job;
  }

  private rankFor(job: Job, hello: Hello): Rank {
    let rank = job.ranks.get(hello.rank);
    if (!rank) {
      rank = {
        rank: hello.rank,
        localRank: hello.local_rank,
        latest: undefined as unknown as Session,
        sessions: [],
        env: {},
        steps: 0,
        lastStep: -1,
        lastStepAt: null,
        lastStepEndAt: null,
        totals: emptySums(),
        recent: new Ring(this.recentSteps),
        buckets: new StepBuckets(),
        histogram: new LogHistogram(),
        process: new Ring(120),
      };
      job.ranks.set(hello.rank, rank);
    }
    rank.localRank = hello.local_rank;
    return rank;
  }

  private describeJob(job: Job, at: number): JobSnapshot {
    const ranks = [...job.ranks.values()].sort((a, b) => a.rank - b.rank).map((rank) => rankSnapshot(rank));
    const sum = (pick: (r: RankSnapshot) => number) => ranks.reduce((total, r) => total + pick(r), 0);
    return {
      job: job.id,
      world_size: job.worldSize,
      started_at: new Date(job.startedAt).toISOString(),
      duration_s: ((job.endedAt ?? at) - job.startedAt) / 1000,
      connected: job.connections > 0,
      ended: job.endedAt !== null,
      end_reason: job.endReason,
      steps: sum((r) => r.steps),
      dropped: sum((r) => r.dropped),
      duplicates: sum((r) => r.duplicates),
      ranks,
    };
  }
}

export interface Breakdown {
  data: number;
  h2d: number;
  compute: number;
  other: number;
}

export interface RankSnapshot {
  rank: number;
  local_rank: number;
  host: string;
  pid: number;
  sessions: number;
  connected: boolean;
  ended: boolean;
  steps: number;
  last_step: number;
  last_step_at: string | null;
  dropped: number;
  duplicates: number;
  samples: number;
  clock_offset_ms: number;
  phase_s: Breakdown;
  breakdown: Breakdown;
  gpu_phase_s: { timed_steps: number; h2d: number; compute: number; idle_steps: number; idle: number };
  step_ms: { last: number | null; mean: number | null; p50: number | null; p90: number | null };
  recent_step_ms: number[];
  env: Env;
}

export interface JobSnapshot {
  job: string;
  world_size: number;
  started_at: string;
  duration_s: number;
  connected: boolean;
  ended: boolean;
  end_reason: EndReason | null;
  steps: number;
  dropped: number;
  duplicates: number;
  ranks: RankSnapshot[];
}

const seconds = (ns: number) => ns / 1e9;
const ms = (ns: number) => Math.round(ns / 1e3) / 1e3;
const finiteOrNull = (value: number) => (Number.isFinite(value) ? value : null);

export function breakdownOf(totals: StepSums): Breakdown {
  const total = totals.dataNs + totals.h2dNs + totals.computeNs + totals.otherNs;
  const share = (ns: number) => (total > 0 ? ns / total : 0);
  return {
    data: share(totals.dataNs),
    h2d: share(totals.h2dNs),
    compute: share(totals.computeNs),
    other: share(totals.otherNs),
  };
}

function nvmlToGpuSample(s: NvmlSample, at: number): GpuSample {
  return {
    ...emptyGpuSample(at, s.index ?? 0),
    uuid: s.uuid,
    name: s.name,
    utilGpu: s.util_gpu,
    utilMem: s.util_mem,
    memUsedMiB: s.mem_used_mib,
    memTotalMiB: s.mem_total_mib,
    tempC: s.temp_c,
    powerW: s.power_w,
    powerLimitW: s.power_limit_w,
    smClockMHz: s.sm_clock_mhz,
    smClockMaxMHz: s.sm_clock_max_mhz,
    memClockMHz: s.mem_clock_mhz,
    pstate: s.pstate,
    throttleReasons: s.throttle_reasons,
  };
}

/** Hook monotonic ns -> sidecar clock ms, through the latest hello's pair of readings. */
function toSidecarMs(session: Session, monoNs: number): number {
  return session.helloAt + (monoNs - session.monoAtHello) / 1e6;
}

function rankSnapshot(rank: Rank): RankSnapshot {
  const recent = rank.recent.toArray();
  const stepMs = recent.map((step) => ms(step.record.durNs));
  const sorted = stepMs.slice().sort((a, b) => a - b);
  const totals = rank.totals;
  return {
    rank: rank.rank,
    local_rank: rank.localRank,
    host: rank.latest.host,
    pid: rank.latest.pid,
    sessions: rank.sessions.length,
    connected: rank.sessions.some((session) => session.connections > 0),
    ended: rank.latest.ended,
    steps: rank.steps,
    last_step: rank.lastStep,
    last_step_at: rank.lastStepAt === null ? null : new Date(rank.lastStepAt).toISOString(),
    dropped: rank.sessions.reduce((total, session) => total + session.dropped, 0),
    duplicates: rank.sessions.reduce((total, session) => total + session.duplicates, 0),
    samples: totals.samples,
    clock_offset_ms: Math.round(rank.latest.clockOffsetMs * 1000) / 1000,
    phase_s: {
      data: seconds(totals.dataNs),
      h2d: seconds(totals.h2dNs),
      compute: seconds(totals.computeNs),
      other: seconds(totals.otherNs),
    },
    breakdown: breakdownOf(totals),
    gpu_phase_s: {
      timed_steps: totals.gpuTimedSteps,
      h2d: seconds(totals.gpuH2dNs),
      compute: seconds(totals.gpuComputeNs),
      idle_steps: totals.gpuIdleSteps,
      idle: seconds(totals.gpuIdleNs),
    },
    step_ms: {
      last: stepMs.at(-1) ?? null,
      mean: finiteOrNull(stepMs.reduce((a, b) => a + b, 0) / stepMs.length),
      p50: finiteOrNull(percentile(sorted, 50)),
      p90: finiteOrNull(percentile(sorted, 90)),
    },
    recent_step_ms: stepMs.slice(-64),
    env: rank.env,
  };
}
