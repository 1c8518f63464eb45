import type { StepWindow } from '../analysis/window.js';
import { coresPerGpu } from '../counters/inventory-parse.js';
import type { SourceStatus } from '../counters/status.js';
import type { EngineSnapshot, SnapshotJob, SnapshotStop, SnapshotVerdict } from '../engine/snapshot.js';
import type { JobStopState } from '../protocol/stall-state.js';
import { gpuReading, hostReading } from './state-counters.js';
import { STATE_SCHEMA, type IngestStats, type JobState, type JournalHealth, type RankWindow, type SidecarState, type VerdictState } from '../protocol/state.js';

export interface StateInput {
  snapshot: EngineSnapshot;
  ingest: IngestStats;
  sources: SourceStatus;
  journal: JournalHealth | null;
  version: string;
  startedAt: number;
  windowMs: number;
}

/** The body of GET /v1/state: the engine's latest snapshot, with the sidecar's own health beside it. */
export function sidecarState(input: StateInput): SidecarState {
  const { snapshot } = input;
  const at = snapshot.at;
  return {
    schema: STATE_SCHEMA,
    version: input.version,
    now: new Date(at).toISOString(),
    uptime_s: Math.max(0, (at - input.startedAt) / 1000),
    window_s: input.windowMs / 1000,
    ingest: input.ingest,
    journal: input.journal,
    counters: {
      gpu_source: input.sources.gpu.source,
      gpu_source_reason: input.sources.gpu.reason,
      gpu_health: input.sources.gpu.health,
      host_health: input.sources.host,
      gpus: snapshot.gpus.map((gpu) => gpuReading(gpu.known, gpu.processes)),
      host: hostReading(snapshot.host),
    },
    node: snapshot.node === null ? null : { ...snapshot.node, cores_per_gpu: coresPerGpu(snapshot.node, snapshot.node.gpu_count) },
    jobs: snapshot.jobs.map(jobState),
  };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** The snapshot's times are ms since the epoch; the state writes them as ISO times (each in its place: spreading keeps the fields' order). */
function verdictState(held: SnapshotVerdict | null): VerdictState | null {
  if (held === null) return null;
  return { ...held, since: iso(held.since), pending: held.pending === null ? null : { ...held.pending, since: iso(held.pending.since) } };
}

function windowState(window: StepWindow): RankWindow {
  const { gpu } = window;
  return { ...window, from: iso(window.from), to: iso(window.to), gpu: gpu === null ? null : { ...gpu, latest: { ...gpu.latest, at: iso(gpu.latest.at) } } };
}

function stopState(stop: SnapshotStop | null): JobStopState | null {
  return stop === null ? null : { ...stop, since: iso(stop.since) };
}

function jobState(job: SnapshotJob): JobState {
  return {
    ...job,
    started_at: iso(job.started_at),
    ranks: job.ranks.map((rank) => ({
      ...rank,
      last_step_at: rank.last_step_at === null ? null : iso(rank.last_step_at),
      window: windowState(rank.window),
      verdict: verdictState(rank.verdict),
    })),
    verdict: verdictState(job.verdict),
    stop: stopState(job.stop),
  };
}
