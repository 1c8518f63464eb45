import type { GpuSample } from '../counters/types.js';
import type { HostSample } from '../counters/host.js';
import type { Engine } from '../engine/engine.js';
import { toRow, type JournalEntry } from '../engine/entries.js';
import type { CounterBatch } from '../protocol/counters.js';
import type { Env, Hello, Steps } from '../protocol/messages.js';
import type { Recorder } from '../journal/recorder.js';
import { DEFAULT_LIMITS, type IngestLimits } from './limits.js';

export interface IngestStats {
  connections: number;
  connectionsTotal: number;
  frames: number;
  records: number;
  duplicates: number;
  /** Connections closed for a bad frame or a limit, by close code. */
  rejected: Record<string, number>;
  /** Connections closed for a limit, by limit. */
  limited: Record<string, number>;
}

export interface HelloResult {
  ack: number;
  resumed: boolean;
}

/**
 * Turns validated hook messages into journal entries: decides what is new, has the recorder log it
 * and apply it to the engine, and only then resolves the acknowledgement, so an acknowledged record
 * survives a SIGKILL, a full disk or a restart. A write that fails rejects (JournalRefused).
 */
export class Ingest {
  readonly stats: IngestStats = {
    connections: 0,
    connectionsTotal: 0,
    frames: 0,
    records: 0,
    duplicates: 0,
    rejected: {},
    limited: {},
  };

  private readonly now: () => number;
  /** What the hooks are asked to forward, in `welcome`. */
  readonly wants: { nvml: boolean; interval_ms: number; process: boolean };
  readonly limits: IngestLimits;
  /** Per session, the highest seq already sent to the journal (written or on its way). */
  private readonly logged = new Map<string, number>();

  constructor(
    readonly engine: Engine,
    private readonly recorder: Recorder,
    options: { now?: () => number; gpuIntervalMs?: number; limits?: Partial<IngestLimits> } = {},
  ) {
    this.now = options.now ?? Date.now;
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.engine.limit(this.limits);
    this.wants = { nvml: engine.world.hookGpu, interval_ms: options.gpuIntervalMs ?? 500, process: true };
  }

  private get store() {
    return this.engine.world.jobs;
  }

  /** The limit this hello would pass (a new job or rank past the limits), or null. */
  refusal(hello: Hello): { limit: 'jobs' | 'ranks'; reason: string } | null {
    const jobs = this.store;
    if (!jobs.hasJob(hello.job) && jobs.jobCount >= this.limits.maxJobs && !jobs.hasEndedJob()) {
      return { limit: 'jobs', reason: `too many jobs: this sidecar takes ${this.limits.maxJobs}` };
    }
    if (!jobs.hasRank(hello.job, hello.rank) && jobs.rankCount(hello.job) >= this.limits.maxRanksPerJob) {
      return { limit: 'ranks', reason: `too many ranks: a job may have ${this.limits.maxRanksPerJob}` };
    }
    return null;
  }

  limited(limit: string): void {
    this.stats.limited[limit] = (this.stats.limited[limit] ?? 0) + 1;
  }

  async hello(hello: Hello): Promise<HelloResult> {
    const resumed = this.store.hasSession(hello.session, hello.job);
    await this.record({ t: 'hello', at: this.now(), hello });
    return { ack: this.store.ack(hello.session), resumed };
  }

  env(session: string, env: Env): Promise<void> {
    return this.record({ t: 'env', at: this.now(), session, env });
  }

  /** Resolves to the sequence number to acknowledge, once what it covers is written and applied. */
  async steps(session: string, message: Steps): Promise<number> {
    const after = Math.max(this.store.ack(session), this.logged.get(session) ?? 0);
    const fresh = message.records.filter((record) => record.seq > after);
    const duplicates = message.records.length - fresh.length;
    this.stats.duplicates += duplicates;
    if (fresh.length > 0) {
      this.logged.set(session, Math.max(after, ...fresh.map((record) => record.seq)));
      try {
        await this.record({ t: 'steps', at: this.now(), session, dropped: message.dropped, rows: fresh.map(toRow), duplicates });
      } catch (error) {
        // Nothing of it was acknowledged: after the hook reconnects, its resent records are new again.
        this.logged.delete(session);
        throw error;
      }
      this.stats.records += fresh.length;
    } else {
      // A frame of duplicates still waits for what it covers to be written.
      await this.record({ t: 'steps', at: this.now(), session, dropped: message.dropped, rows: [], duplicates });
    }
    return this.store.ack(session);
  }

  /** Resolves to the sequence number to acknowledge, once the end is recorded. */
  async end(session: string, reason: string): Promise<number> {
    await this.record({ t: 'end', at: this.now(), session, reason });
    return this.store.ack(session);
  }

  counters(session: string, batch: CounterBatch): Promise<void> {
    return this.record({ t: 'counters', at: this.now(), session, batch });
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

  disconnected(session: string): Promise<void> {
    this.logged.delete(session);
    return this.record({ t: 'disconnect', at: this.now(), session });
  }

  rejected(code: number): void {
    this.stats.rejected[code] = (this.stats.rejected[code] ?? 0) + 1;
  }

  private async record(entry: JournalEntry): Promise<void> {
    await this.recorder.record(entry);
  }
}
