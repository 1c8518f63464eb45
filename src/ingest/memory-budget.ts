import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { readMemoryLimit } from '../counters/cgroup-memory.js';
import type { Logger } from '../log/log.js';
import { IMAGE_NODE_OPTIONS } from './node-flags.js';
import { DEFAULT_LIMITS, type IngestLimits } from './limits.js';

/**
 * How many jobs and ranks a sidecar can hold in the memory it has: its container's limit and the
 * heap Node was given. Defaults are lowered to fit; values set explicitly that cannot fit are
 * refused, saying which setting to change and to what. planMemory is pure; memoryFacts and
 * fitToMemory, at the end, are the thin I/O that serve() calls.
 */

const MiB = 1024 * 1024;

/**
 * What one rank can hold at most, rounded up from 655 KiB measured (`node --expose-gc
 * scripts/bench-journal.mjs rank-memory`): its 10 minutes of 250 ms step slices, 256 recent steps,
 * its histograms, process samples, 16 sessions, its part of a snapshot.
 */
export const RANK_BYTES = 1 * MiB;
/** The heap the ranks may fill; the rest is for GPU/host history, the stream, summaries and garbage. */
const HEAP_SHARE = 0.5;
/**
 * What the container holds besides Node's heap: the sidecar (40 MiB in the image once ready, its
 * heap still small) and an exec probe's short-lived Node process beside it (17 MiB more), with room
 * for socket and journal buffers (BENCHMARKS.md, "The image").
 */
export const BESIDE_HEAP_BYTES = 96 * MiB;

export interface MemoryFacts {
  /** The container's memory limit; null: none (a workstation, an unlimited cgroup). */
  limitBytes: number | null;
  /** Where it was read, for the log. */
  limitSource: string;
  /** V8's heap_size_limit: old space and young generation. */
  heapBytes: number;
  /** The flag that set the heap (as given: `NODE_OPTIONS=--max-old-space-size=192`); null: Node's default. */
  heapFlag: string | null;
}

export interface MemoryPlan {
  maxJobs: number;
  maxRanksPerJob: number;
  /** What the ranks may hold: a share of the heap the sidecar counts on. */
  budgetBytes: number;
  /** The heap it counts on: Node's, or less where the container leaves less. */
  roomBytes: number;
  /** The defaults were lowered to fit. */
  lowered: boolean;
  /** Said at start beside the plan: a heap larger than the container leaves it (Node's default). */
  warning: string | null;
}

export class MemoryError extends Error {}

// Down: what the sidecar has is never said to be more than it is.
const mib = (bytes: number) => `${Math.floor(bytes / MiB)} MiB`;
/** A Kubernetes quantity, rounded up to 16 MiB. */
const quantity = (bytes: number) => `${Math.ceil(bytes / (16 * MiB)) * 16}Mi`;

/** The heap flag in effect, from node's own arguments or NODE_OPTIONS; the percentage wins, as in Node. */
export function heapFlag(execArgv: readonly string[], nodeOptions: string | undefined): string | null {
  const given = [...execArgv.map((arg) => ({ arg, where: 'node' })), ...(nodeOptions ?? '').split(/\s+/).map((arg) => ({ arg, where: 'NODE_OPTIONS=' }))];
  const found = given.filter(({ arg }) => /^--max[-_]old[-_]space[-_]size(-percentage)?=/.test(arg));
  const flag = found.filter(({ arg }) => arg.includes('percentage')).at(-1) ?? found.at(-1);
  return flag ? (flag.where === 'node' ? `node ${flag.arg}` : `NODE_OPTIONS=${flag.arg}`) : null;
}

/** The fix the messages give: the image's NODE_OPTIONS whole, since one set replaces it. */
const AS_THE_IMAGE = `NODE_OPTIONS="${IMAGE_NODE_OPTIONS}"`;

const percentage = (flag: string | null) => {
  const match = flag ? /percentage=(\d+(?:\.\d+)?)%?$/.exec(flag) : null;
  return match ? Number(match[1]) / 100 : null;
};

/** The memory limit under which the sidecar would count on `room` of heap, its heap set as the image sets it. */
function limitFor(room: number, facts: MemoryFacts): number {
  const share = percentage(facts.heapFlag) ?? 0.5;
  // The young generation Node adds to a heap sized by percentage (a few MiB up to 1 GiB).
  const young = percentage(facts.heapFlag) !== null && facts.limitBytes !== null ? Math.max(0, facts.heapBytes - share * facts.limitBytes) : 0;
  return Math.max(room / share, room + BESIDE_HEAP_BYTES, (BESIDE_HEAP_BYTES + young) / (1 - share));
}

/** What to do for `room` of heap: more memory for the container, or a larger heap where there is no limit. */
function moreMemory(room: number, facts: MemoryFacts): string {
  if (facts.limitBytes === null) return `raise the heap to ${mib(room)} (NODE_OPTIONS=--max-old-space-size=${Math.ceil(room / MiB)})`;
  const raise = `raise resources.limits.memory to ${quantity(limitFor(room, facts))}`;
  return percentage(facts.heapFlag) === null ? `${raise} with ${AS_THE_IMAGE}` : raise;
}

/** The heap the sidecar counts on, refusing a heap flag that gives Node more than its container leaves it. */
function room(facts: MemoryFacts): { room: number; warning: string | null } {
  if (facts.limitBytes === null) return { room: facts.heapBytes, warning: null };
  const leaves = facts.limitBytes - BESIDE_HEAP_BYTES;
  const where = `the container's ${mib(facts.limitBytes)} memory limit leaves ${mib(Math.max(0, leaves))} beside the ${mib(BESIDE_HEAP_BYTES)} Node needs outside its heap`;
  if (leaves < RANK_BYTES / HEAP_SHARE) {
    const oneJob = DEFAULT_LIMITS.maxRanksPerJob * RANK_BYTES / HEAP_SHARE;
    throw new MemoryError(`${where}, too little for one rank: raise resources.limits.memory to ${quantity(limitFor(oneJob, facts))} (one job of ${DEFAULT_LIMITS.maxRanksPerJob} ranks)`);
  }
  if (facts.heapBytes <= leaves) return { room: facts.heapBytes, warning: null };
  if (facts.heapFlag === null) {
    return { room: leaves, warning: `Node's default heap (${mib(facts.heapBytes)}) is larger than ${where}: what the sidecar holds is sized to ${mib(leaves)}; set ${AS_THE_IMAGE} for Node to collect garbage within it too` };
  }
  const fix = percentage(facts.heapFlag) === null ? `set ${AS_THE_IMAGE} (a heap of half the limit, as the image sets it), or ` : '';
  throw new MemoryError(`${facts.heapFlag} gives Node a ${mib(facts.heapBytes)} heap, more than ${where}: ${fix}raise resources.limits.memory to ${quantity(Math.max(limitFor(0, facts), facts.heapBytes + BESIDE_HEAP_BYTES))}`);
}

/**
 * The jobs and ranks that fit. Unset limits take their defaults, lowered to fit: ranks are kept
 * before jobs (a rank refused loses its steps; a job fewer only forgets ended runs sooner).
 */
export function planMemory(facts: MemoryFacts, requested: { maxJobs?: number; maxRanksPerJob?: number }): MemoryPlan {
  const { room: roomBytes, warning } = room(facts);
  const budgetBytes = Math.floor(roomBytes * HEAP_SHARE);
  const fits = Math.floor(budgetBytes / RANK_BYTES);
  const { maxJobs, maxRanksPerJob } = requested;
  const ranks = maxRanksPerJob ?? Math.min(DEFAULT_LIMITS.maxRanksPerJob, Math.floor(fits / (maxJobs ?? 1)));
  const jobs = maxJobs ?? Math.min(DEFAULT_LIMITS.maxJobs, Math.floor(fits / Math.max(1, ranks)));
  const plan = { maxJobs: jobs, maxRanksPerJob: ranks, budgetBytes, roomBytes, lowered: (maxJobs === undefined && jobs < DEFAULT_LIMITS.maxJobs) || (maxRanksPerJob === undefined && ranks < DEFAULT_LIMITS.maxRanksPerJob), warning };
  if (jobs >= 1 && ranks >= 1 && jobs * ranks <= fits) return plan;
  // Refused: what was set, with the fewest the unset one could be lowered to.
  const j = maxJobs ?? 1;
  const r = maxRanksPerJob ?? 1;
  const need = j * r * RANK_BYTES;
  const terms = [maxJobs === undefined ? 'one job' : `--max-jobs ${j}`, maxRanksPerJob === undefined ? 'one rank' : `--max-ranks ${r}`];
  const has = `the ${mib(budgetBytes)} the sidecar keeps for ranks (half of ${facts.limitBytes === null ? `its ${mib(roomBytes)} heap` : `the ${mib(roomBytes)} of heap its ${mib(facts.limitBytes)} memory limit allows`})`;
  const lower = [
    maxRanksPerJob !== undefined && Math.floor(fits / j) >= 1 ? `--max-ranks to ${Math.floor(fits / j)} (STEPSCOPE_MAX_RANKS)` : null,
    maxJobs !== undefined && Math.floor(fits / r) >= 1 ? `--max-jobs to ${Math.floor(fits / r)} (STEPSCOPE_MAX_JOBS)` : null,
  ].filter((step): step is string => step !== null);
  const given = [maxJobs === undefined ? null : '--max-jobs', maxRanksPerJob === undefined ? null : '--max-ranks'].filter((name): name is string => name !== null);
  const steps = [lower.length ? `lower ${lower.join(' or ')}` : null, given.length ? `leave ${given.join(' and ')} unset to take what fits` : null, moreMemory(need / HEAP_SHARE, facts)];
  throw new MemoryError(`${terms.join(' × ')} × ${mib(RANK_BYTES)} per rank = ${mib(need)}, more than ${has}: ${steps.filter(Boolean).join(', or ')}`);
}

/** One line for the log: the limits and the memory they were sized from. */
export function describePlan(plan: MemoryPlan, facts: MemoryFacts): string {
  const lowered = plan.lowered ? ` (lowered from ${DEFAULT_LIMITS.maxJobs} × ${DEFAULT_LIMITS.maxRanksPerJob} to fit)` : '';
  const flag = facts.heapFlag ?? "Node's default";
  const heap = plan.roomBytes === facts.heapBytes ? `a ${mib(facts.heapBytes)} heap (${flag})` : `the ${mib(plan.roomBytes)} the memory limit leaves of a ${mib(facts.heapBytes)} heap (${flag})`;
  const limit = facts.limitBytes === null ? `; no container memory limit (${facts.limitSource})` : `, under a ${mib(facts.limitBytes)} memory limit (${facts.limitSource})`;
  return `memory: up to ${plan.maxJobs} job${plan.maxJobs === 1 ? '' : 's'} × ${plan.maxRanksPerJob} ranks${lowered}, ${mib(plan.budgetBytes)} for them: half of ${heap}${limit}`;
}

/** The facts of this process: its container's limit, its heap and the flag that set it. */
export async function memoryFacts(): Promise<MemoryFacts> {
  const limit = await readMemoryLimit();
  return { limitBytes: limit.bytes, limitSource: limit.source, heapBytes: getHeapStatistics().heap_size_limit, heapFlag: heapFlag(process.execArgv, process.env.NODE_OPTIONS) };
}

/**
 * How much V8 grows the heap past what the last full collection left, as a percentage: its default
 * (up to 4x under a high allocation rate) took the sidecar from 100 to 195 MiB in 20 s of 8 hooks
 * at 2,000 steps/s, nearly all of it garbage; 1.5x held it at 129 MiB (BENCHMARKS.md, "Memory under a burst").
 */
const HEAP_GROWING_PERCENT = 50;

/**
 * Sets the heap's growth to HEAP_GROWING_PERCENT and has it apply now. V8 sizes the old space's next
 * limit only as a full collection ends, so the flag alone left the limit the start's own collection
 * had set with V8's default factor: a sidecar fed from its first second (no idle collection in
 * between) then grew its old space to that limit before the new factor ever applied (8 hooks at
 * 10,000 steps/s, the journal on: old space 24 -> 48 MiB in 60 s with no full collection, RSS
 * 121 -> 160 MiB; with this one collection, 5-12 ms once, 133-139 MiB flat: BENCHMARKS.md,
 * "The heap's growth applied from the start"). `gc` from a new context: --expose-gc set here gives
 * it to contexts made after, and is unset again so no other code gets it (a process started with
 * --expose-gc has its own).
 */
function setHeapGrowth(): void {
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed();
  setFlagsFromString('--expose-gc');
  try {
    (runInNewContext('gc') as () => void)();
  } catch {
    // A Node whose new contexts have no `gc`: the factor then applies from the first full collection, as before.
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
}

/** The limits to run with: those asked for, the rest sized to the memory there is; logged, or refused. */
export async function fitToMemory(requested: Partial<IngestLimits>, log: Logger): Promise<Partial<IngestLimits>> {
  setHeapGrowth();
  const facts = await memoryFacts();
  const plan = planMemory(facts, requested);
  log.info({ limit_bytes: facts.limitBytes, heap_bytes: facts.heapBytes, heap_flag: facts.heapFlag, budget_bytes: plan.budgetBytes, max_jobs: plan.maxJobs, max_ranks: plan.maxRanksPerJob }, describePlan(plan, facts));
  if (plan.warning) log.warn(plan.warning);
  return { ...requested, maxJobs: plan.maxJobs, maxRanksPerJob: plan.maxRanksPerJob };
}
