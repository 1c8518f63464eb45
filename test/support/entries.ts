import type { JournalEntry, StepRow } from '../../src/engine/entries.js';
import type { Hello } from '../../src/protocol/messages.js';

/**
 * A scripted job as journal entries, on a simulated clock: `at` is ms since T0 on the sidecar's
 * clock, and the hook's monotonic clock reads `at` (in ns) too, so step ends land where they say.
 */
export const T0 = Date.parse('2026-12-01T12:00:00Z');

export const hello = (session: string, overrides: Partial<Hello> = {}, at = 0): JournalEntry => ({
  t: 'hello',
  at: T0 + at,
  hello: {
    type: 'hello',
    job: 'train',
    rank: 0,
    local_rank: 0,
    world_size: 1,
    session,
    pid: 100,
    host: 'node-a',
    clock: { wall_ms: T0 + at, mono_ns: at * 1e6 },
    env: {},
    ...overrides,
  },
});

/** A rank's hello as the ingest takes it: rank `rank` of a 2-rank `job` on node-1, said at `wallMs`. */
export const rankHello = (job: string, rank: number, wallMs: number, overrides: Partial<Hello> = {}): Hello => ({
  type: 'hello',
  job,
  rank,
  local_rank: rank,
  world_size: 2,
  session: `${job}-${rank}`,
  pid: 100 + rank,
  host: 'node-1',
  clock: { wall_ms: wallMs, mono_ns: 0 },
  env: {},
  ...overrides,
});

export interface Phases {
  data?: number;
  h2d?: number;
  compute?: number;
  other?: number;
}

/** Rows of steps `first..first+n-1` ending every `stepMs` from `startAt` (ms after T0, hook clock = sidecar clock). */
export function rows(first: number, n: number, startAt: number, phases: Phases, samples: number | null = 32): StepRow[] {
  const data = phases.data ?? 0;
  const h2d = phases.h2d ?? 0;
  const compute = phases.compute ?? 0;
  const dur = data + h2d + compute + (phases.other ?? 0);
  return Array.from({ length: n }, (_, i) => {
    const end = startAt + (i + 1) * dur;
    return [first + i, first + i - 1, end * 1e6, dur * 1e6, data * 1e6, h2d * 1e6, compute * 1e6, samples, null, null, null];
  });
}

/**
 * `seconds` of a job's life in entries: steps sent every 100 ms in batches, ticks every 250 ms.
 * Returns the entries and the seq to continue from.
 */
export function run(session: string, fromMs: number, seconds: number, phases: Phases, firstSeq = 1): { entries: JournalEntry[]; nextSeq: number } {
  const entries: JournalEntry[] = [];
  const dur = (phases.data ?? 0) + (phases.h2d ?? 0) + (phases.compute ?? 0) + (phases.other ?? 0);
  let seq = firstSeq;
  let stepEnd = fromMs;
  for (let t = fromMs + 100; t <= fromMs + seconds * 1000; t += 100) {
    const n = Math.floor((t - stepEnd) / dur);
    if (n > 0) {
      entries.push({ t: 'steps', at: T0 + t, session, dropped: 0, rows: rows(seq, n, stepEnd, phases) });
      seq += n;
      stepEnd += n * dur;
    }
    for (let tick = Math.floor((t - 100) / 250 + 1) * 250; tick <= t; tick += 250) entries.push({ t: 'tick', at: T0 + tick });
  }
  return { entries, nextSeq: seq };
}
