import { Type, type Static } from '@sinclair/typebox';
import { OptionalKeys } from './schema.js';

/**
 * The verdicts and their causes by name: what the rules decide (src/analysis/verdict.ts), what the
 * state and the stream carry (src/protocol/) and what the viewer shows. Names only; the rules and
 * their thresholds are in analysis, their reasoning in docs/verdicts.md.
 */

export const VERDICTS = ['input-bound', 'transfer-bound', 'host-bound', 'communication-bound', 'memory-bound', 'throttled', 'compute-bound', 'warming-up', 'idle', 'stalled', 'hung', 'gone'] as const;
export type Verdict = (typeof VERDICTS)[number];

/**
 * A job that stops (src/analysis/stall.ts, docs/verdicts.md): a rank `stalled` (alive and heard
 * from, no step for a while), `gone` (its connection dropped without an end), the job `hung` (a rank
 * stalled or gone and none stepping). `idle` stays for a rank that is not stepping by design.
 */
export const STOP_VERDICTS = ['stalled', 'hung', 'gone'] as const;
export type StopVerdict = (typeof STOP_VERDICTS)[number];
export const isStop = (verdict: Verdict | null | undefined): verdict is StopVerdict => verdict === 'stalled' || verdict === 'hung' || verdict === 'gone';

/** Why a rank is input-bound. */
export const INPUT_CAUSES = ['cpu-saturated', 'contention', 'memory-pressure', 'cgroup-throttled', 'io-wait', 'workers-starve-step', 'few-workers', 'unknown'] as const;
/** Why a rank is throttled. */
export const THROTTLE_CAUSES = ['thermal', 'power', 'hw-slowdown', 'clocks-low'] as const;
/** Why a rank is host-bound. */
export const HOST_CAUSES = ['evaluation', 'outside-phases', 'gpu-idle-in-compute'] as const;
/** Why a rank is communication-bound: waiting for a slower rank, or the collective itself is slow. */
export const COMM_CAUSES = ['slow-rank', 'slow-collective'] as const;
/** Why a rank is memory-bound (the allocator flushes its cache and synchronises to satisfy requests). */
export const MEMORY_CAUSES = ['fragmentation', 'near-capacity', 'allocator-thrash'] as const;
/**
 * What a compute-bound rank's GPU time is made of, where profiling counters tell (null: balanced, or
 * not measured), or who else takes it: another process on the same GPU.
 */
export const COMPUTE_CAUSES = ['launch-bound', 'memory-bandwidth', 'tensor-cores-idle', 'gpu-shared'] as const;
/** What the software stack does to a host- or compute-bound rank: torch.compile recompiling again and again. */
export const STACK_CAUSES = ['recompiles'] as const;
/**
 * Where a stalled rank is, from its stack (and a hung or stalled job's, from the rank behind): in a
 * collective the others have not all joined, waiting for its DataLoader, stopped in its own code,
 * busy outside its steps (its stack moves: an evaluation, a checkpoint), or unresponsive (its
 * hook's thread gets no turn: heartbeats stopped while the connection stays open).
 */
export const STALL_CAUSES = ['collective', 'data-loader', 'code', 'busy', 'unresponsive'] as const;
/** How a rank went: its connection closed without an end, the sidecar closed it as silent, or it did not come back after a sidecar restart. */
export const GONE_CAUSES = ['connection-closed', 'no-answer', 'not-reconnected'] as const;
/** A job hung because a rank is gone (the others wait for it). */
export const HUNG_CAUSES = ['rank-gone'] as const;
/** Every cause a verdict can carry; a verdict without one has cause `null`. */
export const CAUSES = [...INPUT_CAUSES, ...THROTTLE_CAUSES, ...HOST_CAUSES, ...COMM_CAUSES, ...MEMORY_CAUSES, ...COMPUTE_CAUSES, ...STACK_CAUSES, ...STALL_CAUSES, ...GONE_CAUSES, ...HUNG_CAUSES] as const;

export type InputCause = (typeof INPUT_CAUSES)[number];
export type ThrottleCause = (typeof THROTTLE_CAUSES)[number];
export type HostCause = (typeof HOST_CAUSES)[number];
export type CommCause = (typeof COMM_CAUSES)[number];
export type MemoryCause = (typeof MEMORY_CAUSES)[number];
export type ComputeCause = (typeof COMPUTE_CAUSES)[number];
export type StackCause = (typeof STACK_CAUSES)[number];
export type StallCause = (typeof STALL_CAUSES)[number];
export type GoneCause = (typeof GONE_CAUSES)[number];
export type HungCause = (typeof HUNG_CAUSES)[number];
export type Cause = InputCause | ThrottleCause | HostCause | CommCause | MemoryCause | ComputeCause | StackCause | StallCause | GoneCause | HungCause | null;

/** What a step's time can be lost to, as the rules weigh it. */
export const LIMITERS = ['input', 'transfer', 'host', 'communication', 'throttle'] as const;
export type Limiter = (typeof LIMITERS)[number];

/** The limiter each verdict names (none for compute-bound, memory-bound, warming-up and idle). */
export const LIMITER_OF: Readonly<Partial<Record<Verdict, Limiter>>> = {
  'input-bound': 'input',
  'transfer-bound': 'transfer',
  'host-bound': 'host',
  'communication-bound': 'communication',
  throttled: 'throttle',
};

/** How much a limiter costs, as named beside the verdict: moderate from 5% of step time, high at its verdict's bar. */
export const LEVELS = ['moderate', 'high'] as const;
export type Level = (typeof LEVELS)[number];

export const EvidenceSchema = Type.Object(
  {
    rule: Type.String({ description: 'the rule that decided, in words, with its numbers' }),
    lost: OptionalKeys(LIMITERS, Type.Number(), { description: 'shares of step time (0..1) lost to each limiter' }),
    lost_low: Type.Optional(
      OptionalKeys(LIMITERS, Type.Number(), {
        description: "the lower bound of each share over the window's slices of time (0..1), which the rules weigh (docs/verdicts.md); absent in summaries written before it",
      }),
    ),
    figures: Type.Record(Type.String(), Type.Union([Type.Number(), Type.String(), Type.Null()]), {
      description: 'the figures the rules read (window_s, steps, data_share, gpu_util_mean, ...); null where not measured',
    }),
  },
  { description: 'why the verdict' },
);
export type Evidence = Static<typeof EvidenceSchema>;
