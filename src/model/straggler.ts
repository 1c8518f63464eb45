import { Type, type Static } from '@sinclair/typebox';
import { round } from './round.js';
import { Names } from './schema.js';

/**
 * The rank that holds a synchronous job back, found from the ranks' windows. Pure. Used by the
 * sidecar's analysis on the ranks it sees, and by the viewer across the ranks of several sidecars.
 */

export const STRAGGLER_REASONS = ['data', 'transfer', 'gpu-clocks', 'host'] as const;
export type StragglerReason = (typeof STRAGGLER_REASONS)[number];

export const StragglerSchema = Type.Object(
  {
    rank: Type.Integer({ minimum: 0, description: 'the rank that holds the others back' }),
    reason: Names(STRAGGLER_REASONS, { description: 'its own delay that the other ranks lack' }),
    excess_ms: Type.Number({ description: 'ms per step it spends on its own delays beyond the other ranks\' median' }),
    text: Type.String({ description: 'the finding, in words' }),
  },
  { description: 'the rank that holds a synchronous job back' },
);
export type Straggler = Static<typeof StragglerSchema>;

/** What the finder reads of a rank's window (the analysis' StepWindow, or the state's RankWindow). */
export interface StragglerWindow {
  step_ms_mean: number | null;
  breakdown: { data: number; h2d: number; compute: number; other: number } | null;
  gpu: { sm_clock_frac_mean: number | null } | null;
  host: { cpu_pct_mean: number | null } | null;
}

/** Share of a step the job must lose to one rank before that rank is named. */
const MIN_EXCESS_SHARE = 0.1;
const MIN_EXCESS_MS = 2;
/** Host CPU this many points busier than the other ranks' hosts makes "its host" the reason. */
const HOST_GAP_PCT = 20;

interface OwnDelays {
  rank: number;
  data: number;
  transfer: number;
  clocks: number;
  hostCpu: number | null;
}

const median = (xs: number[]) => {
  const sorted = xs.slice().sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/**
 * In a synchronous job every rank's step takes as long as the slowest one's, because the fast ranks
 * wait for it in the collective, and that wait lands in their compute or "other" time. So ranks
 * are compared on the delays that are their own: data wait, copies, and compute lost to low clocks.
 */
function ownDelays(rank: number, window: StragglerWindow): OwnDelays | null {
  const b = window.breakdown;
  const stepMs = window.step_ms_mean;
  if (!b || stepMs === null) return null;
  const frac = window.gpu?.sm_clock_frac_mean ?? 1;
  return {
    rank,
    data: b.data * stepMs,
    transfer: b.h2d * stepMs,
    clocks: b.compute * stepMs * Math.max(0, 1 - frac),
    hostCpu: window.host?.cpu_pct_mean ?? null,
  };
}

export function findStraggler(ranks: Array<{ rank: number; window: StragglerWindow }>): Straggler | null {
  const delays = ranks.map((r) => ownDelays(r.rank, r.window)).filter((d): d is OwnDelays => d !== null);
  if (delays.length < 2) return null;
  const total = (d: OwnDelays) => d.data + d.transfer + d.clocks;
  const worst = delays.reduce((a, b) => (total(b) > total(a) ? b : a));
  const others = delays.filter((d) => d !== worst);
  const excess = {
    data: worst.data - median(others.map((d) => d.data)),
    transfer: worst.transfer - median(others.map((d) => d.transfer)),
    'gpu-clocks': worst.clocks - median(others.map((d) => d.clocks)),
  };
  const excessMs = excess.data + excess.transfer + excess['gpu-clocks'];
  const stepMs = median(ranks.map((r) => r.window.step_ms_mean ?? 0));
  if (excessMs < Math.max(MIN_EXCESS_MS, MIN_EXCESS_SHARE * stepMs)) return null;
  let reason = (Object.keys(excess) as Array<keyof typeof excess>).reduce((a, b) => (excess[b] > excess[a] ? b : a)) as StragglerReason;
  const otherHosts = others.map((d) => d.hostCpu).filter((x): x is number => x !== null);
  if (reason === 'data' && worst.hostCpu !== null && otherHosts.length && worst.hostCpu - median(otherHosts) >= HOST_GAP_PCT) reason = 'host';
  const what: Record<StragglerReason, string> = {
    data: 'waits longer for data',
    transfer: 'spends longer in host-to-device copies',
    'gpu-clocks': 'runs its GPU at lower clocks',
    host: `waits for data on a busier host (CPU ${worst.hostCpu?.toFixed(0)}%)`,
  };
  return {
    rank: worst.rank,
    reason,
    excess_ms: round(excessMs, 2),
    text: `rank ${worst.rank} ${what[reason]}: ${excessMs.toFixed(1)} ms a step more than the other ranks, which wait for it`,
  };
}
