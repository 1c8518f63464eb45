import type { Logger } from '../log/log.js';
import type { CollectorHealth, GpuCollector, GpuSink } from './types.js';

export const GPU_SOURCES = ['auto', 'nvidia-smi', 'dcgm', 'hook', 'sim', 'none'] as const;
export type GpuSourceOption = (typeof GPU_SOURCES)[number];
export type GpuSourceName = Exclude<GpuSourceOption, 'auto'>;

/** How to build each collector; the registry only decides which one runs. */
export interface CollectorFactories {
  'nvidia-smi': () => GpuCollector;
  /** Null when no --dcgm-url was given. */
  dcgm: (() => GpuCollector) | null;
  sim: () => GpuCollector;
}

export interface GpuSourceChoice {
  source: GpuSourceName;
  reason: string;
  collector: GpuCollector | null;
  /** The collector's health; for the hooks' readings taken because a configured DCGM exporter was unusable, that exporter's last error. */
  health(): CollectorHealth | null;
}

export class GpuSourceError extends Error {}

const passive = (source: 'hook' | 'none', reason: string): GpuSourceChoice => ({ source, reason, collector: null, health: () => null });

async function tryStart(name: string, make: () => GpuCollector, sink: GpuSink): Promise<GpuCollector> {
  const collector = make();
  try {
    await collector.start(sink);
    return collector;
  } catch (error) {
    await collector.stop().catch(() => undefined);
    throw new GpuSourceError(`${name}: ${(error as Error).message}`);
  }
}

const active = (source: GpuSourceName, reason: string, collector: GpuCollector): GpuSourceChoice => ({
  source,
  reason,
  collector,
  health: () => collector.health(),
});

/**
 * Starts the GPU counter source asked for. `auto` takes the first that works of nvidia-smi, DCGM
 * (when a URL is given) and the hooks' own NVML readings; it never picks the simulator, which makes
 * numbers up. An explicitly named source that cannot start is an error.
 */
export async function startGpuSource(option: GpuSourceOption, factories: CollectorFactories, sink: GpuSink, log: Logger): Promise<GpuSourceChoice> {
  const choose = (choice: GpuSourceChoice) => {
    log.info({ gpu_source: choice.source, reason: choice.reason }, 'GPU counter source chosen');
    return choice;
  };
  switch (option) {
    case 'none':
      return choose(passive('none', 'GPU counters turned off (--gpu-source none)'));
    case 'hook':
      return choose(passive('hook', 'GPU counters forwarded by the hooks (pynvml), as asked (--gpu-source hook)'));
    case 'sim':
      return choose(active('sim', 'simulated GPU counters (--gpu-source sim)', await tryStart('sim', factories.sim, sink)));
    case 'nvidia-smi':
      return choose(active('nvidia-smi', 'as asked (--gpu-source nvidia-smi)', await tryStart('nvidia-smi', factories['nvidia-smi'], sink)));
    case 'dcgm':
      if (!factories.dcgm) throw new GpuSourceError('dcgm: --gpu-source dcgm needs --dcgm-url');
      return choose(active('dcgm', 'as asked (--gpu-source dcgm)', await tryStart('dcgm', factories.dcgm, sink)));
    case 'auto': {
      const tried: string[] = [];
      try {
        return choose(active('nvidia-smi', 'auto: nvidia-smi works', await tryStart('nvidia-smi', factories['nvidia-smi'], sink)));
      } catch (error) {
        tried.push((error as Error).message);
      }
      let unusable: string | null = null;
      if (factories.dcgm) {
        try {
          return choose(active('dcgm', `auto: ${tried.join('; ')}; the DCGM exporter works`, await tryStart('dcgm', factories.dcgm, sink)));
        } catch (error) {
          unusable = (error as Error).message;
          tried.push(unusable);
        }
      } else {
        tried.push('dcgm: no --dcgm-url');
      }
      const fallback = choose(passive('hook', `auto: ${tried.join('; ')}; using GPU counters forwarded by the hooks (pynvml), if they have it`));
      if (unusable === null) return fallback;
      // A DCGM exporter was configured and gives nothing: not a quiet fallback.
      log.warn({ err: unusable }, "the DCGM exporter given by --dcgm-url is not usable; GPU counters come from the hooks' NVML readings instead");
      const health: CollectorHealth = { name: 'dcgm', state: 'failing', samples: 0, lastSampleAt: null, lastError: unusable.replace(/^dcgm: /, ''), restarts: 0 };
      return { ...fallback, health: () => health };
    }
  }
}

/** What /readyz's detail says of the GPU source: its collector failing, or a configured one that gave nothing and was replaced. */
export function gpuSourceDetail(choice: GpuSourceChoice): string[] {
  const health = choice.health();
  if (!health || health.state !== 'failing' || !health.lastError) return [];
  const instead = choice.source === health.name ? '' : `; GPU counters come from ${choice.source === 'hook' ? "the hooks' NVML readings" : choice.source} instead`;
  return [`GPU counters: ${health.name}: ${health.lastError}${instead}`];
}
