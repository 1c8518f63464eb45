/**
 * The verdicts and their causes by name: what the rules decide (src/analysis/verdict.ts), what the
 * state and the stream carry (src/protocol/) and what the viewer shows. Names only; the rules and
 * their thresholds are in analysis, their reasoning in docs/verdicts.md.
 */

export const VERDICTS = ['input-bound', 'transfer-bound', 'host-bound', 'communication-bound', 'memory-bound', 'throttled', 'compute-bound', 'warming-up', 'idle'] as const;
export type Verdict = (typeof VERDICTS)[number];

/** Why a rank is input-bound. */
export const INPUT_CAUSES = ['cpu-saturated', 'contention', 'memory-pressure', 'cgroup-throttled', 'io-wait', 'few-workers', 'unknown'] as const;
/** Why a rank is throttled. */
export const THROTTLE_CAUSES = ['thermal', 'power', 'hw-slowdown', 'clocks-low'] as const;
/** Why a rank is host-bound. */
export const HOST_CAUSES = ['outside-phases', 'gpu-idle-in-compute'] as const;
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
/** Every cause a verdict can carry; a verdict without one has cause `null`. */
export const CAUSES = [...INPUT_CAUSES, ...THROTTLE_CAUSES, ...HOST_CAUSES, ...COMM_CAUSES, ...MEMORY_CAUSES, ...COMPUTE_CAUSES, ...STACK_CAUSES] as const;

export type InputCause = (typeof INPUT_CAUSES)[number];
export type ThrottleCause = (typeof THROTTLE_CAUSES)[number];
export type HostCause = (typeof HOST_CAUSES)[number];
export type CommCause = (typeof COMM_CAUSES)[number];
export type MemoryCause = (typeof MEMORY_CAUSES)[number];
export type ComputeCause = (typeof COMPUTE_CAUSES)[number];
export type StackCause = (typeof STACK_CAUSES)[number];
export type Cause = InputCause | ThrottleCause | HostCause | CommCause | MemoryCause | ComputeCause | StackCause | null;

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

export interface Evidence {
  /** The rule that decided, in words, with its numbers. */
  rule: string;
  /** Shares of step time lost to each limiter (0..1). */
  lost: Partial<Record<Limiter, number>>;
  /** The lower bounds of those shares over the window (0..1), which the rules weighed; absent in judgements before them. */
  lost_low?: Partial<Record<Limiter, number>>;
  figures: Record<string, number | string | null>;
}
