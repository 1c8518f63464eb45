import type { EngineSnapshot } from '../engine/snapshot.js';
import type { ProcReading } from '../protocol/capture.js';
import type { RankProcess } from '../counters/proc-rank.js';
import type { Ingest } from './ingest.js';
import type { SessionTable } from '../store/session-table.js';

/**
 * The live side of the stall rules (src/analysis/stall.ts): for each rank the engine finds stalled,
 * asks its hook where it is (a `capture` request: its `stack` frame is journaled like any input), again
 * every REFRESH_MS while it stays stalled; and, while it is stalled or silent, reads its process in
 * /proc where the sidecar can see it (journaled as `proc`). Requests are never journaled: a replay
 * has the answers.
 */

/** A stalled rank's stack is taken again this often, so the state shows where it is now. */
const REFRESH_MS = 10_000;
/** A request without an answer is sent again after this long. */
const RETRY_MS = 3_000;
/** How often a stalled or silent rank's /proc is read. */
const PROC_EVERY_MS = 2_000;

export interface StallWatchOptions {
  now: () => number;
  readProcess: (rank: RankProcess) => Promise<ProcReading>;
}

export class StallWatch {
  private readonly asked = new Map<string, number>();
  private readonly read = new Map<string, number>();
  private nextId = 1;

  constructor(
    private readonly ingest: Ingest,
    /** The engine's sessions: which is each rank's latest, to ask its hook. */
    private readonly sessions: Pick<SessionTable, 'sessionOf'>,
    private readonly options: StallWatchOptions,
  ) {}

  /** Called with every published snapshot. */
  onSnapshot(snapshot: EngineSnapshot): void {
    const now = this.options.now();
    const seen = new Set<string>();
    for (const job of snapshot.jobs) {
      if (job.ended) continue;
      for (const rank of job.ranks) {
        const stall = rank.stall;
        const silentGone = stall?.state === 'gone' && rank.verdict?.cause === 'no-answer';
        if (!stall || (stall.state !== 'stalled' && !silentGone && !(stall.state === 'waiting' && !rank.connected))) continue;
        const session = this.sessions.sessionOf(job.job, rank.rank);
        if (!session) continue;
        seen.add(session.id);
        if (stall.state === 'stalled' && !stall.unresponsive && (stall.capture === null || now - stall.capture.at >= REFRESH_MS) && now - (this.asked.get(session.id) ?? -Infinity) >= RETRY_MS) {
          if (this.ingest.requestCapture(session.id, this.nextId++)) this.asked.set(session.id, now);
        }
        if ((stall.unresponsive || !rank.connected) && now - (this.read.get(session.id) ?? -Infinity) >= PROC_EVERY_MS) {
          this.read.set(session.id, now);
          void this.options
            .readProcess(session)
            .then((reading) => this.ingest.proc(session.id, reading))
            .catch(() => undefined);
        }
      }
    }
    for (const id of this.asked.keys()) if (!seen.has(id)) this.asked.delete(id);
    for (const id of this.read.keys()) if (!seen.has(id)) this.read.delete(id);
  }
}
