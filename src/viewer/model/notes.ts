import type { RankState, Waste } from '../../protocol/state.js';
import { processList } from '../../model/process-list.js';
import { fixValue, fixValueText } from '../../model/fix-value.js';
import type { Part } from './rows.js';

/**
 * The lines under the tables: the ranks' memory (and when it runs out at this rate), what the job's
 * bottlenecks cost so far, the other processes on its GPUs and the busiest others on its nodes. Each
 * is null (or empty) where the sidecars did not measure it. Pure; the same text for the full-screen
 * viewer and the plain lines.
 */
export interface Notes {
  /** "memory rank 0: 31.2 GiB allocated, 40.0 GiB reserved of 80.0 GiB (50%), +12.0 MiB/s, out of memory in ~40 min" */
  memory: string | null;
  /** "lost 3.1 GPU-h (22%): input 2.5 GPU-h, throttle 0.6 GPU-h · 1.2 MJ · 7.75 at 2.5 a GPU-hour" */
  waste: string | null;
  /** Per GPU of the job that others share: "gpu 0: ./gpu_burn (pid 11345) 15.3 GiB, …". */
  gpuOthers: string[];
  /** Per node: "node-a: python3 (pid 4242) 5.1 cores, …", with what could not be seen. */
  cpuOthers: string[];
  /** "MFU rank 0 31% (bf16 peak 989 TFLOP/s, H100 SXM), rank 1 …"; null where no hook gave a FLOP count. */
  mfu?: string | null;
  /** "fix contention: → 1.57× as fast; …": what fixing the job's first cause would buy; null without one. */
  fix?: string | null;
}

const GIB = 1024 ** 3;
const gib = (bytes: number) => `${(bytes / GIB).toFixed(1)} GiB`;
const mib = (m: number) => (m >= 1024 ? `${(m / 1024).toFixed(1)} GiB` : `${Math.round(m)} MiB`);

/** "~40 min", "~2.5 h", "~45 s": a forecast is rough, and says so. */
export function fmtForecast(seconds: number): string {
  if (seconds < 90) return `~${Math.round(seconds)} s`;
  if (seconds < 90 * 60) return `~${Math.round(seconds / 60)} min`;
  return `~${(seconds / 3600).toFixed(1)} h`;
}

function gpuHours(seconds: number): string {
  if (seconds >= 360) return `${(seconds / 3600).toFixed(1)} GPU-h`;
  if (seconds >= 60) return `${(seconds / 60).toFixed(1)} GPU-min`;
  return `${Math.round(seconds)} GPU-s`;
}

/** The rank whose memory runs out first, else the fullest: the one to watch. */
function memoryLine(ranks: readonly RankState[]): string | null {
  const withMemory = ranks.filter((r) => r.window.memory !== null && r.window.memory.allocated_bytes !== null);
  if (withMemory.length === 0) return null;
  const soonest = (r: RankState) => r.window.memory!.exhausted_in_s ?? Infinity;
  const fullest = (r: RankState) => r.window.memory!.reserved_frac ?? 0;
  const rank = withMemory.reduce((a, b) => (soonest(b) < soonest(a) || (soonest(b) === soonest(a) && fullest(b) > fullest(a)) ? b : a));
  const m = rank.window.memory!;
  const parts = [`${gib(m.allocated_bytes!)} allocated`];
  if (m.reserved_bytes !== null) {
    const of = m.total_bytes === null ? '' : ` of ${gib(m.total_bytes)}${m.reserved_frac === null ? '' : ` (${Math.round(m.reserved_frac * 100)}%)`}`;
    parts.push(`${gib(m.reserved_bytes)} reserved${of}`);
  }
  if (m.growth_bytes_per_s !== null && m.growth_bytes_per_s !== 0) parts.push(`${m.growth_bytes_per_s > 0 ? '+' : '−'}${(Math.abs(m.growth_bytes_per_s) / 1024 ** 2).toFixed(1)} MiB/s`);
  if (m.exhausted_in_s !== null) parts.push(`out of memory in ${fmtForecast(m.exhausted_in_s)}`);
  return `memory rank ${rank.rank}: ${parts.join(', ')}`;
}

/** The ledgers of every sidecar's part of the job, summed: each covers its own ranks. */
function wasteLine(ledgers: readonly Waste[]): string | null {
  if (ledgers.length === 0) return null;
  const total = ledgers.reduce((sum, w) => sum + w.gpu_seconds, 0);
  const lost = ledgers.reduce((sum, w) => sum + w.lost_gpu_seconds, 0);
  const byCause = new Map<string, { seconds: number; energy: number | null }>();
  for (const entry of ledgers.flatMap((w) => w.by_cause)) {
    const held = byCause.get(entry.cause) ?? { seconds: 0, energy: 0 };
    byCause.set(entry.cause, { seconds: held.seconds + entry.gpu_seconds, energy: held.energy === null || entry.energy_j === null ? null : held.energy + entry.energy_j });
  }
  const causes = [...byCause].sort((a, b) => b[1].seconds - a[1].seconds);
  if (lost < 1 || causes.length === 0) return null;
  const share = total > 0 ? ` (${Math.round((lost / total) * 100)}%)` : '';
  const out = [`lost ${gpuHours(lost)}${share}: ${causes.map(([cause, c]) => `${cause} ${gpuHours(c.seconds)}`).join(', ')}`];
  const energies = causes.map(([, c]) => c.energy);
  if (energies.every((e) => e !== null)) out.push(`${((energies as number[]).reduce((a, b) => a + b, 0) / 1e6).toFixed(2)} MJ`);
  const costs = ledgers.map((w) => w.lost_cost);
  const price = ledgers[0]!.price_per_gpu_hour;
  if (price !== null && costs.every((c) => c !== null)) out.push(`${(costs as number[]).reduce((a, b) => a + b, 0).toFixed(2)} at ${price} a GPU-hour`);
  return out.join(' · ');
}

function gpuOthers(part: Part, prefix: string): string[] {
  // By key: MIG slices share their GPU's index.
  const seen = new Set<string | number>();
  return part.job.ranks.flatMap((rank) => {
    const gpu = rank.window.gpu;
    const others = gpu?.other_processes;
    if (!gpu || !others || others.processes.length === 0 || seen.has(gpu.key ?? gpu.index)) return [];
    seen.add(gpu.key ?? gpu.index);
    const where = others.scope === 'physical-gpu' ? `gpu ${gpu.index} (its physical GPU)` : `gpu ${gpu.index}`;
    const names = processList(others.processes.map((p) => ({ pid: p.pid, name: p.name, figure: p.used_mib === null ? null : mib(p.used_mib) })));
    const caveat = others.job_pid_seen ? '' : " (the job's pids are not nvidia-smi's: its own may be listed)";
    return [`${prefix}${where}: ${names}${caveat}`];
  });
}

function cpuOthers(part: Part, prefix: string): string | null {
  const top = part.job.ranks.map((r) => r.window.host?.top_consumers).find((t) => t != null);
  if (!top || top.processes.length === 0) return null;
  const caveats = [top.visible === 'pod' ? "only the sidecar's pod is visible" : null, top.job_seen ? null : 'some may be the job\'s own'].filter((c) => c !== null);
  const names = processList(top.processes.map((p) => ({ pid: p.pid, name: p.name, figure: `${p.cores.toFixed(1)} cores` })));
  return `${prefix}${names}${caveats.length ? ` (${caveats.join('; ')})` : ''}`;
}

function mfuLine(ranks: readonly RankState[]): string | null {
  const measured = ranks.filter((r) => r.mfu);
  if (measured.length === 0) return null;
  return `MFU ${measured.map((r) => `rank ${r.rank} ${r.mfu!.text.replace(/^MFU not measured: /, 'not measured: ').replace(/% MFU /, '% ')}`).join(', ')}`;
}

function fixLine(parts: readonly Part[]): string | null {
  const fix = parts.map((p) => p.job.verdict?.causes[0]).find((c) => c !== undefined);
  const ranks = parts.reduce((n, p) => n + p.job.ranks.length, 0);
  const waste = parts.map((p) => p.job.waste).find((w) => w != null) ?? null;
  if (!fix) return null;
  const text = fixValueText(fixValue(fix, waste, ranks));
  return text ? `fixing ${fix.cause ?? fix.limiter}: ${text.replace(/^→ /, '')}` : null;
}

export function notesOf(parts: readonly Part[], ranks: readonly RankState[]): Notes {
  const multi = parts.length > 1;
  return {
    mfu: mfuLine(ranks),
    fix: fixLine(parts),
    memory: memoryLine(ranks),
    waste: wasteLine(parts.flatMap((p) => (p.job.waste ? [p.job.waste] : []))),
    gpuOthers: parts.flatMap((p) => gpuOthers(p, multi ? `${p.label} ` : '')),
    cpuOthers: parts.flatMap((p) => cpuOthers(p, multi ? `${p.label}: ` : '') ?? []),
  };
}
