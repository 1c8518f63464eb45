import type { Logger } from '../log/log.js';
import type { ComputeApp } from './compute-apps.js';
import { computeAppsSource } from './compute-apps-source.js';
import { DcgmSource } from './dcgm.js';
import type { DcgmSelector } from './dcgm-parse.js';
import { HostSource, type HostSample } from './host.js';
import { inventorySource } from './inventory.js';
import { IDLE_INTERVAL_MS, nvidiaSmiCollector } from './nvidia-smi.js';
import { SimSource } from './sim.js';
import type { GpuSourceName, GpuSourceOption } from './gpu-source-names.js';
import { Supervised, type Collector, type Source, type SupervisedOptions } from './source.js';
import type { NodeInventory } from '../protocol/state.js';
import type { SourceStatus } from './status.js';
import type { CollectorHealth, GpuSample } from './types.js';


/** What the sources are built from: the sidecar's options, decided. */
export interface SourcesConfig {
  gpuSource: GpuSourceOption;
  nvidiaSmi: string;
  gpuIntervalMs: number;
  /** Null when no --dcgm-url was given. */
  dcgm: { url: string; select: DcgmSelector } | null;
  hostIntervalMs: number;
  procRoot: string;
  /** Whether a job is live: the host source scans the node's processes only then, and nvidia-smi samples at its idle pace while not. */
  jobsLive?: () => boolean;
  simScenario?: string;
  log: Logger;
}

/** Where each kind of reading goes. */
export interface Sinks {
  gpu: (samples: GpuSample[]) => void;
  /** nvidia-smi's readings beside DCGM: they fill the throttle signals the exporter lacks. */
  fill: (samples: GpuSample[]) => void;
  apps: (apps: ComputeApp[]) => void;
  host: (sample: HostSample) => void;
}

type ActiveGpu = 'nvidia-smi' | 'dcgm' | 'sim';

export interface GpuSourceChoice {
  source: GpuSourceName;
  reason: string;
}

interface GpuRunning extends GpuSourceChoice {
  collector: Collector<GpuSample[]> | null;
  /** For the hooks' readings taken because a configured DCGM exporter was unusable: that exporter's last error. */
  unusable: CollectorHealth | null;
}

/** A collector as the registry keeps it, whatever it reads. */
type Running = Omit<Collector<unknown>, 'start'>;

export class GpuSourceError extends Error {}

/** Which processes hold a GPU changes slowly, and each reading is a process spawn (and NVML's start in it). */
const APPS_INTERVAL_MS = 5_000;
/** While no job is live, only the node view shows them: the idle sidecar's spawns were most of its CPU beside the GPU stream. */
const APPS_IDLE_INTERVAL_MS = 30_000;
/** A busy node's exporter can take seconds to render; this only has to catch a connection that hangs. */
const DCGM_TIMEOUT_MS = 5_000;

const supervised = <T>(source: Source<T>, options: SupervisedOptions<T>): Collector<T> => new Supervised(source, options);
const perGpu = (samples: GpuSample[]) => samples.length;
/** `liveMs` while a job is live, `idleMs` (or `liveMs` where longer) while none is; always `liveMs` where the sidecar does not say. */
const paced = (config: SourcesConfig, liveMs: number, idleMs: number) => (config.jobsLive ? () => (config.jobsLive!() ? liveMs : Math.max(liveMs, idleMs)) : undefined);

/**
 * The GPU sources: how each is built and how its failure to start is named. The registry only
 * decides which runs; every polled one runs under the one supervisor.
 */
const GPU_TABLE: Record<ActiveGpu, { available: (config: SourcesConfig) => string | null; make: (config: SourcesConfig) => Collector<GpuSample[]>; what: (config: SourcesConfig) => string }> = {
  'nvidia-smi': {
    available: () => null,
    make: (config) => nvidiaSmiCollector({ binary: config.nvidiaSmi, intervalMs: config.gpuIntervalMs, jobsLive: config.jobsLive, log: config.log }),
    what: () => 'nvidia-smi',
  },
  dcgm: {
    available: (config) => (config.dcgm ? null : '--gpu-source dcgm needs --dcgm-url'),
    make: (config) => {
      const intervalMs = Math.max(config.gpuIntervalMs, 1000);
      return supervised(new DcgmSource({ url: config.dcgm!.url, select: config.dcgm!.select }), { intervalMs, timeoutMs: Math.max(DCGM_TIMEOUT_MS, intervalMs), log: config.log, count: perGpu });
    },
    what: (config) => `dcgm: dcgm-exporter at ${config.dcgm!.url}`,
  },
  sim: {
    available: () => null,
    make: (config) => supervised(new SimSource({ scenarioFile: config.simScenario }), { intervalMs: config.gpuIntervalMs, log: config.log, count: perGpu }),
    what: () => 'sim',
  },
};

/**
 * The sources beside the GPU counters, each run when the GPU source chosen calls for it, in this
 * order. A companion that cannot start is left out, saying why; none stops the sidecar.
 */
interface Companion {
  name: string;
  runs: (gpu: GpuSourceName, running: ReadonlySet<string>) => boolean;
  /** What its absence means, logged where it cannot start. */
  without: string;
  start: (config: SourcesConfig, sinks: Sinks) => { collector: Running; started: Promise<void> };
}

/** `required`: left out where its first reading fails (the filler: no nvidia-smi beside the exporter). */
const companion =
  <T>(make: (config: SourcesConfig) => Collector<T>, sink: (sinks: Sinks) => (reading: T) => void, required: boolean) =>
  (config: SourcesConfig, sinks: Sinks) => {
    const collector = make(config);
    return { collector, started: collector.start(sink(sinks), { required }) };
  };

const COMPANIONS: Companion[] = [
  {
    // Under DCGM, an nvidia-smi beside the exporter fills the throttle signals its default counters lack.
    name: 'nvidia-smi-fill',
    runs: (gpu) => gpu === 'dcgm',
    without: "throttle signals the exporter lacks come from the hooks' NVML readings, if any",
    start: companion((config) => nvidiaSmiCollector({ binary: config.nvidiaSmi, intervalMs: Math.max(config.gpuIntervalMs, 1000), jobsLive: config.jobsLive, log: config.log }), (sinks) => sinks.fill, true),
  },
  {
    // The GPUs' compute processes, wherever nvidia-smi runs (the source or the filler).
    name: 'compute-apps',
    runs: (gpu, running) => gpu === 'nvidia-smi' || running.has('nvidia-smi-fill'),
    without: 'other processes on the GPUs are not shown',
    start: companion((config) => supervised(computeAppsSource({ binary: config.nvidiaSmi }), { intervalMs: APPS_INTERVAL_MS, pace: paced(config, APPS_INTERVAL_MS, APPS_IDLE_INTERVAL_MS), log: config.log }), (sinks) => sinks.apps, false),
  },
  {
    // While no job is live its readings only feed the node view, yet each is journaled, applied and
    // published: at nvidia-smi's idle pace then (issue 24, target 8).
    name: 'host',
    runs: () => true,
    without: 'no host counters',
    start: companion(
      (config) => supervised(new HostSource({ procRoot: config.procRoot, log: config.log, processesWanted: config.jobsLive }), { intervalMs: config.hostIntervalMs, pace: paced(config, config.hostIntervalMs, IDLE_INTERVAL_MS), maxBackoffMs: 8 * config.hostIntervalMs, log: config.log }),
      (sinks) => sinks.host,
      false,
    ),
  },
];

/**
 * Every source of the sidecar, from the tables above: the inventory at once (it is read while the
 * journal replays), the rest on `start`, once there is somewhere to send their readings.
 */
export class Sources {
  readonly inventory: Promise<NodeInventory>;
  private readonly collectors = new Map<string, Running>();
  private gpu: GpuRunning | null = null;

  constructor(private readonly config: SourcesConfig) {
    const inventory = new Supervised(inventorySource({ nvidiaSmi: config.nvidiaSmi, log: config.log }), { intervalMs: null, log: config.log });
    this.collectors.set('inventory', inventory);
    // readInventory never rejects (a part it cannot read is null), so the one read delivers.
    this.inventory = new Promise((resolve) => void inventory.start(resolve));
  }

  /** Starts the GPU source asked for, then the companions it calls for. Rejects with GpuSourceError where a named GPU source cannot start. */
  async start(sinks: Sinks): Promise<GpuSourceChoice> {
    const choice = await this.startGpu(sinks.gpu);
    this.gpu = choice;
    this.config.log.info({ gpu_source: choice.source, reason: choice.reason }, 'GPU counter source chosen');
    for (const row of COMPANIONS) {
      if (!row.runs(choice.source, new Set(this.collectors.keys()))) continue;
      const { collector, started } = row.start(this.config, sinks);
      try {
        await started;
        this.collectors.set(row.name, collector);
      } catch (error) {
        this.config.log.info({ source: row.name, reason: (error as Error).message }, `${row.name} does not run: ${row.without}`);
      }
    }
    if (this.collectors.has('nvidia-smi-fill')) this.config.log.info('nvidia-smi runs beside the DCGM exporter: its throttle signals fill those the exporter lacks');
    return { source: choice.source, reason: choice.reason };
  }

  /** Whether the hooks' NVML readings are wanted for the GPU source chosen: under DCGM without nvidia-smi beside it. */
  get lacksThrottleFill(): boolean {
    return this.gpu?.source === 'dcgm' && !this.collectors.has('nvidia-smi-fill');
  }

  /** A job went live, or the last one ended: every source looks at its pace now (Collector.repace). */
  repace(): void {
    this.gpu?.collector?.repace();
    for (const collector of this.collectors.values()) collector.repace();
  }

  async stop(): Promise<void> {
    await Promise.allSettled([this.gpu?.collector?.stop(), ...[...this.collectors.values()].map((collector) => collector.stop())]);
  }

  /** How every source fares; before `start`, the GPU source is not chosen yet. */
  status(): SourceStatus {
    const gpu = this.gpu;
    const all: Running[] = [...(gpu?.collector ? [gpu.collector] : []), ...this.collectors.values()];
    return {
      gpu: { source: gpu?.source ?? 'none', reason: gpu?.reason ?? 'not chosen yet', health: gpu?.collector?.health() ?? gpu?.unusable ?? null },
      host: this.collectors.get('host')?.health() ?? null,
      collectors: [
        ...all.map((collector) => ({ health: collector.health(), timing: collector.timing(), restartsChild: collector.restartsChild })),
        ...(gpu?.unusable ? [{ health: gpu.unusable, timing: null, restartsChild: false }] : []),
      ],
    };
  }

  /**
   * `auto` takes the first that works of nvidia-smi, DCGM (when a URL is given) and the hooks' own
   * NVML readings; it never picks the simulator, which makes numbers up. An explicitly named source
   * that cannot start is an error.
   */
  private async startGpu(sink: Sinks['gpu']): Promise<GpuRunning> {
    const option = this.config.gpuSource;
    const passive = (source: 'hook' | 'none', reason: string): GpuRunning => ({ source, reason, collector: null, unusable: null });
    const active = async (source: ActiveGpu, reason: string): Promise<GpuRunning> => {
      const row = GPU_TABLE[source];
      const unavailable = row.available(this.config);
      if (unavailable !== null) throw new GpuSourceError(`${source}: ${unavailable}`);
      const collector = row.make(this.config);
      try {
        await collector.start(sink, { required: true });
      } catch (error) {
        await collector.stop().catch(() => undefined);
        throw new GpuSourceError(`${row.what(this.config)}: ${(error as Error).message}`);
      }
      return { source, reason, collector, unusable: null };
    };
    switch (option) {
      case 'none':
        return passive('none', 'GPU counters turned off (--gpu-source none)');
      case 'hook':
        return passive('hook', 'GPU counters forwarded by the hooks (pynvml), as asked (--gpu-source hook)');
      case 'sim':
        return active('sim', 'simulated GPU counters (--gpu-source sim)');
      case 'nvidia-smi':
      case 'dcgm':
        return active(option, `as asked (--gpu-source ${option})`);
      case 'auto': {
        const tried: string[] = [];
        try {
          return await active('nvidia-smi', 'auto: nvidia-smi works');
        } catch (error) {
          tried.push((error as Error).message);
        }
        if (this.config.dcgm === null) {
          tried.push('dcgm: no --dcgm-url');
          return passive('hook', `auto: ${tried.join('; ')}; using GPU counters forwarded by the hooks (pynvml), if they have it`);
        }
        try {
          return await active('dcgm', `auto: ${tried.join('; ')}; the DCGM exporter works`);
        } catch (error) {
          const unusable = (error as Error).message;
          tried.push(unusable);
          // A DCGM exporter was configured and gives nothing: not a quiet fallback.
          this.config.log.warn({ err: unusable }, "the DCGM exporter given by --dcgm-url is not usable; GPU counters come from the hooks' NVML readings instead");
          const health: CollectorHealth = { name: 'dcgm', state: 'failing', samples: 0, lastSampleAt: null, lastError: unusable.replace(/^dcgm: /, ''), restarts: 0 };
          return { ...passive('hook', `auto: ${tried.join('; ')}; using GPU counters forwarded by the hooks (pynvml), if they have it`), unusable: health };
        }
      }
    }
  }
}

/** What /readyz's detail says of the GPU source: its collector failing, or a configured one that gave nothing and was replaced. */
export function gpuSourceDetail(status: SourceStatus['gpu']): string[] {
  const health = status.health;
  if (!health || health.state !== 'failing' || !health.lastError) return [];
  const instead = status.source === health.name ? '' : `; GPU counters come from ${status.source === 'hook' ? "the hooks' NVML readings" : status.source} instead`;
  return [`GPU counters: ${health.name}: ${health.lastError}${instead}`];
}
