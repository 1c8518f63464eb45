import type { StepWindow } from './window.js';
import type { Env } from '../protocol/messages.js';
import type { Cause, Verdict } from '../model/verdict.js';
import { envGroup, num, REDUCED } from './stack.js';
import type { Recommendation } from '../protocol/state.js';

/**
 * What to do about a verdict: the checklist an experienced engineer works through, fitted to the job.
 *
 * Fitted: nothing the job's own setup contradicts (prefetch_factor or persistent_workers while
 * num_workers=0: workers come first; pin_memory on a CPU-only job; more workers than the cores the
 * rank can use; mixed precision, TF32 or torch.compile where they are already on).
 *
 * Ordered by expected gain, within each verdict: first what removes the named cause (its limiter
 * is the share of the step the verdict measured), then settings found off whose usual effect is
 * large (loading in the training process, fp32 math on tensor cores: 2× and more), then those of
 * medium effect (pinned memory, more workers, compile: 10–50%), then small ones (prefetch depth,
 * workers restarted each epoch: felt once per epoch), and general advice last.
 */

export interface Context {
  window: StepWindow;
  env: Env;
  hostCores: number | null;
}

const loader = (env: Env) => envGroup(env, 'loader');

/** `because` left out: the verdict itself is the fact (filled in by recommendationsFor). */
const r = (id: string, text: string, because = ''): Recommendation => ({ id, text, because });

/** What the job's setup says, where the hook told: null where it did not. */
interface Setup {
  workers: number | null;
  /** Mixed precision seen in the steps: its dtype; 'off' when steps ran without; null unknown. */
  amp: string | null;
  /** TF32 allowed for fp32 matmuls (float32_matmul_precision high/medium); null unknown. */
  matmulTf32: boolean | null;
  cudnnTf32: boolean | null;
  compiled: boolean | null;
  /** The job uses no GPU: a CPU build of torch, or CUDA never initialised, and no GPU seen. */
  cpuOnly: boolean;
  /** Loader workers this rank can run beside its training process; null unknown. */
  workerRoom: number | null;
  /** The cores that bound it, in words, and which bound it is. */
  coresWhy: string | null;
  tightBy: 'host' | 'quota' | 'affinity' | null;
  ranks: number;
  workersWait: boolean;
  /** Cores idle to this job now (the host's idle cores, within its container's unused quota); null unmeasured. */
  free: number | null;
  /** The fact behind `free`, in words. */
  freeWhy: string;
}

/** At least this much of a core idle counts as a core free for another worker. */
export const FREE_CORE = 0.5;

/**
 * Cores idle to this job now: the host's idle cores (its load by every process, this job's own
 * included), within the unused part of the container's CPU quota where it has one. Null where the
 * host's cores or load were not measured.
 */
export function freeCores(window: StepWindow, hostCores: number | null): { free: number | null; why: string } {
  const busyPct = window.host?.cpu_pct_mean ?? null;
  const process = window.process;
  const hostFree = hostCores === null || busyPct === null ? null : Math.max(0, hostCores * (1 - busyPct / 100));
  const quota = process?.cgroup_quota_cores ?? null;
  const quotaFree = quota === null || process?.cgroup_usage_cores == null ? null : Math.max(0, quota - process.cgroup_usage_cores);
  if (hostFree === null) return { free: null, why: "cores free not measured (no host CPU figures)" };
  const hostText = `the host ${busyPct!.toFixed(0)}% busy of ${hostCores} cores`;
  if (quotaFree !== null && quotaFree < hostFree) {
    return { free: quotaFree, why: `${quotaFree.toFixed(1)} cores free within the container's CPU limit of ${quota} (${hostText})` };
  }
  return { free: hostFree, why: `${hostFree.toFixed(1)} cores idle: ${hostText}` };
}

/** The loader workers a rank can run beside its training process, and the cores that bound them (the tightest of host, quota, affinity). */
export function workerRoom({ env, window, hostCores }: Context): Pick<Setup, 'workerRoom' | 'coresWhy' | 'tightBy' | 'ranks'> {
  const stack = envGroup(env, 'stack');
  // Cores the rank may use: the fewest of the host's, its container's quota and its CPU affinity, shared by the host's ranks.
  type Bound = { cores: number | null; why: string; by: 'host' | 'quota' | 'affinity' };
  const quota = num(window.process?.cgroup_quota_cores ?? null);
  const affinity = num(stack.cpu_affinity);
  const bounds: Bound[] = [
    { cores: hostCores, why: `the host's ${hostCores} cores`, by: 'host' },
    { cores: quota, why: `the container's CPU limit of ${quota} cores`, by: 'quota' },
    { cores: affinity, why: `the ${affinity} CPUs the process may run on`, by: 'affinity' },
  ];
  const tightest = bounds.filter((b) => b.cores !== null && b.cores > 0).sort((a, b) => a.cores! - b.cores!)[0] ?? null;
  const ranks = Math.max(1, num(stack.local_world_size) ?? 1);
  const cores = tightest ? Math.floor(tightest.cores! / ranks) : null;
  return {
    // One core stays with the training process.
    workerRoom: cores === null ? null : Math.max(0, cores - 1),
    coresWhy: tightest === null ? null : ranks > 1 ? `${tightest.why} shared by ${ranks} ranks` : tightest.why,
    tightBy: tightest?.by ?? null,
    ranks,
  };
}

function setup(context: Context): Setup {
  const { env, window } = context;
  const stack = envGroup(env, 'stack');
  const compile = envGroup(env, 'compile');
  const ampValue = typeof stack.amp === 'string' ? stack.amp : null;
  const precision = typeof stack.matmul_precision === 'string' ? stack.matmul_precision : null;
  const gpuSeen = window.gpu !== null || env.gpu_name != null || env.gpu_index != null;
  const noCuda = env.cuda === undefined || env.cuda === null || stack.cuda_in_use === false;
  const workers = num(loader(env).num_workers);
  const busy = num(window.process?.cpu_workers_cores ?? null);
  const partial = {
    workers,
    amp: ampValue,
    matmulTf32: precision === null ? null : precision !== 'highest',
    cudnnTf32: typeof stack.cudnn_tf32 === 'boolean' ? stack.cudnn_tf32 : null,
    compiled: typeof compile.in_use === 'boolean' ? compile.in_use : Object.keys(stack).length ? false : null,
    cpuOnly: !gpuSeen && (('torch' in env && noCuda) || stack.cuda_in_use === false),
    ...workerRoom(context),
    ...(({ free, why }) => ({ free, freeWhy: why }))(freeCores(window, context.hostCores)),
  };
  // Workers measured mostly waiting (on storage, a remote service) use little CPU: the cores do not
  // bound them. On a host with no core free, little CPU is starvation, not waiting.
  const free = partial.free;
  return { ...partial, workersWait: workers !== null && workers > 0 && busy !== null && busy < 0.5 * workers && (free === null || free >= FREE_CORE) };
}

const ampOn = (s: Setup) => s.amp !== null && REDUCED.test(s.amp);

/** No core free: more workers would only take CPU from the step (measured: 0 → 2 workers beside a neighbour holding one of two cores gained nothing). */
const noFreeCore = (s: Setup) => s.free !== null && s.free < FREE_CORE;

/** More workers, up to what the rank's cores allow and only while a core is free; null otherwise (more would only contend). */
function raiseWorkers(s: Setup, hostCores: number | null): Recommendation | null {
  const now = s.workers === null ? '' : ` (now ${s.workers})`;
  const text = `Raise DataLoader num_workers${now} so that loading runs in parallel with the step`;
  if (s.workersWait) return r('raise-num-workers', `${text}: the workers wait more than they compute, so they may outnumber the cores.`, `${s.workers} workers busy less than half of the time each`);
  if (noFreeCore(s)) return null;
  if (s.workers !== null && s.workerRoom !== null && s.workers >= s.workerRoom) return null;
  // Bound by the host alone, the host's cores say it; a tighter bound (quota, affinity, ranks sharing the host) is named with its figure.
  if (s.workerRoom === null || (s.tightBy === 'host' && s.ranks === 1)) {
    const share = s.cpuOnly ? '' : ' to share among its GPUs';
    return r('raise-num-workers', `${text}${hostCores ? `; this host has ${hostCores} cores${share}` : ''}.`, s.freeWhy);
  }
  return r('raise-num-workers', `${text}: up to ${Math.max(1, s.workerRoom)}, ${s.coresWhy} less one for the training loop.`, s.freeWhy);
}

/** At the cores' bound, or no core free: cheaper samples or more CPU, not more workers. */
function workersAtBound(s: Setup): Recommendation | null {
  if (s.workersWait) return null;
  if (noFreeCore(s)) {
    return r('no-free-core', `No core is free for more loader workers: they would only take CPU from the training step. Make each sample cheaper (cache, precompute), or give the ${s.cpuOnly ? 'job' : 'rank'} more CPU.`, s.freeWhy);
  }
  if (s.workerRoom === null || s.workers === null || s.workers < s.workerRoom || s.workers === 0) return null;
  return r('cores-at-bound', `num_workers=${s.workers} already uses ${s.coresWhy} (less one for the training loop): more workers would only contend; make each sample cheaper, or give the rank more CPU.`, `num_workers=${s.workers}; ${s.coresWhy}`);
}

/** Settings of a loader that has workers, by expected gain: pinned copies, then prefetch depth, then restarts per epoch. */
function loaderSettings(context: Context, s: Setup): Recommendation[] {
  const l = loader(context.env);
  const out: Recommendation[] = [];
  if (l.pin_memory === false && !s.cpuOnly) out.push(r('pin-memory', 'Turn on pin_memory=True and copy with .to(device, non_blocking=True).', 'pin_memory=False on a job that uses a GPU'));
  // Prefetching and persistence are properties of worker processes: with num_workers=0 there are none.
  if (s.workers !== null && s.workers > 0) {
    if (typeof l.prefetch_factor === 'number' && l.prefetch_factor < 4) out.push(r('prefetch', `Raise prefetch_factor (now ${l.prefetch_factor}) so workers keep more batches ready.`, `prefetch_factor=${l.prefetch_factor} with ${s.workers} workers`));
    if (l.persistent_workers === false) out.push(r('persistent-workers', 'Set persistent_workers=True so workers are not restarted every epoch.', `persistent_workers=False with ${s.workers} workers`));
  }
  return out;
}

/** The loader advice of an input-bound rank: workers (or why not more), then the other settings. */
function loaderAdvice(context: Context, s: Setup): Recommendation[] {
  return present([raiseWorkers(s, context.hostCores), workersAtBound(s), ...loaderSettings(context, s)]);
}

const present = (list: Array<Recommendation | null>): Recommendation[] => list.filter((x): x is Recommendation => x !== null);

const offline = (s: Setup) => r('cache-or-offline-augmentation', `Cache decoded samples, and move heavy augmentation offline (precompute it)${s.cpuOnly ? '' : ' or onto the GPU'}.`);
const changed = (s: Setup) => r('what-changed', `Compare with the last good run (stepscope compare): a new ${s.cpuOnly ? 'PyTorch, library' : 'driver, CUDA, PyTorch'} or data pipeline may have taken a slower path.`);

/** Faster math on the tensor cores, by expected gain: bf16 autocast (2× and more), then TF32 for what stays fp32. */
function precisionAdvice(s: Setup): Recommendation[] {
  const out: Recommendation[] = [];
  if (s.cpuOnly) return out;
  if (s.amp === 'off') out.push(r('use-bf16-autocast', 'Mixed precision is off: run the forward pass under torch.autocast("cuda", dtype=torch.bfloat16) (Ampere and newer; float16 with a GradScaler before them).', 'the steps ran without autocast on a GPU'));
  const tf32Off = [
    s.matmulTf32 === false ? { what: 'matmuls', flag: 'torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision("high"))' } : null,
    s.cudnnTf32 === false ? { what: 'convolutions', flag: 'torch.backends.cudnn.allow_tf32 = True' } : null,
  ].filter((off) => off !== null);
  if (tf32Off.length) {
    out.push(r('allow-tf32', `TF32 is off for fp32 ${tf32Off.map((off) => off.what).join(' and ')}: set ${tf32Off.map((off) => off.flag).join(' and ')} to run them on the tensor cores.`, `TF32 off for ${tf32Off.map((off) => off.what).join(' and ')} on a GPU`));
  }
  return out;
}

/** The healthy state's advice, without what the job already does. */
function fasterCompute(s: Setup): Recommendation {
  const ways = [ampOn(s) || s.cpuOnly ? null : 'mixed precision (bf16)', s.compiled ? null : 'torch.compile', 'fused kernels', 'a larger batch'].filter(Boolean);
  return r('faster-compute', `Compute-bound, the healthy state: to go faster, use ${ways.slice(0, -1).join(', ')} or ${ways.at(-1)}.`);
}

function tensorCoresIdle(s: Setup): Recommendation[] {
  const fit = precisionAdvice(s);
  if (fit.length) return fit;
  if (ampOn(s)) {
    return [r('use-tensor-cores', `Mixed precision is on (${s.amp}) yet the tensor cores sit idle: check that the heavy layers run inside autocast, and that matmul dimensions (hidden sizes, batch × sequence) are multiples of 8.`)];
  }
  return [r('use-tensor-cores', 'The tensor cores sit idle: train in bf16/fp16 with torch.autocast, or at least allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, cudnn.allow_tf32 = True).')];
}

/** What to do about frequent torch.compile recompiles (stack.ts recompileCause), most effective first. */
export const RECOMPILE_ADVICE: readonly Recommendation[] = [
  r('mark-dynamic', 'torch.compile recompiles for new input shapes: mark the varying dimensions dynamic (torch._dynamo.mark_dynamic(x, dim)) or compile with dynamic=True; TORCH_LOGS=recompiles names the guard that fails.'),
  r('pad-shapes', 'Or pad inputs to a few fixed sizes (bucket sequence lengths to multiples of 64, drop_last=True for the last batch) so that a handful of graphs serve every step.'),
  r('guarded-values', 'If the guard is a Python value (a step counter, a flag, a float learning rate passed in), pass it as a tensor or keep it out of the compiled function.'),
];

const GPU_SHARED = r(
  'gpu-to-itself',
  'Another process shares this GPU: give the job the GPU to itself (a dedicated node, or a scheduler that does not time-slice or oversubscribe GPUs), or move the other workload to another GPU or MIG instance; time-sliced CUDA contexts take turns on the SMs.',
);

export function recommendationsFor(verdict: Verdict, cause: Cause, context: Context): Recommendation[] {
  const s = setup(context);
  // Advice without a fact of its own rests on the verdict and its cause; on a CPU-only job, no line speaks of GPUs.
  const fact = `${verdict}${cause ? ` (${cause})` : ''}${s.cpuOnly ? ', CPU only' : ''}`;
  return adviceFor(verdict, cause, context, s).map((line) => (line.because ? line : { ...line, because: fact }));
}

function adviceFor(verdict: Verdict, cause: Cause, context: Context, s: Setup): Recommendation[] {
  const OFFLINE = offline(s);
  const CHANGED = changed(s);
  if (cause === 'recompiles') return [...RECOMPILE_ADVICE];
  if (cause === 'gpu-shared') return [GPU_SHARED];
  switch (verdict) {
    case 'input-bound':
      switch (cause) {
        case 'cgroup-throttled':
          return [
            r('raise-cpu-limit', "The container's CPU limit throttles the loader: raise resources.limits.cpu of the training container (or drop the limit and keep the request)."),
            r('workers-within-quota', 'Keep num_workers within the CPU limit: more workers than cores under a quota only adds throttling.'),
            OFFLINE,
          ];
        case 'io-wait':
          return [
            r('faster-storage', 'The loader waits on storage: stage the data set on local NVMe or in memory, or read it as large sequential shards (WebDataset, TFRecord).'),
            ...loaderAdvice(context, s),
          ];
        case 'contention':
          return present([
            r('find-neighbour', 'Something other than this job uses most of the node\'s CPU: find it (top, or the node\'s pods in your cluster tools) and move it or this job; give this pod CPU requests that match its loaders.'),
            raiseWorkers(s, context.hostCores),
          ]);
        case 'memory-pressure':
          return [
            r('host-memory', 'The host is short of memory: loaders stall on page reclaim and swap-in. Lower the loaders\' memory (fewer prefetched batches, smaller shuffle buffers), or give the pod more memory.'),
            OFFLINE,
          ];
        case 'cpu-saturated':
          return [
            OFFLINE,
            r('cpu-balanced-instance', s.cpuOnly ? 'The host CPU is at its limit: choose an instance with more cores.' : 'The host CPU is at its limit: choose an instance with more CPU per GPU rather than a bigger GPU.'),
            ...present([raiseWorkers(s, context.hostCores)]),
            ...loaderSettings(context, s),
          ];
        case 'workers-starve-step': {
          const busy = context.window.process?.cpu_workers_cores ?? null;
          const fact = `${s.workers ?? context.window.process?.workers ?? '?'} loader workers using ${busy === null ? '?' : busy.toFixed(1)} cores; the training thread waited for a CPU ${Math.round((context.window.process?.train_wait_share ?? 0) * 100)}% of the time`;
          return [
            r('fewer-or-niced-workers', `The loader workers take the CPU the training step needs: use fewer of them${s.workers ? ` (now ${s.workers})` : ''}, or lower their priority (os.nice(10) in the DataLoader's worker_init_fn) so the step runs first.`, fact),
            r('preprocess-offline', 'Do the heavy per-sample work once, offline (pre-tokenise, pre-decode, pre-resize), so the workers need little CPU while training.', fact),
            r('more-cpu', `Give the job more CPU${s.cpuOnly ? '' : ' per GPU'}, or move what else runs on this node elsewhere.`, s.freeWhy),
          ];
        }
        case 'few-workers':
          return [...loaderAdvice(context, s), OFFLINE];
        default:
          return [...loaderAdvice(context, s), OFFLINE, r('check-storage', 'If the data is remote, measure its read latency: remote storage stalls without showing I/O wait.'), CHANGED];
      }
    case 'transfer-bound':
      return present([
        loader(context.env).pin_memory === true || s.cpuOnly ? null : r('pin-memory', 'Turn on pin_memory=True in the DataLoader: copies from pageable memory are staged and serialized.'),
        r('non-blocking-copies', 'Copy with .to(device, non_blocking=True) from pinned memory so the copy overlaps compute; prefetch the next batch to the GPU on a side stream.'),
        r('smaller-transfers', 'Send less: uint8 images instead of float32, decode and normalise on the GPU.'),
      ]);
    case 'host-bound':
      if (cause === 'evaluation') {
        const share = context.window.eval_share;
        return [
          r('evaluate-less-often', `Evaluation inside the training loop took ${share === null ? 'much' : `${Math.round(share * 100)}%`} of the time: evaluate less often, on a fixed subset of the validation set, or in another process on saved checkpoints.`),
          r('eval-batch-size', 'Make evaluation cheaper: a larger batch size under torch.inference_mode(), without per-batch .item() calls.'),
        ];
      }
      if (cause === 'gpu-idle-in-compute') {
        return [
          r('launch-overhead', `The GPU is mostly idle during compute: the model is bound by Python and kernel launches. Try ${s.compiled ? "CUDA graphs (torch.compile(mode='reduce-overhead'))" : 'torch.compile or CUDA graphs'}, larger batches, fused optimizers.`),
          r('avoid-syncs', 'Avoid .item(), .cpu() and printing tensors inside the step: each one waits for the GPU.'),
          CHANGED,
        ];
      }
      return [
        r('reduce-logging', 'Log and compute metrics less often, and avoid .item()/.cpu() synchronisations every step.'),
        // Where evaluation was measured apart and is not the cause, it is not what to cut.
        context.window.eval_share === null
          ? r('eval-checkpoint-frequency', 'Run evaluation and checkpoints less often, or asynchronously.')
          : r('eval-checkpoint-frequency', 'Write checkpoints less often, or asynchronously.', `evaluation measured apart: ${Math.round(context.window.eval_share * 100)}% of step time`),
        r('wrap-phases', 'If this time is real work (e.g. the optimizer step), wrap it in scope.phase("compute") so it is counted where it belongs.'),
      ];
    case 'throttled':
      switch (cause) {
        case 'thermal':
          return [
            r('check-cooling', 'The GPU slows itself down on temperature: check its cooling, fans and airflow, and the node\'s inlet temperature (nvidia-smi -q -d TEMPERATURE,PERFORMANCE).'),
            r('report-node', 'If only this node runs hot, report it to the cluster operators; move the job meanwhile.'),
          ];
        case 'power':
          return [
            r('check-power-limit', 'The GPU is held at its power limit: check power.limit against the default (nvidia-smi -q -d POWER) and the node\'s power policy.'),
            r('report-node', 'A power brake (HwPowerBrakeSlowdown) points at the node\'s power supply: report it to the cluster operators.'),
          ];
        case 'hw-slowdown':
          return [r('report-node', 'HwSlowdown is a hardware protection (power or temperature signal from the board): report the node to the cluster operators and move the job.')];
        default:
          return [
            r('check-clocks', 'The GPU is busy below its clocks with no throttle reason: check for locked or application clocks (nvidia-smi -q -d CLOCK) and reset them (nvidia-smi -rgc / -rac).'),
            CHANGED,
          ];
      }
    case 'communication-bound':
      if (cause === 'slow-rank') {
        return [
          r('fix-slow-rank', `The collectives wait for a slower rank (named in the evidence): look at that rank's own verdict — its loader, ${s.cpuOnly ? 'its CPU' : "its GPU's clocks"}, its node — rather than at the network.`),
          r('balance-work', 'If the ranks get uneven work (variable sequence lengths, uneven shards), bucket by length or balance the shards.'),
        ];
      }
      return [
        r('overlap-communication', 'Let the all-reduce overlap the backward pass: check DDP bucket_cap_mb (larger buckets for many small parameters), avoid find_unused_parameters=True unless needed, and keep gradient accumulation under no_sync().'),
        r('compress-gradients', 'Send less: bf16 gradient compression (DDP comm hooks), or a sharded optimizer (FSDP/ZeRO) that reduce-scatters instead of all-reducing.'),
        s.cpuOnly
          ? r('check-network', "Compare the collectives' bandwidth in the evidence with the link: gloo over the right interface (GLOO_SOCKET_IFNAME), not a management network.")
          : r('check-network', "Compare the collectives' bandwidth in the evidence with the link: the NCCL backend over the right interface (NCCL_SOCKET_IFNAME, InfiniBand/EFA), not gloo or a management network."),
      ];
    case 'memory-bound':
      switch (cause) {
        case 'fragmentation':
          return [
            r('expandable-segments', 'The allocator\'s cache is cut into pieces too small to reuse: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb), and keep tensor shapes steady (pad variable lengths to buckets).'),
            r('free-memory', `Lower the peak: a smaller batch with gradient accumulation, activation checkpointing${ampOn(s) ? '' : ', or bf16'}.`),
          ];
        case 'near-capacity':
          return [
            r('free-memory', `The GPU's memory is almost full: lower the peak with a smaller batch and gradient accumulation, activation checkpointing, ${ampOn(s) ? '' : 'bf16, '}or a sharded optimizer.`),
            r('find-growth', 'If memory grows over time (see the forecast), look for tensors kept across steps: losses appended without .item(), growing caches, graphs kept alive.'),
          ];
        default:
          return [
            r('allocator-retries', 'The caching allocator keeps freeing its cache and synchronising to satisfy requests: lower the peak (smaller batch, activation checkpointing) or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.'),
          ];
      }
    case 'compute-bound':
      switch (cause) {
        case 'launch-bound':
          return [
            r('launch-overhead', `The GPU is busy but its SMs are mostly idle: many tiny kernels. ${s.compiled ? "Capture the step in CUDA graphs (torch.compile(mode='reduce-overhead'))" : 'Fuse them with torch.compile or capture the step in CUDA graphs'}, and use larger batches.`),
            r('avoid-syncs', 'Avoid .item(), .cpu() and printing tensors inside the step: each one waits for the GPU.'),
          ];
        case 'memory-bandwidth':
          return [
            r('bandwidth-bound', `The kernels wait on GPU memory bandwidth: fuse element-wise operations${s.compiled ? '' : ' (torch.compile)'}, ${ampOn(s) ? '' : 'use bf16 to halve the bytes, '}and prefer fused optimizers and attention kernels.`),
          ];
        case 'tensor-cores-idle':
          return tensorCoresIdle(s);
        default:
          return [...precisionAdvice(s), fasterCompute(s)];
      }
    default:
      return [];
  }
}
