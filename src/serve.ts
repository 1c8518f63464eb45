import type { FastifyInstance } from 'fastify';
import type { VerdictEvent } from './analysis/job-analysis.js';
import type { Summary } from './analysis/summary.js';
import { Analyst } from './analyst.js';
import { renderSummary } from './outputs/summary-render.js';
import { readSummary, writeSummaryFiles } from './outputs/summary-files.js';
import type { HostSample } from './counters/host.js';
import { CounterStore } from './counters/counter-store.js';
import { DcgmCollector } from './counters/dcgm.js';
import { HostCollector } from './counters/host.js';
import { NvidiaSmiCollector } from './counters/nvidia-smi.js';
import { GpuSourceError, startGpuSource, type GpuSourceChoice, type GpuSourceOption } from './counters/registry.js';
import { SimCollector } from './counters/sim.js';
import { Ingest } from './ingest/ingest.js';
import { createLogger, type Logger, type LogLevel } from './log.js';
import type { StreamLimits } from './outputs/stream-viewer.js';
import { stepDurationHistogram, StepTimedJobStore } from './outputs/metrics.js';
import { buildServer } from './server.js';
import { isLoopback } from './auth.js';
import type { IngestLimits } from './ingest/limits.js';
import { Journal } from './store/journal.js';
import { applyEntry, type World } from './store/replay.js';

export interface ServeOptions {
  host: string;
  port: number;
  out?: string;
  exitOnEnd: boolean;
  endGraceS: number;
  logLevel: LogLevel;
  maxFrameBytes: number;
  gpuSource: GpuSourceOption;
  nvidiaSmi: string;
  gpuIntervalMs: number;
  dcgmUrl?: string;
  dcgmPod?: string;
  dcgmNamespace?: string;
  hostIntervalMs: number;
  procRoot: string;
  simScenario?: string;
  windowS: number;
  holdS: number;
  baseline?: string;
  /** Frames a second on ws /v1/stream (default 4), and its per-viewer limits. */
  streamRateHz?: number;
  streamLimits?: Partial<StreamLimits>;
  /** Stop cleanly, writing summaries, on SIGTERM and SIGINT. */
  handleSignals?: boolean;
  token?: string;
  /** Allow a bind beyond loopback without a token. */
  insecure?: boolean;
  limits?: Partial<IngestLimits>;
}

export interface Sidecar {
  app: FastifyInstance;
  ingest: Ingest;
  log: Logger;
  url: string;
  /** Resolves with the exit code once the sidecar has stopped. */
  stopped: Promise<number>;
  stop(reason: string): Promise<number>;
}

const SETTLE_INTERVAL_MS = 250;
const ANALYSIS_INTERVAL_MS = 500;

async function loadBaseline(file: string | undefined): Promise<Summary | null> {
  if (!file) return null;
  try {
    return await readSummary(file);
  } catch (error) {
    throw new Error(`--baseline ${(error as Error).message}`);
  }
}

async function openJournal(out: string | undefined, world: World, log: Logger): Promise<Journal | null> {
  if (!out) return null;
  const { journal, replay } = await Journal.open(out);
  for (const entry of replay.entries) applyEntry(world, entry);
  world.jobs.restarted(Date.now());
  if (replay.entries.length > 0 || replay.truncatedBytes > 0) {
    log.info(
      { journal: journal.path, entries: replay.entries.length, corrupt: replay.corrupt, truncated_bytes: replay.truncatedBytes, jobs: world.jobs.jobCount },
      'resumed from journal',
    );
  }
  return journal;
}

function collectorFactories(options: ServeOptions, log: Logger) {
  return {
    'nvidia-smi': () => new NvidiaSmiCollector({ binary: options.nvidiaSmi, intervalMs: options.gpuIntervalMs, log }),
    dcgm: options.dcgmUrl
      ? () =>
          new DcgmCollector({
            url: options.dcgmUrl!,
            intervalMs: Math.max(options.gpuIntervalMs, 1000),
            select: { pod: options.dcgmPod, namespace: options.dcgmNamespace },
            log,
          })
      : null,
    sim: () => new SimCollector({ scenarioFile: options.simScenario, intervalMs: options.gpuIntervalMs }),
  };
}

/** Refuses, before anything starts, a sidecar reachable from other machines that anyone could feed. */
function checkExposure(options: ServeOptions, log: Logger): void {
  if (isLoopback(options.host) || options.token) return;
  if (!options.insecure) {
    throw new Error(`--host ${options.host} is reachable from other machines: give --token (or STEPSCOPE_TOKEN), or --insecure to run without one`);
  }
  log.warn({ host: options.host }, 'listening beyond loopback without a token (--insecure): anyone who can reach this port can send steps and read the state');
}

export async function serve(options: ServeOptions): Promise<Sidecar> {
  const log = createLogger(options.logLevel);
  checkExposure(options, log);
  const baseline = await loadBaseline(options.baseline);
  const stepDurations = stepDurationHistogram();
  const world: World = {
    jobs: new StepTimedJobStore(stepDurations),
    counters: new CounterStore<HostSample>(),
    hookGpu: options.gpuSource === 'hook',
  };
  const journal = await openJournal(options.out, world, log);
  const ingest = new Ingest(world, journal, { gpuIntervalMs: options.gpuIntervalMs, limits: options.limits });
  const fail = (what: string) => (error: Error) => log.error({ err: error.message }, `${what} not recorded`);

  let gpu: GpuSourceChoice;
  try {
    gpu = await startGpuSource(options.gpuSource, collectorFactories(options, log), (samples) => void ingest.gpuSamples(samples).catch(fail('GPU samples')), log);
  } catch (error) {
    await journal?.close();
    if (error instanceof GpuSourceError) throw new Error(`--gpu-source ${options.gpuSource}: ${error.message}`);
    throw error;
  }
  // Hook-forwarded GPU readings only count when they are the source; welcome tells hooks whether to send them.
  world.hookGpu = gpu.source === 'hook';
  ingest.wants.nvml = world.hookGpu;

  const host = new HostCollector({ intervalMs: options.hostIntervalMs, procRoot: options.procRoot, log });
  await host.start((sample) => void ingest.hostSample(sample).catch(fail('host sample')));

  const analyst = new Analyst(world, { windowMs: options.windowS * 1000, holdMs: options.holdS * 1000, baseline });
  const verdictListeners = new Set<(events: VerdictEvent[]) => void>();
  const analysisTimer = setInterval(() => {
    const events = analyst.tick(Date.now());
    for (const event of events) {
      log.info(
        { job: event.job, rank: event.rank, from: event.from, to: event.to, cause: event.cause, since: new Date(event.since).toISOString(), rule: event.judgement.evidence.rule },
        event.rank === null ? 'job verdict changed' : 'rank verdict changed',
      );
    }
    if (events.length > 0) for (const listener of verdictListeners) listener(events);
  }, ANALYSIS_INTERVAL_MS);

  const writeUp = async (jobId: string, at: number) => {
    const summary = analyst.summary(jobId, at);
    if (!summary) return;
    const files = options.out ? await writeSummaryFiles(options.out, summary).catch((error: Error) => (log.error({ err: error.message }, 'summary not written'), [])) : [];
    log.info({ job: jobId, verdict: summary.verdict, cause: summary.cause, steps: summary.steps, files }, renderSummary(summary, 'text'));
  };

  const app = await buildServer({
    ingest,
    log,
    analyst,
    maxFrameBytes: options.maxFrameBytes,
    token: options.token,
    windowMs: options.windowS * 1000,
    sources: () => ({ gpu: { source: gpu.source, reason: gpu.reason, health: gpu.health() }, host: host.health() }),
    stepDurations,
    // Hooks learn in `welcome` whether to forward GPU readings, so not before the source is chosen.
    ready: () => gpu !== undefined && stopping === null,
    stream: {
      rateHz: options.streamRateHz,
      limits: options.streamLimits,
      verdictEvents: (listener) => (verdictListeners.add(listener), () => verdictListeners.delete(listener)),
    },
  });
  let settling = Promise.resolve();
  let resolveStopped: (code: number) => void = () => undefined;
  const stopped = new Promise<number>((resolve) => (resolveStopped = resolve));
  let stopping: Promise<number> | null = null;

  const stop = (reason: string): Promise<number> => {
    stopping ??= (async () => {
      clearInterval(settleTimer);
      clearInterval(analysisTimer);
      await settling;
      const at = Date.now();
      const endedNow = world.jobs.endAll(at);
      log.info({ reason, jobs_ended: endedNow }, 'stopping');
      for (const job of endedNow) await writeUp(job, at);
      await Promise.allSettled([gpu.collector?.stop(), host.stop()]);
      await app.close();
      await journal?.close();
      resolveStopped(0);
      return 0;
    })();
    return stopping;
  };
  // Before listening: a pod may be stopped the moment it is ready, and its summary is still owed.
  if (options.handleSignals) {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void stop(signal));
  }

  const settleTimer = setInterval(() => {
    const at = Date.now();
    const ended = world.jobs.settle(at, options.endGraceS * 1000);
    settling = settling.then(async () => {
      for (const id of ended) {
        const job = world.jobs.jobSnapshot(id, at);
        log.info({ job: id, reason: job?.end_reason, steps: job?.steps, dropped: job?.dropped }, 'job ended');
        await writeUp(id, at);
      }
      if (options.exitOnEnd && world.jobs.allEnded()) void stop('every job ended');
    });
  }, SETTLE_INTERVAL_MS);

  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const url = `ws://${options.host.includes(':') ? `[${options.host}]` : options.host}:${port}`;
  log.info({ url, port, out: options.out ?? null, gpu_source: gpu.source }, 'listening');

  return { app, ingest, log, url, stopped, stop };
}
