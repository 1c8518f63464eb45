import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { CounterBatch } from '../protocol/counters.js';
import type { Env, Hello, Steps } from '../protocol/messages.js';
import type { HelloResult } from '../store/job-store.js';
import { toRow, type Journal, type JournalEntry } from '../store/journal.js';
import { applyEntry, type World } from '../store/replay.js';
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

/**
 * Turns validated hook messages into store updates and journal entries. Acknowledgements
 * resolve only once the journal holds the records, so an acked record survives a SIGKILL.
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

  constructor(
    readonly world: World,
    private readonly journal: Journal | null,
    options: { now?: () => number; gpuIntervalMs?: number; limits?: Partial<IngestLimits> } = {},
  ) {
    this.now = options.now ?? Date.now;
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.wants = { nvml: world.hookGpu, interval_ms: options.gpuIntervalMs ?? 500, process: true };
  }

  get store() {
    return this.world.jobs;
  }

  /** The limit this hello would pass (a new job or rank past the limits), or null. */
  refusal(hello: Hello): { limit: 'jobs' | 'ranks'; reason: string } | null {
    const jobs = this.store;
    if (!jobs.hasJob(hello.job) && jobs.jobCount >= this.limits.maxJobs && jobs.evictEndedJob() === null) {
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

  hello(hello: Hello): Promise<HelloResult> {
    const at = this.now();
    const result = this.store.hello(hello, at);
    return this.record({ t: 'hello', at, hello }).then(() => result);
  }

  env(session: string, env: Env): Promise<void> {
    return this.apply({ t: 'env', at: this.now(), session, env });
  }

  /** Resolves to the sequence number to acknowledge. */
  steps(session: string, message: Steps): Promise<number> {
    const at = this.now();
    const result = this.store.steps(session, message.records, message.dropped, at);
    this.stats.records += result.accepted.length;
    this.stats.duplicates += result.duplicates;
    // Even a frame of duplicates waits for the journal: its ack may cover records still being written.
    const written =
      result.accepted.length === 0
        ? this.durable()
        : this.record({ t: 'steps', at, session, dropped: message.dropped, rows: result.accepted.map(toRow) });
    return written.then(() => result.ack);
  }

  /** Resolves to the sequence number to acknowledge, once the end is recorded. */
  end(session: string, reason: string): Promise<number> {
    return this.apply({ t: 'end', at: this.now(), session, reason }).then(() => this.store.ack(session));
  }

  counters(session: string, batch: CounterBatch): Promise<void> {
    return this.apply({ t: 'counters', at: this.now(), session, batch });
  }

  /** Samples from the sidecar's own GPU collector. */
  gpuSamples(samples: GpuSample[]): Promise<void> {
    return this.apply({ t: 'gpu', at: this.now(), samples });
  }

  hostSample(sample: HostSample): Promise<void> {
    return this.apply({ t: 'host', at: this.now(), sample });
  }

  connected(session: string): void {
    this.store.connected(session);
  }

  disconnected(session: string): void {
    this.store.disconnected(session, this.now());
  }

  rejected(code: number): void {
    this.stats.rejected[code] = (this.stats.rejected[code] ?? 0) + 1;
  }

  private apply(entry: JournalEntry): Promise<void> {
    applyEntry(this.world, entry);
    return this.record(entry);
  }

  private durable(): Promise<void> {
    return this.journal ? this.journal.flush() : Promise.resolve();
  }

  private record(entry: JournalEntry): Promise<void> {
    return this.journal ? this.journal.append(entry) : Promise.resolve();
  }
}
