import type { Env } from '../protocol/messages.js';
import type { Cause, Verdict } from './verdict.js';
import type { RankWindow } from './window.js';

/** What to do about a verdict, most useful first: the checklist an experienced engineer works through. */

export interface Recommendation {
  id: string;
  text: string;
}

interface Context {
  window: RankWindow;
  env: Env;
  hostCores: number | null;
}

function loader(env: Env): Record<string, unknown> {
  return (env.loader as Record<string, unknown> | undefined) ?? {};
}

const r = (id: string, text: string): Recommendation => ({ id, text });

function raiseWorkers({ env, hostCores }: Context): Recommendation {
  const workers = loader(env).num_workers;
  const now = typeof workers === 'number' ? ` (now ${workers})` : '';
  const room = hostCores ? `; this host has ${hostCores} cores to share among its GPUs` : '';
  return r('raise-num-workers', `Raise DataLoader num_workers${now} so that loading runs in parallel with the step${room}.`);
}

function loaderSettings({ env }: Context): Recommendation[] {
  const l = loader(env);
  const out: Recommendation[] = [];
  if (l.persistent_workers === false) out.push(r('persistent-workers', 'Set persistent_workers=True so workers are not restarted every epoch.'));
  if (l.num_workers !== 0 && typeof l.prefetch_factor === 'number' && l.prefetch_factor < 4) {
    out.push(r('prefetch', `Raise prefetch_factor (now ${l.prefetch_factor}) so workers keep more batches ready.`));
  }
  if (l.pin_memory === false) out.push(r('pin-memory', 'Turn on pin_memory=True and copy with .to(device, non_blocking=True).'));
  return out;
}

const OFFLINE = r('cache-or-offline-augmentation', 'Cache decoded samples, and move heavy augmentation offline (precompute it) or onto the GPU.');
const CHANGED = r('what-changed', 'Compare with the last good run (stepscope compare): a new driver, CUDA, PyTorch or data pipeline may have taken a slower path.');

export function recommendationsFor(verdict: Verdict, cause: Cause, context: Context): Recommendation[] {
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
            raiseWorkers(context),
            ...loaderSettings(context),
          ];
        case 'contention':
          return [
            r('find-neighbour', 'Something other than this job uses most of the node\'s CPU: find it (top, or the node\'s pods in your cluster tools) and move it or this job; give this pod CPU requests that match its loaders.'),
            raiseWorkers(context),
          ];
        case 'memory-pressure':
          return [
            r('host-memory', 'The host is short of memory: loaders stall on page reclaim and swap-in. Lower the loaders\' memory (fewer prefetched batches, smaller shuffle buffers), or give the pod more memory.'),
            OFFLINE,
          ];
        case 'cpu-saturated':
          return [
            OFFLINE,
            r('cpu-balanced-instance', 'The host CPU is at its limit: choose an instance with more CPU per GPU rather than a bigger GPU.'),
            raiseWorkers(context),
            ...loaderSettings(context),
          ];
        case 'few-workers':
          return [raiseWorkers(context), ...loaderSettings(context), OFFLINE];
        default:
          return [raiseWorkers(context), ...loaderSettings(context), OFFLINE, r('check-storage', 'If the data is remote, measure its read latency: remote storage stalls without showing I/O wait.'), CHANGED];
      }
    case 'transfer-bound':
      return [
        r('pin-memory', 'Turn on pin_memory=True in the DataLoader: copies from pageable memory are staged and serialized.'),
        r('non-blocking-copies', 'Copy with .to(device, non_blocking=True) from pinned memory so the copy overlaps compute; prefetch the next batch to the GPU on a side stream.'),
        r('smaller-transfers', 'Send less: uint8 images instead of float32, decode and normalise on the GPU.'),
      ];
    case 'host-bound':
      if (cause === 'gpu-idle-in-compute') {
        return [
          r('launch-overhead', 'The GPU is mostly idle during compute: the model is bound by Python and kernel launches. Try torch.compile or CUDA graphs, larger batches, fused optimizers.'),
          r('avoid-syncs', 'Avoid .item(), .cpu() and printing tensors inside the step: each one waits for the GPU.'),
          CHANGED,
        ];
      }
      return [
        r('reduce-logging', 'Log and compute metrics less often, and avoid .item()/.cpu() synchronisations every step.'),
        r('eval-checkpoint-frequency', 'Run evaluation and checkpoints less often, or asynchronously.'),
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
          r('fix-slow-rank', 'The collectives wait for a slower rank (named in the evidence): look at that rank\'s own verdict — its loader, its GPU\'s clocks, its node — rather than at the network.'),
          r('balance-work', 'If the ranks get uneven work (variable sequence lengths, uneven shards), bucket by length or balance the shards.'),
        ];
      }
      return [
        r('overlap-communication', 'Let the all-reduce overlap the backward pass: check DDP bucket_cap_mb (larger buckets for many small parameters), avoid find_unused_parameters=True unless needed, and keep gradient accumulation under no_sync().'),
        r('compress-gradients', 'Send less: bf16 gradient compression (DDP comm hooks), or a sharded optimizer (FSDP/ZeRO) that reduce-scatters instead of all-reducing.'),
        r('check-network', 'Compare the collectives\' bandwidth in the evidence with the link: the NCCL backend over the right interface (NCCL_SOCKET_IFNAME, InfiniBand/EFA), not gloo or a management network.'),
      ];
    case 'memory-bound':
      switch (cause) {
        case 'fragmentation':
          return [
            r('expandable-segments', 'The allocator\'s cache is cut into pieces too small to reuse: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb), and keep tensor shapes steady (pad variable lengths to buckets).'),
            r('free-memory', 'Lower the peak: a smaller batch with gradient accumulation, activation checkpointing, or bf16.'),
          ];
        case 'near-capacity':
          return [
            r('free-memory', 'The GPU\'s memory is almost full: lower the peak with a smaller batch and gradient accumulation, activation checkpointing, bf16, or a sharded optimizer.'),
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
            r('launch-overhead', 'The GPU is busy but its SMs are mostly idle: many tiny kernels. Fuse them with torch.compile or capture the step in CUDA graphs, and use larger batches.'),
            r('avoid-syncs', 'Avoid .item(), .cpu() and printing tensors inside the step: each one waits for the GPU.'),
          ];
        case 'memory-bandwidth':
          return [
            r('bandwidth-bound', 'The kernels wait on GPU memory bandwidth: fuse element-wise operations (torch.compile), use bf16 to halve the bytes, and prefer fused optimizers and attention kernels.'),
          ];
        case 'tensor-cores-idle':
          return [
            r('use-tensor-cores', 'The tensor cores sit idle: train in bf16/fp16 with torch.autocast, or at least allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, cudnn.allow_tf32 = True).'),
          ];
        default:
          return [
            r('faster-compute', 'Compute-bound, the healthy state: to go faster, use mixed precision (bf16), torch.compile, fused kernels or a larger batch.'),
          ];
      }
    default:
      return [];
  }
}
