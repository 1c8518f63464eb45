import { LIMITERS, type Limiter } from '../model/verdict.js';
import type { WasteCheckpoint } from './analysis-checkpoint.js';
import { listLimiters } from './limiters.js';
import { round } from '../model/round.js';
import type { LimiterCost, Waste, WasteEntry } from '../protocol/state.js';

/**
 * The waste ledger of a job: GPU time its ranks lost to each limiter, from the lost shares the rules
 * compute every tick (whatever the verdict: a 12% data wait below the input-bound bar is still time
 * lost), the energy that went with it where power is measured, and its price when one is given.
 * One GPU per rank. Pure: the ticks' times come in.
 */

/** A tick further than this from the last (the sidecar was down) counts as this long: nobody measured the gap. */
const MAX_TICK_S = 10;

export class WasteLedger {
  private gpuSeconds = 0;
  private readonly lost = new Map<Limiter, number>();
  private readonly energy = new Map<Limiter, number>();
  private readonly steady = new Map<Limiter, number>();

  /**
   * One rank over `seconds` of stepping, with the shares it lost, their lower bounds over its window
   * (for the job's limiters' levels) and its GPU's mean power (null: unmeasured).
   */
  add(seconds: number, lost: Partial<Record<Limiter, number>>, powerW: number | null, low: Partial<Record<Limiter, number>> = {}): void {
    const dt = Math.min(Math.max(0, seconds), MAX_TICK_S);
    if (dt === 0) return;
    this.gpuSeconds += dt;
    for (const limiter of LIMITERS) {
      const bound = low[limiter] ?? 0;
      if (bound > 0) this.steady.set(limiter, (this.steady.get(limiter) ?? 0) + bound * dt);
      const share = lost[limiter] ?? 0;
      if (share <= 0) continue;
      this.lost.set(limiter, (this.lost.get(limiter) ?? 0) + share * dt);
      if (powerW !== null) this.energy.set(limiter, (this.energy.get(limiter) ?? 0) + share * dt * powerW);
    }
  }

  /**
   * The limiters that cost the job at least 5% of its GPU time, with their level against `bars`:
   * the share over the job, and as its bound the time-weighted mean of the windows' lower bounds.
   */
  limiters(bars: Readonly<Record<Limiter, number>>): LimiterCost[] {
    if (this.gpuSeconds <= 0) return [];
    const costs = Object.fromEntries(
      [...this.lost.entries()].map(([limiter, seconds]) => [limiter, { share: round(seconds / this.gpuSeconds, 4), low: round((this.steady.get(limiter) ?? 0) / this.gpuSeconds, 4) }]),
    );
    return listLimiters(costs, bars, null);
  }

  view(pricePerGpuHour: number | null): Waste {
    const byCause = [...this.lost.entries()]
      .map(([cause, seconds]): WasteEntry => ({
        cause,
        gpu_seconds: round(seconds, 1),
        share: this.gpuSeconds > 0 ? round(seconds / this.gpuSeconds, 4) : 0,
        energy_j: this.energy.has(cause) ? Math.round(this.energy.get(cause)!) : null,
      }))
      .sort((a, b) => b.gpu_seconds - a.gpu_seconds);
    const lost = [...this.lost.values()].reduce((a, b) => a + b, 0);
    return {
      gpu_seconds: round(this.gpuSeconds, 1),
      lost_gpu_seconds: round(lost, 1),
      lost_share: this.gpuSeconds > 0 ? round(lost / this.gpuSeconds, 4) : null,
      by_cause: byCause,
      price_per_gpu_hour: pricePerGpuHour,
      lost_cost: pricePerGpuHour === null ? null : round((lost / 3600) * pricePerGpuHour, 2),
    };
  }

  dump(): WasteCheckpoint {
    return { gpuSeconds: this.gpuSeconds, lost: [...this.lost.entries()], energy: [...this.energy.entries()], steady: [...this.steady.entries()] };
  }

  static load(dump: WasteCheckpoint): WasteLedger {
    const ledger = new WasteLedger();
    ledger.gpuSeconds = dump.gpuSeconds;
    for (const [limiter, seconds] of dump.lost) ledger.lost.set(limiter, seconds);
    for (const [limiter, joules] of dump.energy) ledger.energy.set(limiter, joules);
    for (const [limiter, seconds] of dump.steady) ledger.steady.set(limiter, seconds);
    return ledger;
  }
}

/** The cause of a waste entry in words, for a summary's first sentence and the viewer. */
export const WASTE_WORDS: Record<Limiter, string> = {
  input: 'input starvation',
  transfer: 'host-to-device copies',
  host: 'work outside the phases',
  communication: 'waiting in collectives',
  throttle: 'low GPU clocks',
};
