import type { Env, Hello, Steps } from '../protocol/messages.js';
import type { HelloResult, JobStore } from '../store/job-store.js';
import { toRow, type Journal, type JournalEntry } from '../store/journal.js';
import { applyEntry } from '../store/replay.js';

export interface IngestStats {
  connections: number;
  connectionsTotal: number;
  frames: number;
  records: number;
  duplicates: number;
  rejected: Record<string, number>;
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
  };

  constructor(
    readonly store: JobStore,
    private readonly journal: Journal | null,
    private readonly now: () => number = Date.now,
  ) {}

  hello(hello: Hello): Promise<HelloResult> {
    const at = this.now();
    const result = this.store.hello(hello, at);
    return this.record({ t: 'hello', at, hello }).then(() => result);
  }

  env(session: string, env: Env): Promise<void> {
    const entry: JournalEntry = { t: 'env', at: this.now(), session, env };
    applyEntry(this.store, entry);
    return this.record(entry);
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
    const entry: JournalEntry = { t: 'end', at: this.now(), session, reason };
    applyEntry(this.store, entry);
    return this.record(entry).then(() => this.store.ack(session));
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

  private durable(): Promise<void> {
    return this.journal ? this.journal.flush() : Promise.resolve();
  }

  private record(entry: JournalEntry): Promise<void> {
    return this.journal ? this.journal.append(entry) : Promise.resolve();
  }
}
