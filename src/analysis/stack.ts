import type { Comparison, NodeSummary, RankWindow } from '../protocol/state.js';

/**
 * The software stack: what changed between two runs' fingerprints (the hooks' `env`, and the node
 * inventory), ranked by the usual effect of such a change on training speed; and frequent
 * torch.compile recompiles as a cause. Pure. docs/stack.md lists the keys and why each ranks where it does.
 */

/**
 * A change between the runs, ranked: the comparison's env change (the state's and the summary's,
 * whose effect, direction and reason are optional only in comparisons written before them).
 * `key` is one level deep: `stack.amp`, `loader.num_workers`, `node.cores_per_gpu`.
 */
export type Drift = Required<Comparison['env_changes'][number]>;
/** How much such a change usually moves a step's time: large (≥ ~1.5×), medium (10–50%), small, unknown. */
export type Effect = Drift['effect'];
/** Which way such a change usually moves speed; `either` where it depends on the model. */
export type Direction = Drift['direction'];

type Flat = Map<string, unknown>;
interface Judged {
  effect: Effect;
  direction: Direction;
  reason: string;
}
/** A key's rule: how a change from `before` to `after` usually affects speed; null when it is not a material change. */
type Rule = (before: unknown, after: unknown, envs: { before: Flat; after: Flat }) => Judged | null;

const WEIGHT: Record<Effect, number> = { large: 3, medium: 2, small: 1, unknown: 0.5 };
/** A change that usually goes the other way explains the observed change less: a large one then ranks below a small one. */
const CONTRARY = 0.25;

/** A finite number, else null: the hook's values are checked here, not trusted. */
export const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
/** One group of the env the hook sends (`stack`, `compile`, `loader`): {} where absent or not an object. */
export function envGroup(env: Readonly<Record<string, unknown>>, name: string): Record<string, unknown> {
  const value = env[name];
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}
const show = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v ?? null));
const j = (effect: Effect, direction: Direction, reason: string): Judged => ({ effect, direction, reason });

/** A flag turned off or on; `offIsSlower` says which way turning it off usually goes. */
const flag =
  (offIsSlower: boolean, effect: Effect, offReason: string, onReason: string): Rule =>
  (before, after) => {
    if (typeof before !== 'boolean' || typeof after !== 'boolean') return null;
    const turnedOff = before && !after;
    const slower = turnedOff === offIsSlower;
    return j(effect, slower ? 'slower' : 'faster', turnedOff ? offReason : onReason);
  };

/** Fewer of something is slower (workers, cores, prefetched batches). */
const fewerIsSlower =
  (what: string, fewer: Effect, more: Effect): Rule =>
  (before, after) => {
    const b = num(before);
    const a = num(after);
    if (b === null || a === null) return null;
    return a < b ? j(fewer, 'slower', `fewer ${what} (${a}, the baseline ${b})`) : j(more, 'faster', `more ${what} (${a}, the baseline ${b})`);
  };

const version =
  (name: string, effect: Effect): Rule =>
  (before, after) =>
    j(effect, 'either', `${name} ${show(before)} → ${show(after)}: a new version may have taken a slower path (kernels, defaults)`);

/** A reduced-precision dtype, as the hook names what autocast ran with. */
export const REDUCED = /float16|bfloat16|half|bf16|fp16/;
const usesAmp = (env: Flat) => typeof env.get('stack.amp') === 'string' && REDUCED.test(env.get('stack.amp') as string);

const amp: Rule = (before, after) => {
  const b = REDUCED.test(String(before));
  const a = REDUCED.test(String(after));
  if (b && !a) return j('large', 'slower', `mixed precision off (${show(before)} → fp32): matmuls and convolutions lose the tensor cores' bf16/fp16 rate, often 2× slower or more`);
  if (!b && a) return j('large', 'faster', `mixed precision on (${show(after)}): tensor cores at their bf16/fp16 rate`);
  return j('small', 'either', `${show(before)} → ${show(after)}: the same tensor-core rate; float16 adds loss scaling`);
};

/** TF32 matters for fp32 math: much less where autocast runs most of it in bf16/fp16. */
const tf32 =
  (what: string): Rule =>
  (before, after, { after: env }) => {
    if (typeof before !== 'boolean' || typeof after !== 'boolean') return null;
    const effect: Effect = usesAmp(env) ? 'medium' : 'large';
    return before && !after
      ? j(effect, 'slower', `TF32 off for ${what}: fp32 ${what} no longer use the tensor cores, several times slower on Ampere and newer GPUs`)
      : j(effect, 'faster', `TF32 on for ${what}: fp32 ${what} use the tensor cores on Ampere and newer GPUs`);
  };

const PRECISION_TF32: Record<string, boolean> = { highest: false, high: true, medium: true };
const matmulPrecision: Rule = (before, after, envs) => {
  const b = PRECISION_TF32[String(before)];
  const a = PRECISION_TF32[String(after)];
  if (b === undefined || a === undefined) return null;
  if (a === b) return j('small', 'either', `float32 matmul precision ${show(before)} → ${show(after)}`);
  return tf32('matmuls')(b, a, envs);
};

const compiled: Rule = (before, after) => {
  if (typeof before !== 'boolean' || typeof after !== 'boolean') return null;
  return before && !after
    ? j('large', 'slower', 'torch.compile no longer in use: fused kernels lost, often 1.3–2× slower')
    : j('large', 'faster', 'torch.compile now in use: fused kernels, though compiling takes time at the start');
};

/** Counters of the run (not settings): a change only when it is of another order (2× and by `floor`). */
const counter =
  (floor: number, reason: (b: number, a: number) => string): Rule =>
  (before, after) => {
    const b = num(before) ?? 0;
    const a = num(after) ?? 0;
    if (a >= 2 * b && a - b >= floor) return j('medium', 'slower', reason(b, a));
    if (b >= 2 * a && b - a >= floor) return j('small', 'faster', reason(b, a));
    return null;
  };

const workers: Rule = (before, after, envs) => {
  const b = num(before);
  const a = num(after);
  if (b === null || a === null) return null;
  if (a === 0) return j('large', 'slower', `data loaded in the training process now (num_workers 0, the baseline ${b}): the step waits for every batch`);
  if (b === 0) return j('large', 'faster', `data loaded by ${a} worker processes now, in the training process before`);
  return fewerIsSlower('DataLoader workers', 'medium', 'medium')(before, after, envs);
};

const RULES: Record<string, Rule> = {
  'stack.amp': amp,
  'stack.matmul_precision': matmulPrecision,
  'stack.cudnn_tf32': tf32('convolutions'),
  'compile.in_use': compiled,
  gpu_name: (before, after) => j('large', 'either', `another GPU model (${show(before)} → ${show(after)})`),
  'loader.num_workers': workers,
  'loader.pin_memory': flag(true, 'medium', 'pin_memory off: copies from pageable memory are staged and cannot overlap compute', 'pin_memory on: copies can overlap compute'),
  'stack.cudnn_benchmark': flag(true, 'medium', 'cudnn.benchmark off: cuDNN no longer picks the fastest convolution algorithm for each shape', 'cudnn.benchmark on: cuDNN picks the fastest convolution algorithm for each shape'),
  'stack.cudnn_deterministic': flag(false, 'medium', 'cudnn.deterministic off: cuDNN may use its fastest algorithms again', 'cudnn.deterministic on: cuDNN restricted to deterministic, often slower, algorithms'),
  'stack.deterministic_algorithms': flag(false, 'medium', 'deterministic algorithms off', 'torch.use_deterministic_algorithms(True): deterministic, often slower, kernels'),
  'compile.recompiles': counter(8, (b, a) => `torch.compile recompiled ${a} times, the baseline ${b}: shapes or guarded values vary between steps, and each recompile stalls training`),
  'compile.graph_breaks': counter(2, (b, a) => `${a} graph breaks, the baseline ${b}: the compiled model runs in pieces with eager Python in between`),
  'loader.batch_size': (before, after) => j('medium', 'either', `batch size ${show(before)} → ${show(after)}: compared per sample, but the GPU's efficiency depends on it`),
  'stack.cpu_affinity': fewerIsSlower('CPUs this process may run on', 'medium', 'small'),
  torch: version('PyTorch', 'medium'),
  cuda: version('CUDA', 'medium'),
  cudnn: version('cuDNN', 'medium'),
  nccl: version('NCCL', 'medium'),
  'loader.persistent_workers': flag(true, 'small', 'persistent_workers off: workers are started again every epoch', 'persistent_workers on: workers outlive the epoch'),
  'loader.prefetch_factor': fewerIsSlower('batches prefetched per worker', 'small', 'small'),
  'stack.grad_scaler': (before, after) => j('small', 'either', `GradScaler ${before ? 'gone' : 'in use'} (${show(before)} → ${show(after)})`),
  'stack.local_world_size': (before, after) => j('small', 'either', `ranks on the host ${show(before)} → ${show(after)}: they share its CPUs and links`),
  python: version('Python', 'small'),
  platform: (before, after) => j('small', 'either', `platform ${show(before)} → ${show(after)}`),
  instrumentation: (before, after) => j('small', 'either', `steps measured another way (${show(before)} → ${show(after)}): phase shares are not strictly comparable`),
};
/** Ties of the same weight keep this order: the order of RULES, the most telling first. */
const ORDER = new Map(Object.keys(RULES).map((key, i) => [key, i]));

/** Keys that differ between any two runs and say nothing about the environment. */
const NOISE = new Set(['pid', 'host', 'session', 'hook', 'gpu_uuid', 'gpu_index', 'cuda_visible_devices']);
/** Figures of the run itself, not of its setup: how much compiling it did, when. */
const RUN_FIGURES = new Set(['compile.compiles', 'compile.unique_graphs', 'compile.compile_s', 'compile.recompiles_1m', 'compile.recompile_s_1m']);

/** Env keys flattened one level (loader.num_workers), the ones that say what ran and how. */
export function flatEnv(env: Readonly<Record<string, unknown>>): Flat {
  const flat: Flat = new Map();
  for (const [key, value] of Object.entries(env)) {
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      for (const [inner, v] of Object.entries(value as Record<string, unknown>)) flat.set(`${key}.${inner}`, v);
    } else {
      flat.set(key, value);
    }
  }
  // A hook that sends the stack fingerprint sends `compile` once torch.compile runs: without it, nothing was compiled.
  if ([...flat.keys()].some((key) => key.startsWith('stack.')) && !flat.has('compile.in_use')) flat.set('compile.in_use', false);
  return flat;
}

const unknownKey = (key: string): Judged => j('unknown', 'either', `${key} changed (stepscope does not know its usual effect on speed)`);

/** Counters of the run, compared by order of magnitude (see `counter`), absent meaning none. */
const COUNTERS = new Set(['compile.recompiles', 'compile.graph_breaks']);
/** Keys only hooks that send the stack fingerprint send: not a change where one run's hook predates them. */
const FINGERPRINT_KEY = /^(stack\.|compile\.|nccl$)/;
const hasFingerprint = (env: Flat) => [...env.keys()].some((key) => key.startsWith('stack.'));

/** What differs between two envs, each judged by its key's rule; unranked (see rankDrifts). */
export function envDrifts(baseline: Readonly<Record<string, unknown>>, current: Readonly<Record<string, unknown>>): Drift[] {
  const before = flatEnv(baseline);
  const after = flatEnv(current);
  const bothFingerprinted = hasFingerprint(before) && hasFingerprint(after);
  const keys = [...new Set([...before.keys(), ...after.keys()])]
    .filter((key) => !NOISE.has(key) && !RUN_FIGURES.has(key) && (bothFingerprinted || !FINGERPRINT_KEY.test(key)))
    .sort();
  const drifts: Drift[] = [];
  for (const key of keys) {
    const b = before.get(key) ?? null;
    const a = after.get(key) ?? null;
    if (JSON.stringify(b) === JSON.stringify(a)) continue;
    const rule = RULES[key];
    // A counter absent is none; any other key absent in one run is a change of unknown effect.
    const judged = (b === null || a === null) && !COUNTERS.has(key) ? j('unknown', 'either', `${key} reported by ${b === null ? 'this run' : 'the baseline'} only`) : rule ? rule(b, a, { before, after }) : unknownKey(key);
    if (judged) drifts.push({ key, baseline: b, current: a, ...judged });
  }
  return drifts;
}

/**
 * Most likely to explain the observed change first: by effect (large, medium, small, unknown), a
 * change that usually goes against `observed` (AMP turned on in a run that got slower) weighted
 * down to a quarter, ties in the order of RULES, then by key. Unknown keys come last.
 */
export function rankDrifts(drifts: readonly Drift[], observed: 'slower' | 'faster' | null = null): Drift[] {
  const score = (d: Drift) => WEIGHT[d.effect] * (observed && d.direction !== 'either' && d.direction !== observed ? CONTRARY : 1);
  const order = (d: Drift) => ORDER.get(d.key) ?? NODE_ORDER.get(d.key) ?? Number.MAX_SAFE_INTEGER;
  return drifts.slice().sort((x, y) => score(y) - score(x) || order(x) - order(y) || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
}

// ---------------------------------------------------------------------------------------------------
// The node inventory (a summary's `node`): the hardware around the GPUs.

/** A run's node inventory as summaries carry it (`node`), any part of it: drifts are read from what both have. */
export type NodeFacts = Partial<NodeSummary>;

/** "8× NVIDIA H100 80GB HBM3, 1× NVIDIA A10" from the inventory's models and counts. */
const gpuModels = (v: unknown) =>
  Array.isArray(v) ? v.map((m: { name?: unknown; count?: unknown }) => `${show(m.count)}× ${show(m.name)}`).join(', ') || 'none' : show(v);

type NodeRule = (before: unknown, after: unknown) => Judged | null;
const GIB = 2 ** 30;

const NODE_RULES: Record<keyof NodeFacts, NodeRule> = {
  gpu_models: (b, a) => j('large', 'either', `other GPU models (${gpuModels(b)} → ${gpuModels(a)})`),
  cores_per_gpu: (b, a) => {
    const before = num(b);
    const after = num(a);
    if (before === null || after === null) return null;
    const text = `${after} cores per GPU, the baseline ${before}`;
    if (after < before) return j(after <= before / 2 ? 'large' : 'medium', 'slower', `${text}: less CPU to feed each GPU's loader`);
    return j('small', 'faster', `${text}: more CPU to feed each GPU's loader`);
  },
  driver_version: (b, a) => j('medium', 'either', `NVIDIA driver ${show(b)} → ${show(a)}: may have taken a slower path`),
  cpu_model: (b, a) => j('medium', 'either', `another CPU model (${show(b)} → ${show(a)})`),
  gpu_count: (b, a) => j('medium', 'either', `${show(a)} GPUs on the node, the baseline ${show(b)}: its CPUs, memory and links are shared differently`),
  cores_logical: (b, a) => {
    const before = num(b);
    const after = num(a);
    if (before === null || after === null) return null;
    return j('small', after < before ? 'slower' : 'faster', `${after} CPU cores on the node, the baseline ${before}`);
  },
  cores_physical: () => null, // said by cores_logical and cores_per_gpu
  memory_bytes: (b, a) => {
    const before = num(b);
    const after = num(a);
    if (before === null || after === null) return null;
    const text = `${(after / GIB).toFixed(0)} GiB of memory, the baseline ${(before / GIB).toFixed(0)} GiB`;
    if (after < before) return j(after <= before / 2 ? 'medium' : 'small', 'slower', `${text}: less page cache for the data set`);
    return j('small', 'faster', text);
  },
  cuda_version: (b, a) => j('small', 'either', `the driver's CUDA ${show(b)} → ${show(a)}`),
};
/** Node keys rank after the env's keys of the same weight. */
const NODE_ORDER = new Map(Object.keys(NODE_RULES).map((key, i) => [`node.${key}`, ORDER.size + i]));

/** What differs between two node inventories (either may be absent: then nothing is said), most telling first. */
export function nodeDrifts(baseline: NodeFacts | null | undefined, current: NodeFacts | null | undefined, observed: 'slower' | 'faster' | null = null): Drift[] {
  if (!baseline || !current) return [];
  const drifts: Drift[] = [];
  for (const [name, rule] of Object.entries(NODE_RULES) as [keyof NodeFacts, NodeRule][]) {
    const b = baseline[name] ?? null;
    const a = current[name] ?? null;
    if (b === null || a === null || JSON.stringify(b) === JSON.stringify(a)) continue;
    const judged = rule(b, a);
    if (judged) drifts.push({ key: `node.${name}`, baseline: b, current: a, ...judged });
  }
  return rankDrifts(drifts, observed);
}

// ---------------------------------------------------------------------------------------------------
// Frequent recompiles as a cause.

/**
 * 8 recompiles a minute: dynamo's default recompile limit (torch._dynamo.config.recompile_limit,
 * formerly cache_size_limit) is 8 per code object, after which it stops compiling that frame and
 * runs it eagerly. Reaching that many in one minute of training means the guards (shapes, Python
 * values) change every few steps. Counted recompiles exclude each frame's first compile, so warm-up
 * does not count. 10% of the last minute spent compiling: each recompile costs from tens of ms (the
 * eager backend) to many seconds (inductor), so a few slow ones cost as much as many fast ones.
 */
export const RECOMPILE_THRESHOLDS = { perMinute: 8, timeShare: 0.1 } as const;

/**
 * Whether torch.compile recompiles often enough to slow the job, from the `compile` group the hook
 * sends (recompiles and compile seconds over its last minute); null when it does not, or the hook
 * does not say. `window` (the rank's) turns the rate into steps: "a recompile every 6 steps".
 */
export function recompileCause(env: Readonly<Record<string, unknown>>, window?: Pick<RankWindow, 'steps' | 'seconds'> | null): { cause: 'recompiles'; why: string } | null {
  const compile = envGroup(env, 'compile');
  const recompiles = num(compile.recompiles_1m);
  if (recompiles === null || recompiles < 1) return null;
  const seconds = num(compile.recompile_s_1m);
  const share = seconds === null ? null : Math.min(1, seconds / 60);
  const often = recompiles >= RECOMPILE_THRESHOLDS.perMinute;
  const costly = share !== null && share >= RECOMPILE_THRESHOLDS.timeShare;
  if (!often && !costly) return null;
  const parts = [`torch.compile recompiled ${recompiles} times in the last minute`];
  if (share !== null) parts.push(`${Math.round(share * 100)}% of that minute spent recompiling`);
  if (window && window.steps > 0 && window.seconds > 0) {
    const stepsPerMinute = (window.steps / window.seconds) * 60;
    parts.push(`about one recompile every ${Math.max(1, Math.round(stepsPerMinute / recompiles))} steps`);
  }
  return { cause: 'recompiles', why: parts.join(', ') };
}
