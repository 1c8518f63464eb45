import type { Registry } from 'prom-client';
import { ThrottleReason, type GpuSample, type ThrottleReasonName } from '../counters/types.js';
import { counterFamily, gaugeFamily } from './metrics-family.js';
import type { GpuScrape, Scrape } from './metrics-scrape.js';

/** The counters the verdicts are made from: GPUs, the host, and the health of their collectors. */

type GpuLabel = 'gpu' | 'gpu_uuid' | 'gpu_instance';

const MIB = 1024 * 1024;
const REASONS = Object.entries(ThrottleReason) as [ThrottleReasonName, number][];
const scaled = (value: number | null, by: number) => (value === null ? null : value * by);
// Divided, not multiplied by 0.01: 95 / 100 is 0.95, 95 * 0.01 is 0.9500000000000001.
const ratio = (percent: number | null) => (percent === null ? null : percent / 100);
// gpu_instance: MIG slices of one GPU under DCGM share its index and have no UUID of their own; without it their series would collide.
const gpuLabels = ({ gpu }: GpuScrape): Record<GpuLabel, string> => ({ gpu: String(gpu.index), gpu_uuid: gpu.uuid ?? '', gpu_instance: String(gpu.gpuInstanceId ?? '') });

/** One gauge per figure of the GPUs' latest samples. */
const LATEST: Array<{ name: string; help: string; value: (s: GpuSample) => number | null }> = [
  { name: 'stepscope_gpu_utilization_ratio', help: 'Share of the last sample period in which the GPU ran a kernel (0..1).', value: (s) => ratio(s.utilGpu) },
  { name: 'stepscope_gpu_sm_clock_hertz', help: 'Current SM clock.', value: (s) => scaled(s.smClockMHz, 1e6) },
  { name: 'stepscope_gpu_sm_clock_max_hertz', help: 'Maximum SM clock: a busy GPU well below it is held down.', value: (s) => scaled(s.smClockMaxMHz, 1e6) },
  { name: 'stepscope_gpu_temperature_celsius', help: 'GPU core temperature.', value: (s) => s.tempC },
  { name: 'stepscope_gpu_power_watts', help: 'Power draw.', value: (s) => s.powerW },
  { name: 'stepscope_gpu_power_limit_watts', help: 'Power management limit.', value: (s) => s.powerLimitW },
  { name: 'stepscope_gpu_memory_used_bytes', help: 'Frame buffer memory in use.', value: (s) => scaled(s.memUsedMiB, MIB) },
  { name: 'stepscope_gpu_memory_total_bytes', help: 'Frame buffer memory in all.', value: (s) => scaled(s.memTotalMiB, MIB) },
];

function shareActive(samples: GpuSample[], bit: number): number | null {
  const reported = samples.filter((s) => s.throttleReasons !== null);
  return reported.length ? reported.filter((s) => (s.throttleReasons! & bit) !== 0).length / reported.length : null;
}

const collectors = (scrape: Scrape) => scrape.sources.collectors;

export function registerCounterFamilies(registry: Registry, scrape: () => Scrape, hostStepMs: () => number): void {
  gaugeFamily(registry, {
    name: 'stepscope_gpu_info',
    help: 'A GPU the sidecar reads counters of, with its product name.',
    labelNames: ['gpu', 'gpu_uuid', 'gpu_instance', 'gpu_name'],
    *samples() {
      for (const gpu of scrape().gpus) yield [{ ...gpuLabels(gpu), gpu_name: gpu.gpu.name ?? '' }, 1];
    },
  });

  for (const figure of LATEST) {
    gaugeFamily(registry, {
      name: figure.name,
      help: `${figure.help} From the latest sample.`,
      labelNames: ['gpu', 'gpu_uuid', 'gpu_instance'],
      *samples() {
        for (const gpu of scrape().gpus) yield [gpuLabels(gpu), figure.value(gpu.gpu.latest)];
      },
    });
  }

  gaugeFamily(registry, {
    name: 'stepscope_gpu_last_sample_timestamp_seconds',
    help: "When the GPU's latest sample was read (Unix time): the figures above are that old.",
    labelNames: ['gpu', 'gpu_uuid', 'gpu_instance'],
    *samples() {
      // On the host's clock, as `time()` in a query is, even once it stepped under the sidecar.
      const step = hostStepMs();
      for (const gpu of scrape().gpus) yield [gpuLabels(gpu), (gpu.gpu.latest.at + step) / 1000];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_gpu_throttle_reason_active',
    help: 'Whether each NVML clock-event (throttle) reason is active in the latest sample (1) or not (0).',
    labelNames: ['gpu', 'gpu_uuid', 'gpu_instance', 'reason'],
    *samples() {
      for (const gpu of scrape().gpus) {
        const mask = gpu.gpu.latest.throttleReasons;
        if (mask !== null) for (const [reason, bit] of REASONS) yield [{ ...gpuLabels(gpu), reason }, mask & bit ? 1 : 0];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_gpu_throttle_reason_active_ratio',
    help: "Share of the GPU's samples over the last --window seconds in which each clock-event (throttle) reason was active (0..1).",
    labelNames: ['gpu', 'gpu_uuid', 'gpu_instance', 'reason'],
    *samples() {
      for (const gpu of scrape().gpus) for (const [reason, bit] of REASONS) yield [{ ...gpuLabels(gpu), reason }, shareActive(gpu.recent, bit)];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_host_cpu_utilization_ratio',
    help: "Share of the host's CPU time not idle (iowait counts as idle), over the latest sample period (0..1).",
    labelNames: [],
    *samples() {
      yield [{}, ratio(scrape().host?.cpuPct ?? null)];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_host_cpu_iowait_ratio',
    help: "Share of the host's CPU time idle waiting for I/O, over the latest sample period (0..1).",
    labelNames: [],
    *samples() {
      yield [{}, ratio(scrape().host?.iowaitPct ?? null)];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_gpu_source_info',
    help: 'Where GPU counters come from: nvidia-smi, dcgm, hook (forwarded by the hooks), sim or none.',
    labelNames: ['source'],
    *samples() {
      yield [{ source: scrape().sources.gpu.source }, 1];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_collector_up',
    // node_exporter's node_scrape_collector_success, for every source the sidecar runs.
    help: "Whether a collector's last reading succeeded (1), or it is starting, failing or stopped (0).",
    labelNames: ['collector'],
    *samples() {
      for (const { health } of collectors(scrape())) yield [{ collector: health.name }, health.state === 'ok' ? 1 : 0];
    },
  });

  // node_exporter's node_scrape_collector_duration_seconds: what each source's reading costs.
  gaugeFamily(registry, {
    name: 'stepscope_collector_duration_seconds',
    help: "How long a collector's last reading took (the nvidia-smi stream: the sidecar's own time on its last round).",
    labelNames: ['collector'],
    *samples() {
      for (const { health, timing } of collectors(scrape())) yield [{ collector: health.name }, timing?.lastMs === undefined || timing.lastMs === null ? null : timing.lastMs / 1000];
    },
  });

  counterFamily(registry, {
    name: 'stepscope_collector_restarts_total',
    help: 'Times a collector restarted its child process after it died or hung (nvidia-smi; the polled sources have none).',
    labelNames: ['collector'],
    *samples() {
      for (const { health, restartsChild } of collectors(scrape())) if (restartsChild) yield [{ collector: health.name }, health.restarts];
    },
  });
}
