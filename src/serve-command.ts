import path from 'node:path';
import type { FastifyServerFactory } from 'fastify';
import type { Summary } from './protocol/summary.js';
import type { GpuSourceOption } from './counters/gpu-source-names.js';
import { GpuSourceError, Sources } from './counters/registry.js';
import { Engine } from './engine/engine.js';
import { REAL_TIMERS } from './engine/tick-schedule.js';
import { CAPTURE_DEFAULTS } from './ingest/profiles.js';
import { PROFILE_LIMITS } from './protocol/profile.js';
import { checkpointBytesFor, DEFAULT_LIMITS, type IngestLimits } from './ingest/limits.js';
import { fitToMemory } from './ingest/memory-budget.js';
import { Recorder } from './journal/recorder.js';
import { replayJournal, TICK_MS } from './journal/replay.js';
import { Wal } from './journal/wal.js';
import { createLogger, type Logger, type LogLevel } from './log/log.js';
import type { StreamLimits } from './outputs/stream-viewer.js';
import { readSummary } from './outputs/summary-files.js';
import { Sidecar, type SidecarSettings } from './sidecar.js';
import { isLoopback } from './auth.js';
import { listenEarly } from './early-server.js';
import { DEFAULT_JOURNAL_MAX_BYTES } from './serve-defaults.js';

/**
 * `stepscope serve`'s composition root: decides the sidecar's inputs from the options, opens what
 * they name (the journal, the listening socket, the counter sources), starts the Sidecar on real
 * timers and stops it on a signal.
 */

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
  /** What a GPU-hour costs (--gpu-hour-price), to price the waste ledger; null: not priced. */
  gpuHourPrice?: number | null;
  baseline?: string;
  /** The run history's folder (default <out>/history; none without --out). */
  historyDir?: string;
  /** Runs kept per job in the history (default 20). */
  historyKeep?: number;
  /** A run this much slower per sample than its reference is a regression, percent (default 10). */
  regressionThresholdPct?: number;
  /** Frames a second on ws /v1/stream (default 4), and its per-viewer limits. */
  streamRateHz?: number;
  streamLimits?: Partial<StreamLimits>;
  /** Stop cleanly, writing summaries, on SIGTERM and SIGINT. */
  handleSignals?: boolean;
  token?: string;
  /** Allow a bind beyond loopback without a token. */
  insecure?: boolean;
  limits?: Partial<IngestLimits>;
  /** Hard cap on the journal's bytes under --out (default 512 MiB). */
  journalMaxBytes?: number;
  /** How often the engine ticks (default 250 ms); the stream sends at most one frame a tick. */
  tickMs?: number;
  /** A rank is stalled after this many of its median steps without one (--stall-steps) ... */
  stallSteps?: number;
  /** ... and not before this, s (--stall-floor). */
  stallFloorS?: number;
  /** --stack-dumps: hooks send every thread's whole stack, written under --out when a job hangs. */
  stackDumps?: boolean;
  /** Deep captures (torch.profiler windows) on a verdict and on demand; default on (--no-capture). */
  capture?: boolean;
  /** A non-healthy verdict held this long asks for one (default 60 s). */
  captureAfterS?: number;
  /** At most one capture a job this often (default 600 s). */
  captureEveryS?: number;
  /** Steps a capture holds (default 20). */
  captureSteps?: number;
}

const CHECKPOINT_MS = 5 * 60_000;

async function loadBaseline(file: string | undefined): Promise<Summary | null> {
  if (!file) return null;
  try {
    return await readSummary(file);
  } catch (error) {
    throw new Error(`--baseline ${(error as Error).message}`);
  }
}

/** The engine as the journal left it (or a new one), and a recorder that journals from here on. */
async function openJournal(options: ServeOptions, limits: IngestLimits, log: Logger): Promise<{ engine: Engine; recorder: Recorder }> {
  const recorderOptions = (maxBytes: number) => ({
    checkpointBytes: Math.min(16 * 1024 * 1024, Math.floor(maxBytes / 8)),
    checkpointMs: CHECKPOINT_MS,
    samplesGiveUpShare: 0.75,
    now: REAL_TIMERS.now,
    log,
  });
  if (!options.out) {
    log.warn('no --out: nothing is journaled, so a restart forgets the job, no summary or report file is written and no run history is kept to compare runs with');
    const engine = new Engine({ limits });
    return { engine, recorder: new Recorder(engine, null, recorderOptions(0)) };
  }
  const maxCheckpointBytes = checkpointBytesFor(limits);
  const { engine, report } = await replayJournal(options.out, { limits, maxCheckpointBytes });
  if (report.entries + report.skipped + report.problems > 0 || report.checkpoint) {
    const fields = { out: options.out, checkpoint: report.checkpoint, entries: report.entries, skipped: report.skipped, problems: report.problems, ms: report.ms, jobs: engine.world.jobs.jobCount };
    if (report.problems + report.skipped > 0) log.warn({ ...fields, examples: report.examples.slice(0, 5) }, 'resumed from journal; some of it could not be used');
    else log.info(fields, 'resumed from journal');
  }
  const maxBytes = options.journalMaxBytes ?? DEFAULT_JOURNAL_MAX_BYTES;
  const wal = await Wal.open({ dir: options.out, maxBytes, maxCheckpointBytes });
  const recorder = new Recorder(engine, wal, recorderOptions(maxBytes));
  recorder.replay = { entries: report.entries, skipped: report.skipped, problems: report.problems, ms: report.ms };
  return { engine, recorder };
}

/** Refuses, before anything starts, a sidecar reachable from other machines that anyone could feed. */
function checkExposure(options: ServeOptions, log: Logger): void {
  if (isLoopback(options.host) || options.token) return;
  if (!options.insecure) {
    throw new Error(`--host ${options.host} is reachable from other machines: give --token (or STEPSCOPE_TOKEN), or --insecure to run without one`);
  }
  log.warn({ host: options.host }, 'listening beyond loopback without a token (--insecure): anyone who can reach this port can send steps and read the state');
}

export interface Served {
  sidecar: Sidecar;
  /** Where hooks connect. */
  url: string;
}

export async function serve(given: ServeOptions): Promise<Served> {
  const log = createLogger(given.logLevel);
  checkExposure(given, log);
  // Every source, from the registry's tables. The inventory is read while the rest starts (it waits
  // on lscpu and two nvidia-smi runs, seconds on a big GPU node without persistence mode); journaled
  // where it always was, below.
  const sources = new Sources({
    gpuSource: given.gpuSource,
    nvidiaSmi: given.nvidiaSmi,
    gpuIntervalMs: given.gpuIntervalMs,
    dcgm: given.dcgmUrl ? { url: given.dcgmUrl, select: { pod: given.dcgmPod, namespace: given.dcgmNamespace } } : null,
    hostIntervalMs: given.hostIntervalMs,
    procRoot: given.procRoot,
    // Only a live job's verdicts and notes show the node's processes, and want a GPU sample each
    // half second; idle, the scan and the samples are most of the CPU.
    jobsLive: () => engine.world.jobs.liveJobs().length > 0,
    simScenario: given.simScenario,
    log,
  });
  // The jobs and ranks its container's memory holds, before anything is replayed into it.
  const options = { ...given, limits: await fitToMemory(given.limits ?? {}, log) };
  const baseline = await loadBaseline(options.baseline);
  // `[::1]` as in a URL is `::1` to listen on.
  const listenHost = options.host.replace(/^\[(.*)\]$/, '$1');
  // Listening from the start: a long replay is `recovering`, not a sidecar that is down.
  const early = await listenEarly(listenHost, options.port, options.token);
  const url = `ws://${listenHost.includes(':') ? `[${listenHost}]` : listenHost}:${early.port}`;
  if (options.out) log.info({ url, port: early.port, out: options.out }, 'recovering: listening while the journal is replayed (/readyz 503 until done)');
  // One set of limits, here: the engine keeps no more jobs and ranks than the ingest admits.
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const { engine, recorder } = await openJournal(options, limits, log).catch(async (error: Error) => {
    await early.close();
    throw error;
  });
  early.doing = 'starting: reading the node and choosing the GPU counter source';
  let onRequest: Parameters<FastifyServerFactory>[0] = () => undefined;
  const sidecar = new Sidecar(sidecarSettings(options, limits, baseline), {
    engine,
    recorder,
    sources,
    log,
    scheduler: REAL_TIMERS,
    listener: early,
    serverFactory: (handler) => ((onRequest = handler), early.server),
  });
  await sidecar.start().catch((error: Error) => {
    throw error instanceof GpuSourceError ? new Error(`--gpu-source ${options.gpuSource}: ${error.message}`) : error;
  });
  // Before listening: a pod may be stopped the moment it is ready, and its summary is still owed.
  if (options.handleSignals) {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void sidecar.stop(signal));
  }
  early.handOver(onRequest);
  log.info({ url, port: early.port, out: options.out ?? null, gpu_source: sidecar.gpuSource?.source ?? null }, 'listening');
  return { sidecar, url };
}

/** The sidecar's settings as the options decide them, in the units its parts take. */
function sidecarSettings(options: ServeOptions, limits: IngestLimits, baseline: Summary | null): SidecarSettings {
  return {
    out: options.out ?? null,
    exitOnEnd: options.exitOnEnd,
    config: {
      windowMs: options.windowS * 1000,
      holdMs: options.holdS * 1000,
      endGraceMs: options.endGraceS * 1000,
      gpuHourPrice: options.gpuHourPrice ?? null,
      ...(options.stallSteps !== undefined ? { stallSteps: options.stallSteps } : {}),
      ...(options.stallFloorS !== undefined ? { stallFloorMs: options.stallFloorS * 1000 } : {}),
      ...(options.stackDumps ? { stackDumps: true } : {}),
      ...(options.regressionThresholdPct !== undefined ? { regressionThresholdPct: options.regressionThresholdPct } : {}),
    },
    tickMs: options.tickMs ?? TICK_MS,
    maxFrameBytes: options.maxFrameBytes,
    windowMs: options.windowS * 1000,
    token: options.token,
    stream: { rateHz: options.streamRateHz, limits: options.streamLimits },
    gpuIntervalMs: options.gpuIntervalMs,
    limits,
    stackDumps: options.stackDumps === true,
    capture: {
      enabled: options.capture !== false,
      afterMs: (options.captureAfterS ?? CAPTURE_DEFAULTS.afterS) * 1000,
      everyMs: (options.captureEveryS ?? CAPTURE_DEFAULTS.everyS) * 1000,
      steps: options.captureSteps ?? CAPTURE_DEFAULTS.steps,
      maxBytes: PROFILE_LIMITS.maxBytes,
      // A chunk and its frame's few fields within --max-frame-bytes.
      chunkBytes: Math.max(1024, Math.min(PROFILE_LIMITS.chunkBytes, options.maxFrameBytes - 1024)),
    },
    procRoot: options.procRoot,
    history: {
      dir: options.historyDir ?? (options.out ? path.join(options.out, 'history') : null),
      keep: options.historyKeep,
      thresholdPct: options.regressionThresholdPct,
      baseline,
    },
  };
}
