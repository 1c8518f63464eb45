import type { Engine } from '../../src/engine/engine.js';
import type { JournalEntry } from '../../src/engine/entries.js';
import { Recorder } from '../../src/journal/recorder.js';
import { Wal } from '../../src/journal/wal.js';
import { createLogger } from '../../src/log/log.js';

/**
 * A sidecar's journal on a simulated clock, for tests that kill it and start it again: a recorder on
 * a real journal in `dir` (no checkpoint unless asked), and entries fed to it at their own times.
 */

export async function recorderOn(dir: string, engine: Engine, clock: { now: number }): Promise<Recorder> {
  const wal = await Wal.open({ dir, maxBytes: 64 * 1024 * 1024, now: () => clock.now });
  return new Recorder(engine, wal, { checkpointBytes: 1 << 30, checkpointMs: 3_600_000, samplesGiveUpShare: 0.75, now: () => clock.now, log: createLogger('silent') });
}

/** Records each entry as of its time, all at once as the hooks' frames come: resolves once every one is applied. */
export async function feed(recorder: Recorder, clock: { now: number }, entries: JournalEntry[]): Promise<void> {
  const written: Array<Promise<unknown>> = [];
  for (const entry of entries) {
    clock.now = entry.at;
    written.push(recorder.record(entry));
  }
  await Promise.all(written);
}
