import os from 'node:os';
import path from 'node:path';
import { readRankProcess } from './counters/proc-rank.js';
import { StallWatch } from './ingest/stall-watch.js';
import { CAPTURE_DEFAULTS, ProfileCaptures } from './ingest/profiles.js';
import { PROFILE_LIMITS } from './protocol/profile.js';
import { StackDumps } from './outputs/stack-dumps.js';
import type { FastifyInstance, FastifyServerFactory } from 'fastify';
import type { Summary } from './protocol/summary.js';
import type { GpuSourceOption } from './counters/gpu-source-names.js';
import { gpuSourceDetail, GpuSourceError, Sources, type GpuSourceChoice } from './counters/registry.js';
import { Engine } from './engine/engine.js';
import type { EndedRun, EngineSnapshot } from './engine/snapshot.js';
import { Ingest } from './ingest/ingest.js';
import { checkpointBytesFor, DEFAULT_LIMITS, type IngestLimits } from './ingest/limits.js';
import { fitToMemory } from './ingest/memory-budget.js';
import { Recorder } from './journal/recorder.js';
import { replayJournal, TICK_MS } from './journal/replay.js';
import { REAL_TIMERS, TickSchedule, WATCHED_TICK_MS } from './engine/tick-schedule.js';
import { Wal } from './journal/wal.js';
import { createLogger, type Logger, type LogLevel } from './log/log.js';
import type { StreamLimits } from './outputs/stream-viewer.js';
import { renderSummary } from './outputs/summary-render.js';
import { readSummary, writeSummaryFiles } from './outputs/summary-files.js';
import { sidecarRuns } from './outputs/runs.js';
import { buildServer } from './http-server.js';
import { isLoopback } from './auth.js';
import { listenEarly } from './early-server.js';
import { DEFAULT_JOURNAL_MAX_BYTES } from './serve-defaults.js';

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

export interface Sidecar {
  app: FastifyInstance;
  ingest: Ingest;
  engine: Engine;
  log: Logger;
  url: string;
  /** Resolves with the exit code once the sidecar has stopped. */
  stopped: Promise<number>;
  stop(reason: string): Promise<number>;
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

/** The engine as the journal left it (or a new one), bound by `limits`, and a recorder that journals from here on. */
async function openJournal(options: ServeOptions, limits: IngestLimits, log: Logger): Promise<{ engine: Engine; recorder: Recorder }> {
  const recorderOptions = (maxBytes: number) => ({
    checkpointBytes: Math.min(16 * 1024 * 1024, Math.floor(maxBytes / 8)),
    checkpointMs: CHECKPOINT_MS,
    samplesGiveUpShare: 0.75,
    now: Date.now,
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

export async function serve(given: ServeOptions): Promise<Sidecar> {
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
    // Only a live job's verdicts and notes show the node's processes; idle, the scan is most of the CPU.
    processesWanted: () => engine.world.jobs.liveJobs().length > 0,
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
  // Each run's references (--baseline, or its past runs) are journaled; the engine compares.
  const runs = sidecarRuns({
    dir: options.historyDir ?? (options.out ? path.join(options.out, 'history') : null),
    keep: options.historyKeep,
    thresholdPct: options.regressionThresholdPct,
    baseline,
    record: (entry) => recorder.record(entry),
    snapshot: () => engine.snapshot(),
    now: Date.now,
    log,
  });
  const config = {
    windowMs: options.windowS * 1000,
    holdMs: options.holdS * 1000,
    endGraceMs: options.endGraceS * 1000,
    gpuHourPrice: options.gpuHourPrice ?? null,
    ...(options.stallSteps !== undefined ? { stallSteps: options.stallSteps } : {}),
    ...(options.stallFloorS !== undefined ? { stallFloorMs: options.stallFloorS * 1000 } : {}),
    ...(options.stackDumps ? { stackDumps: true } : {}),
    ...(options.regressionThresholdPct !== undefined ? { regressionThresholdPct: options.regressionThresholdPct } : {}),
  };
  await recorder.record({ t: 'start', at: Date.now(), config }).catch(() => undefined);
  // Journaled, so a replayed summary names the node the live one did.
  await recorder.record({ t: 'node', at: Date.now(), node: await sources.inventory }).catch(() => undefined);
  const ingest = new Ingest(engine.world.jobs, recorder, { gpuIntervalMs: options.gpuIntervalMs, limits, nvml: engine.world.hookGpu });
  ingest.deepCaptures = options.stackDumps === true;
  const dumps = options.stackDumps && options.out ? new StackDumps(options.out) : null;
  const captures = new ProfileCaptures(ingest, engine.world.jobs, {
    out: options.out ?? null,
    enabled: options.capture !== false,
    afterMs: (options.captureAfterS ?? CAPTURE_DEFAULTS.afterS) * 1000,
    everyMs: (options.captureEveryS ?? CAPTURE_DEFAULTS.everyS) * 1000,
    steps: options.captureSteps ?? CAPTURE_DEFAULTS.steps,
    maxBytes: PROFILE_LIMITS.maxBytes,
    // A chunk and its frame's few fields within --max-frame-bytes.
    chunkBytes: Math.max(1024, Math.min(PROFILE_LIMITS.chunkBytes, options.maxFrameBytes - 1024)),
    now: Date.now,
    log,
  });
  /** The state as served: each job's deep captures beside the engine's. */
  const decorate = (snapshot: EngineSnapshot) => (snapshot.jobs.some((job) => captures.of(job.job).length > 0) ? { ...snapshot, jobs: captures.decorate(snapshot.jobs) } : snapshot);
  const stalls = new StallWatch(ingest, engine.world.jobs, { now: Date.now, readProcess: (rank) => readRankProcess(rank, { procRoot: options.procRoot, hostname: os.hostname() }) });
  const fail = (what: string) => (error: Error) => log.error({ err: error.message }, `${what} not recorded`);

  /** Runs ended in this process: --exit-on-end waits for one, not for those replayed already ended. */
  let endedHere = 0;
  const writeUp = async (ended: EndedRun) => {
    const { job, run } = ended;
    // The summary is owed whatever the history does: without its earlier runs if need be.
    const finished = await runs.finish(ended).catch((error: Error) => (log.error({ err: error.message, job, run }, 'run not kept in its history'), ended.summary));
    // The deep captures asked for while this run stepped.
    const runCaptures = captures.of(job).filter((c) => c.requested_at >= finished.started_at);
    const summary = runCaptures.length ? { ...finished, captures: [...runCaptures] } : finished;
    const files = options.out ? await writeSummaryFiles(options.out, summary, run).catch((error: Error) => (log.error({ err: error.message }, 'summary not written'), null)) : [];
    log.info({ job, run, verdict: summary.verdict, cause: summary.cause, steps: summary.steps, files }, renderSummary(summary, 'text'));
    if (files !== null) await recorder.record({ t: 'summarized', at: Date.now(), job, run }).catch(fail('summary written'));
  };
  let writing = Promise.resolve();
  const writeUpAll = (runs: readonly EndedRun[]) => (writing = writing.then(async () => {
    for (const run of runs) await writeUp(run);
  }));
  // Runs that ended before a crash, their summaries never written.
  void writeUpAll(engine.unsummarized(Date.now()));

  let gpu: GpuSourceChoice;
  try {
    gpu = await sources.start({
      gpu: (samples) => void ingest.gpuSamples(samples).catch(fail('GPU samples')),
      fill: (samples) => void recorder.record({ t: 'gpu', at: Date.now(), samples, fill: 'nvidia-smi' }).catch(() => undefined),
      // Journaled like every input, so a replay shows the same other processes on the GPUs.
      apps: (apps) => void recorder.record({ t: 'apps', at: Date.now(), apps }).catch(fail('GPU processes')),
      host: (sample) => void ingest.hostSample(sample).catch(fail('host sample')),
    });
  } catch (error) {
    await sources.stop();
    await recorder.close();
    await early.close();
    if (error instanceof GpuSourceError) throw new Error(`--gpu-source ${options.gpuSource}: ${error.message}`);
    throw error;
  }
  // Journaled: hook-forwarded GPU readings count only when they are the source, in a replay too.
  await recorder.record({ t: 'source', at: Date.now(), gpu: gpu.source, reason: gpu.reason }).catch(() => undefined);
  // Under DCGM without nvidia-smi beside it, the hooks' NVML readings fill the throttle signals the
  // exporter lacks (every rank polling NVML otherwise is waste).
  ingest.wants.nvml = engine.world.hookGpu || sources.lacksThrottleFill;

  const snapshotListeners = new Set<(snapshot: EngineSnapshot) => void>();
  const nextSnapshot = () => new Promise<EngineSnapshot>((resolve) => {
    const once = (snapshot: EngineSnapshot) => (snapshotListeners.delete(once), resolve(snapshot));
    snapshotListeners.add(once);
  });
  let stopping: Promise<number> | null = null;
  const published = (engineSnapshot: EngineSnapshot | null) => {
    if (!engineSnapshot) return;
    const snapshot = decorate(engineSnapshot);
    runs.onSnapshot(snapshot);
    stalls.onSnapshot(snapshot);
    captures.onSnapshot(snapshot);
    if (dumps) void dumps.onSnapshot(snapshot).then((files) => files.length && log.info({ files }, 'job hung: every rank\'s stacks written'), (error: Error) => log.error({ err: error.message }, 'stack dumps not written'));
    for (const event of snapshot.events) {
      log.info(
        { job: event.job, rank: event.rank, from: event.from, to: event.to, cause: event.cause, since: new Date(event.since).toISOString(), rule: event.judgement.evidence.rule },
        event.rank === null ? 'job verdict changed' : 'rank verdict changed',
      );
    }
    for (const listener of snapshotListeners) listener(snapshot);
    if (snapshot.ended.length === 0) return;
    endedHere += snapshot.ended.length;
    for (const { job, summary } of snapshot.ended) log.info({ job, reason: summary.end_reason, steps: summary.steps, dropped: summary.lost }, 'job ended');
    void writeUpAll(snapshot.ended).then(() => {
      if (options.exitOnEnd && endedHere > 0 && engine.world.jobs.liveJobs().length === 0 && stopping === null) void stop('every job ended');
    });
  };
  const ticks = new TickSchedule(
    () => void recorder.record({ t: 'tick', at: Date.now() }).then(published, fail('tick')),
    () => engine.changed,
    { idleMs: options.tickMs ?? TICK_MS, watchedMs: WATCHED_TICK_MS },
    REAL_TIMERS,
    () => engine.world.jobs.liveJobs().length === 0,
  );

  let onRequest: Parameters<FastifyServerFactory>[0] = () => undefined;
  const app = await buildServer({
    ingest,
    log,
    snapshot: () => decorate(engine.snapshot()),
    fresh: () => (engine.changed && stopping === null ? nextSnapshot() : Promise.resolve(decorate(engine.snapshot()))),
    onSnapshot: (listener) => (snapshotListeners.add(listener), () => snapshotListeners.delete(listener)),
    journal: () => recorder.health(),
    maxFrameBytes: options.maxFrameBytes,
    token: options.token,
    windowMs: options.windowS * 1000,
    sources: () => sources.status(),
    // Hooks learn in `welcome` whether to forward GPU readings, so not before the source is chosen.
    ready: () => (gpu === undefined || stopping !== null ? { ready: false, reason: stopping ? 'stopping' : 'choosing the GPU counter source' } : { ready: true, reason: null }),
    detail: () => gpuSourceDetail(sources.status().gpu),
    stream: { rateHz: options.streamRateHz, limits: options.streamLimits, onViewers: (count) => ticks.watched(count > 0) },
    serverFactory: (handler) => ((onRequest = handler), early.server),
  });
  runs.route(app);
  // Deep capture on demand: `stepscope capture`, the viewer's key.
  captures.route(app, () => engine.snapshot());
  let resolveStopped: (code: number) => void = () => undefined;
  const stopped = new Promise<number>((resolve) => (resolveStopped = resolve));

  const stop = (reason: string): Promise<number> => {
    stopping ??= (async () => {
      ticks.stop();
      log.info({ reason }, 'stopping');
      // The hooks go first: a step acknowledged once the summaries are being made would be in neither.
      await app.close();
      await early.close();
      const last = await recorder.record({ t: 'stop', at: Date.now() }).catch(() => null);
      if (last) void writeUpAll(last.ended);
      await writing;
      await sources.stop();
      await recorder.close();
      resolveStopped(0);
      return 0;
    })();
    return stopping;
  };
  // Before listening: a pod may be stopped the moment it is ready, and its summary is still owed.
  if (options.handleSignals) {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void stop(signal));
  }

  await app.ready();
  early.handOver(onRequest);
  log.info({ url, port: early.port, out: options.out ?? null, gpu_source: gpu.source }, 'listening');

  return { app, ingest, engine, log, url, stopped, stop };
}

