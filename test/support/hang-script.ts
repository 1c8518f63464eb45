import type { EngineConfig, JournalEntry } from '../../src/engine/entries.js';
import type { Capture, CodeFrame } from '../../src/protocol/capture.js';
import { hello, rows, T0 } from './entries.js';

/**
 * A two-rank job that hangs, as journal entries on the simulated clock (test/stall-rules.test.ts,
 * test/viewer-model.test.ts): both ranks step 10 ms steps until 3 s; then rank 1 stops in its code
 * and rank 0 waits in the all-reduce rank 1 never joins; both hooks keep their heartbeats, and answer
 * the sidecar's capture (8.2 s) with their stacks and Flight Recorders; at 40 s they are killed
 * politely (each says its end).
 */

export const frame = (fn: string, file = '/job/train.py', line = 10, kind: CodeFrame['kind'] = 'user'): CodeFrame => ({ file, line, function: fn, kind });
export const WAIT = frame('wait', '/usr/lib/python3.11/threading.py', 320, 'lib');
export const BACKWARD = frame('backward', '/usr/lib/python3/dist-packages/torch/autograd/__init__.py', 197, 'lib');

export function capture(at: number, frames: CodeFrame[], more: Partial<Capture> = {}): Capture {
  return { id: 1, at, last_seq: 10, still_ms: 30_000, threads: [{ name: 'MainThread', training: true, frames, skipped: 0 }], comm: null, workers: null, flight: null, error: null, ...more };
}

export const HANG_CONFIG = { windowMs: 4_000, holdMs: 2_000, endGraceMs: 10_000, stallSteps: 3, stallFloorMs: 5_000 };
/** Both ranks' last step ends here. */
export const STUCK_AT = 3_000;

/** The entries of the ranks `ranks` of the job (all of it: [0, 1]; one sidecar's part of it: [0] or [1]). */
export function hangScript(ranks: number[], config: EngineConfig = HANG_CONFIG): JournalEntry[] {
  const entries: JournalEntry[] = [{ t: 'start', at: T0, config }];
  for (const r of ranks) {
    entries.push(hello(`s${r}`, { rank: r, local_rank: r, world_size: 2, pid: 100 + r, host: `node-${r}`, heartbeat_ms: 1000, capture: true }), { t: 'connect', at: T0, session: `s${r}` });
  }
  const flight = (enqueued: number, pending: boolean) => ({
    backend: 'gloo',
    error: null,
    groups: [{ id: '0', name: 'default_pg', ranks: '[0, 1]', enqueued, started: -1, completed: 300, pending: pending ? [{ seq: 301, op: 'gloo:all_reduce', state: 'scheduled' }] : [] }],
  });
  const stacks: Record<number, Capture> = {
    0: capture(T0 + 8_150, [BACKWARD, frame('main', '/job/train.py', 96)], { flight: flight(301, true) }),
    1: capture(T0 + 8_150, [WAIT, frame('wait_for_it', '/job/train.py', 48), frame('main', '/job/train.py', 87)], { flight: flight(300, false) }),
  };
  for (let t = 50; t <= 40_000; t += 50) {
    for (const r of ranks) {
      if (t % 100 !== 0) continue;
      if (t <= STUCK_AT) entries.push({ t: 'steps', at: T0 + t, session: `s${r}`, dropped: 0, rows: rows(t / 10 - 9, 10, t - 100, { compute: 10 }) });
      else if (t % 1000 === 0) entries.push({ t: 'beat', at: T0 + t, session: `s${r}` });
      // The sidecar asked for their stacks once they stalled (at 8 s): they answered.
      if (t === 8_200) entries.push({ t: 'stack', at: T0 + t, session: `s${r}`, capture: stacks[r]! });
    }
    if (t % 250 === 0) entries.push({ t: 'tick', at: T0 + t });
  }
  for (const r of ranks) entries.push({ t: 'end', at: T0 + 40_050, session: `s${r}`, reason: 'exit' }, { t: 'disconnect', at: T0 + 40_060, session: `s${r}` });
  entries.push({ t: 'tick', at: T0 + 40_250 });
  return entries;
}
