import { Engine } from '../../src/engine/engine.js';
import type { JournalEntry } from '../../src/engine/entries.js';
import type { EngineSnapshot } from '../../src/engine/snapshot.js';
import { sidecarState } from '../../src/outputs/state.js';
import { historyTail } from '../../src/outputs/stream.js';
import { parseFrame, type ViewerFrame } from '../../src/viewer/model/frames.js';
import { applyFrame, type SourceState } from '../../src/viewer/model/source.js';
import { T0 } from './entries.js';

/**
 * A snapshot as the stream sends it (its state and, for an update, the slices a tick can have
 * changed; for a snapshot, all of them), parsed as the viewer parses it.
 */
export function streamFrame(snapshot: EngineSnapshot, options: { type: 'snapshot' | 'update'; seq: number; gpuSource: string; windowMs: number }): ViewerFrame {
  const state = sidecarState({
    snapshot,
    ingest: { connections: 0, connectionsTotal: 0, frames: 0, records: 0, duplicates: 0, rejected: {}, limited: {}, implausible: {} },
    sources: { gpu: { source: options.gpuSource, reason: 'test', health: null }, host: null, collectors: [] },
    journal: null,
    version: 'test',
    startedAt: T0,
    windowMs: options.windowMs,
  });
  const history = historyTail(snapshot.history, snapshot.at, options.type === 'snapshot' ? null : 3);
  return parseFrame(JSON.stringify({ v: 1, type: options.type, seq: options.seq, at: new Date(snapshot.at).toISOString(), rate_hz: 4, state, history }));
}

/** The sidecar's engine on a simulated clock (from T0), its snapshots encoded as the stream sends them and parsed as the viewer parses them. */
export class EngineStream {
  readonly engine = new Engine();
  private seq = 0;

  constructor() {
    this.apply([{ t: 'start', at: T0, config: { windowMs: 2_000, holdMs: 500, endGraceMs: 10_000 } }, { t: 'source', at: T0, gpu: 'none', reason: 'test' }]);
  }

  apply(entries: JournalEntry[]): void {
    for (const entry of entries) this.engine.apply(entry);
  }

  frame(type: 'snapshot' | 'update', at: number): ViewerFrame {
    this.engine.apply({ t: 'tick', at });
    return streamFrame(this.engine.snapshot(), { type, seq: ++this.seq, gpuSource: 'none', windowMs: 2_000 });
  }

  /** The job's entries, each tick's update applied to `source`. */
  follow(source: SourceState, entries: JournalEntry[]): SourceState {
    let held = source;
    for (const entry of entries) {
      if (entry.t === 'tick') held = applyFrame(held, this.frame('update', entry.at), entry.at);
      else this.engine.apply(entry);
    }
    return held;
  }
}
