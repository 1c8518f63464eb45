import type { Engine } from '../engine/engine.js';
import type { JournalEntry } from '../engine/entries.js';
import type { EngineSnapshot } from '../engine/snapshot.js';
import type { Logger } from '../log/log.js';
import type { JournalHealth } from '../protocol/state.js';
import type { Wal } from './wal.js';

/** Entries that lead to an acknowledgement: applied only once durably written, else refused. */
const ACKED = new Set<JournalEntry['t']>(['hello', 'steps', 'end']);
/** Counter samples: the first thing given up (applied live, not journaled) as the journal nears its cap. */
const SAMPLES = new Set<JournalEntry['t']>(['gpu', 'host', 'counters']);

export interface RecorderOptions {
  /** Checkpoint once the segments since the last one pass this many bytes… */
  checkpointBytes: number;
  /** …or this long after the last one, if anything was written. */
  checkpointMs: number;
  /** Above this share of the cap, counter samples are applied but not journaled. */
  samplesGiveUpShare: number;
  now: () => number;
  log: Logger;
}

export class JournalRefused extends Error {
  constructor(readonly reason: string) {
    super(reason);
  }
}

/**
 * Decide → log → apply → acknowledge. Every entry goes through here, in one order: with a journal,
 * an entry is applied to the engine only after its write is durable, in the order written; entries
 * that lead to an acknowledgement (hello, steps, end) are refused when the write fails, so nothing is
 * acknowledged that a restart would not find. The others (ticks, connections, samples) are applied
 * either way: the live state keeps going while the disk is full, and what could not be written is
 * counted. Checkpoints are taken between writes, when the engine holds exactly what was written.
 */
export class Recorder {
  private inflight = 0;
  private held: Array<() => void> = [];
  private checkpointing: Promise<void> | null = null;
  private bytesAtCheckpoint = 0;
  private lastCheckpointAt: number;
  private writtenSinceCheckpoint = false;
  private failing = false;
  readonly givenUp: Record<string, number> = {};
  replay: JournalHealth['replay'] = null;

  constructor(
    private readonly engine: Engine,
    private readonly wal: Wal | null,
    private readonly options: RecorderOptions,
  ) {
    this.lastCheckpointAt = options.now();
    this.bytesAtCheckpoint = wal?.bytes() ?? 0;
  }

  /** Resolves with the snapshot the entry published (ticks, stops), once applied; rejects with JournalRefused. */
  record(entry: JournalEntry): Promise<EngineSnapshot | null> {
    const wal = this.wal;
    if (!wal) return Promise.resolve(this.engine.apply(entry));
    if (SAMPLES.has(entry.t) && wal.bytes() > this.options.samplesGiveUpShare * wal.health().maxBytes) {
      this.giveUp(entry.t);
      return Promise.resolve(this.engine.apply(entry));
    }
    if (this.checkpointing) return new Promise((resolve, reject) => this.held.push(() => this.record(entry).then(resolve, reject)));
    this.inflight += 1;
    return wal.append(entry).then(
      () => {
        this.settled(true, null);
        return this.engine.apply(entry);
      },
      (error: Error) => {
        this.settled(false, error);
        if (ACKED.has(entry.t)) throw new JournalRefused(error.message);
        this.giveUp(entry.t);
        return this.engine.apply(entry);
      },
    );
  }

  private giveUp(kind: string): void {
    this.givenUp[kind] = (this.givenUp[kind] ?? 0) + 1;
  }

  private settled(ok: boolean, error: Error | null): void {
    this.inflight -= 1;
    if (ok) this.writtenSinceCheckpoint = true;
    if (!ok && !this.failing) {
      this.failing = true;
      this.options.log.error({ err: error?.message }, 'journal write failed: acknowledging nothing until it writes again');
    } else if (ok && this.failing && this.wal!.health().ok) {
      this.failing = false;
      this.options.log.info({ write_errors: this.wal!.health().writeErrors }, 'journal writes again');
    }
    if (this.checkpointDue()) void this.checkpoint();
  }

  private checkpointDue(): boolean {
    if (!this.wal || this.checkpointing) return false;
    const bytes = this.wal.bytes();
    const grown = bytes - this.bytesAtCheckpoint;
    const stale = this.writtenSinceCheckpoint && this.options.now() - this.lastCheckpointAt >= this.options.checkpointMs;
    // Well before the cap, whatever the schedule: a checkpoint must fit beside what it replaces.
    const pressed = grown > 0 && bytes > this.wal.health().maxBytes / 2;
    return grown >= this.options.checkpointBytes || stale || pressed;
  }

  /**
   * Writes a checkpoint of the engine's state. New entries wait (briefly) until the writes in flight
   * are applied, so that the state is exactly what the covered segments hold.
   */
  checkpoint(): Promise<void> {
    const wal = this.wal;
    if (!wal) return Promise.resolve();
    this.checkpointing ??= (async () => {
      while (this.inflight > 0) await new Promise((resolve) => setImmediate(resolve));
      const started = this.options.now();
      try {
        await wal.checkpoint(this.engine.toCheckpoint());
        this.options.log.debug({ ms: this.options.now() - started, bytes: wal.bytes() }, 'journal checkpoint written');
      } catch (error) {
        this.options.log.error({ err: (error as Error).message }, 'journal checkpoint failed; the segments stay');
      } finally {
        this.lastCheckpointAt = this.options.now();
        this.bytesAtCheckpoint = wal.bytes();
        this.writtenSinceCheckpoint = false;
        this.checkpointing = null;
        const held = this.held;
        this.held = [];
        for (const release of held) release();
      }
    })();
    return this.checkpointing;
  }

  /** Whether entries are written: without a journal, what only the journal would read is not made. */
  get journaled(): boolean {
    return this.wal !== null;
  }

  health(): JournalHealth | null {
    if (!this.wal) return null;
    const wal = this.wal.health();
    return { ...wal, givenUp: { ...this.givenUp }, replay: this.replay };
  }

  async close(): Promise<void> {
    await this.checkpointing;
    await this.wal?.close();
  }
}
