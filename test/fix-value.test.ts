import path from 'node:path';
import { readFileSync, rmSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { fixValue, fixValueText, speedupOf } from '../src/model/fix-value.js';
import type { Summary } from '../src/protocol/summary.js';
import { Engine } from '../src/engine/engine.js';
import type { EndedRun } from '../src/engine/snapshot.js';
import { replayJournal } from '../src/journal/replay.js';
import type { FixEstimate, Waste } from '../src/protocol/state.js';
import { unpackJournal } from './support/scenarios.js';
import { ROOT } from './support/sidecar.js';

/**
 * What a fix would buy, checked against fixes measured in a recording: the demo's journal (real
 * sidecar, its real hooked loop, simulated GPU counters), whose regimes are the same loop with and
 * without each cause — online augmentation in the training process (input), one GPU at 1065 of 1695
 * MHz (throttle). The measured fix of a regime is its rank's median step over the healthy regime's;
 * the estimate is what the live verdict said its fix would buy (Amdahl on the limiter's share; for
 * throttling, compute × (1 − clock ratio)). The tolerance, documented in docs/verdicts.md: within 10%.
 */

const DEMO = path.join(ROOT, 'test', 'fixtures', 'fix-checks', 'demo-regimes');
export const FIX_TOLERANCE = 0.1;

interface Tick {
  rank: number;
  p50: number | null;
  verdict: string | null;
  fixes: FixEstimate[];
}

const median = (values: number[]) => {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
};

interface Replayed {
  ticks: Tick[];
  /** The run's summary as it ended, and as a sidecar restarted from a checkpoint mid-throttle made it. */
  summary: Summary;
  restarted: Summary;
}

/** The demo's journal replayed: every rank's window and live verdict each tick, and the run's summary; beside it, a restart from a checkpoint taken once the job throttled. */
async function replayDemo(): Promise<Replayed> {
  const dir = unpackJournal({ fixture: DEMO });
  const ticks: Tick[] = [];
  const ended: EndedRun[] = [];
  const endedAfterRestart: EndedRun[] = [];
  let restarted: Engine | null = null;
  try {
    await replayJournal(dir, {
      publishTicks: true,
      onEntry: (entry, engine) => {
        if (restarted) {
          restarted.apply(entry);
          if (entry.t === 'tick') endedAfterRestart.push(...restarted.snapshot().ended);
        }
        if (entry.t !== 'tick') return;
        const snapshot = engine.snapshot();
        ended.push(...snapshot.ended);
        if (snapshot.at !== entry.at) return;
        for (const job of snapshot.jobs) {
          for (const r of job.ranks) ticks.push({ rank: r.rank, p50: r.window.step_ms_p50, verdict: r.verdict?.verdict ?? null, fixes: r.verdict?.causes ?? [] });
          if (!restarted && job.verdict?.verdict === 'throttled') restarted = Engine.fromCheckpoint(JSON.parse(JSON.stringify(engine.toCheckpoint())));
        }
      },
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const demo = (runs: EndedRun[]) => {
    expect(runs.map((run) => run.job)).toEqual(['demo']);
    return JSON.parse(JSON.stringify(runs[0]!.summary)) as Summary;
  };
  return { ticks, summary: demo(ended), restarted: demo(endedAfterRestart) };
}

/** Each regime's measured fix on each rank that held its verdict: the rank's median step in it over its median in the healthy regime before. */
function measuredFixes(ticks: Tick[]) {
  const fixes: Array<{ regime: 'input' | 'throttle'; rank: number; measured: number; held: Tick[] }> = [];
  for (const rank of [0, 1]) {
    const mine = ticks.filter((t) => t.rank === rank && t.p50 !== null);
    const firstInput = mine.findIndex((t) => t.verdict === 'input-bound');
    const healthy = median(mine.slice(0, firstInput).filter((t) => t.verdict === 'compute-bound').map((t) => t.p50!));
    for (const [regime, verdict] of [
      ['input', 'input-bound'],
      ['throttle', 'throttled'],
    ] as const) {
      const held = mine.filter((t) => t.verdict === verdict);
      if (held.length) fixes.push({ regime, rank, measured: median(held.map((t) => t.p50!)) / healthy, held });
    }
  }
  // Both ranks were input-bound; rank 1 (the hot GPU) throttled.
  expect(fixes.map((c) => `${c.regime}/${c.rank}`).sort()).toEqual(['input/0', 'input/1', 'throttle/1']);
  return fixes;
}

describe('what a fix would buy', () => {
  let demo: Replayed;
  beforeAll(async () => {
    demo = await replayDemo();
  });

  // Removing the regime's cause removes its limiter's whole exposed share: the limiter's bound (upto).
  it('lands within 10% of the fix measured in the demo recording, live: input (augmentation gone) and throttle (clocks back)', () => {
    for (const { regime, rank, measured, held } of measuredFixes(demo.ticks)) {
      const estimated = median(held.map((t) => speedupOf(t.fixes.find((f) => f.limiter === regime)!.upto)));
      expect(Math.abs(estimated / measured - 1), JSON.stringify({ regime, rank, estimated, measured })).toBeLessThanOrEqual(FIX_TOLERANCE);
    }
  });

  it("states in the run's summary each cause's estimate folded over the time its verdict held, within 10% of the measured fix", () => {
    const causes = demo.summary.causes ?? [];
    // The summary's verdict's causes first, then the other verdict's; each folded over all of its verdict's time.
    expect(causes.map((c) => `${c.verdict}/${c.cause}`)).toEqual(['input-bound/contention', 'input-bound/few-workers', 'throttled/thermal']);
    const held = Object.fromEntries(demo.summary.timeline.map((s) => [s.verdict, s.end_s - s.start_s]));
    for (const c of causes) expect(Math.abs(c.seconds! - held[c.verdict!]!)).toBeLessThan(0.5);
    for (const { regime, rank, measured } of measuredFixes(demo.ticks)) {
      const fix = causes.find((c) => c.limiter === regime)!;
      const estimated = speedupOf(fix.upto);
      expect(Math.abs(estimated / measured - 1), JSON.stringify({ regime, rank, estimated, measured })).toBeLessThanOrEqual(FIX_TOLERANCE);
    }
    // Replayed as the live sidecar wrote it (test/fixtures/fix-checks/demo-regimes/summary.json).
    expect(demo.summary).toEqual(JSON.parse(readFileSync(path.join(DEMO, 'summary.json'), 'utf8')));
  });

  it('folds the same after a restart from a checkpoint taken mid-run', () => {
    expect(demo.restarted.causes).toEqual(demo.summary.causes);
  });

  it('prices a fix: GPU-hours and money so far from the waste ledger, and per further hour at the present rate', () => {
    const waste: Waste = {
      gpu_seconds: 7200,
      lost_gpu_seconds: 2880,
      lost_share: 0.4,
      by_cause: [{ cause: 'input', gpu_seconds: 2880, share: 0.4, energy_j: null }],
      price_per_gpu_hour: 2.5,
      lost_cost: 2,
    };
    const fix: FixEstimate = { cause: 'few-workers', limiter: 'input', gain: 0.3, upto: 0.4, basis: '', unknown: null };
    const value = fixValue(fix, waste, 2);
    // 0.3 of a 0.4 share: three quarters of the 0.8 GPU-hours lost; each further hour of 2 GPUs saves 0.6.
    expect(value).toEqual({ speedup: 1.43, bound: false, gpu_hours_so_far: 0.6, gpu_hours_per_hour: 0.6, cost_so_far: 1.5, cost_per_hour: 1.5 });
    expect(fixValueText(value)).toBe('→ 1.43× as fast; 0.6 GPU-h (1.50) saved so far, 0.6 GPU-h (1.50) each further hour');
    // Not measured: the bound, said as one; no price, no money.
    const unknown = fixValue({ ...fix, gain: null }, { ...waste, price_per_gpu_hour: null }, 1);
    expect(fixValueText(unknown)).toBe('→ up to 1.67× as fast; up to 0.8 GPU-h saved so far, 0.4 GPU-h each further hour');
    expect(speedupOf(1)).toBe(Number.POSITIVE_INFINITY);
    expect(fixValue({ ...fix, gain: 1, upto: 1 }, null, 1).speedup).toBeNull();
  });
});
