import { Engine } from '../../src/engine/engine.js';
import { parseEntry } from '../../src/engine/entries.js';
import { readWal } from '../../src/journal/wal-read.js';
import type { Summary } from '../../src/protocol/summary.js';

/**
 * A recorded journal replayed as if each pod's sidecar had seen only its own ranks: every rank's
 * entries (its hello, steps, counters, connection) go to its pod's engine, what belongs to the node
 * (GPU and host counters, ticks, starts) to every pod. One pod holding every rank is the one
 * sidecar that saw them all. Each pod's summary of the recording's (single) run comes back.
 */
export async function replayAsPods(dir: string, pods: number[][]): Promise<Summary[]> {
  const engines = pods.map(() => {
    const engine = new Engine();
    engine.replaying = true;
    return engine;
  });
  const podOf = new Map<string, number>();
  let lastAt = 0;
  for await (const item of readWal(dir, { onBad: () => {} })) {
    if (item.kind !== 'entry') continue;
    const entry = parseEntry(item.value);
    if (typeof entry === 'string') continue;
    lastAt = Math.max(lastAt, entry.at);
    if (entry.t === 'hello') podOf.set(entry.hello.session, pods.findIndex((ranks) => ranks.includes(entry.hello.rank)));
    const session = entry.t === 'hello' ? entry.hello.session : 'session' in entry ? entry.session : null;
    engines.forEach((engine, pod) => {
      if (session === null || podOf.get(session) === pod) engine.apply(entry);
    });
  }
  return engines.map((engine, pod) => {
    // A run still going where the recording stops is summarised as of its last entry, as `stepscope replay` does.
    const ended = [...engine.publishNow().ended, ...engine.world.jobs.liveJobs().flatMap((job) => engine.runSummary(job, lastAt))];
    if (ended.length !== 1) throw new Error(`pod ${pod}: ${ended.length} runs ended in the recording, not 1`);
    return ended[0]!.summary;
  });
}
