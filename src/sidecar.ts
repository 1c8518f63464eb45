import os from 'node:os';
import type { FastifyInstance, FastifyServerFactory } from 'fastify';
import { readRankProcess } from './counters/proc-rank.js';
import { gpuSourceDetail, type GpuSourceChoice, type Sources } from './counters/registry.js';
import { IDLE_INTERVAL_MS } from './counters/nvidia-smi.js';
import type { Engine } from './engine/engine.js';
import type { EngineConfig } from './engine/entries.js';
import type { EndedRun, EngineSnapshot } from './engine/snapshot.js';
import { AWAITED_WITHIN_MS, SHOWN_AT_ONCE, TickSchedule, UNWATCHED_TICK_MS, WATCHED_TICK_MS, type Timers } from './engine/tick-schedule.js';
import { streamPeriodMs } from './outputs/stream-defaults.js';
import { buildServer } from './http-server.js';
import { Ingest } from './ingest/ingest.js';
import type { IngestLimits } from './ingest/limits.js';
import { ProfileCaptures, type CaptureOptions } from './ingest/profiles.js';
import { StallWatch } from './ingest/stall-watch.js';
import type { Recorder } from './journal/recorder.js';
import type { Logger } from './log/log.js';
import { sidecarRuns, type SidecarRuns } from './outputs/runs.js';
import { StackDumps } from './outputs/stack-dumps.js';
import type { StreamOptions } from './outputs/stream.js';
import { writeSummaryFiles } from './outputs/summary-files.js';
import { renderSummary } from './outputs/summary-render.js';
import type { Summary } from './protocol/summary.js';

/** What the sidecar's periodic work runs on: real timers in production, a clock the test moves in tests. */
export type Scheduler = Timers;

/** Everything the command line decided, in the units the parts take. */
export interface SidecarSettings {
  /** Where summaries, stack dumps and captures go; null: none written (no --out). */
  out: string | null;
  /** Stop once every job that ended in this process has and none is left. */
  exitOnEnd: boolean;
  /** The engine's configuration, journaled at start. */
  config: EngineConfig;
  /** The engine's tick with no viewer, ms. */
  tickMs: number;
  maxFrameBytes: number;
  windowMs: number;
  token?: string;
  stream?: Pick<StreamOptions, 'rateHz' | 'limits'>;
  gpuIntervalMs?: number;
  /** The ingest's limits, the same the engine was built with. */
  limits: IngestLimits;
  /** --stack-dumps: hooks send whole stacks, written under `out` when a job hangs. */
  stackDumps: boolean;
  /** Deep captures: when one is asked for by itself, and the trace's bounds. */
  capture: Omit<CaptureOptions, 'out' | 'now' | 'log'>;
  procRoot: string;
  history: { dir: string | null; keep?: number; thresholdPct?: number; baseline: Summary | null };
}

/** The counter sources as the sidecar uses them: started once it can take their readings. */
export type SidecarSources = Pick<Sources, 'inventory' | 'start' | 'stop' | 'status' | 'lacksThrottleFill' | 'repace'>;

export interface SidecarParts {
  /** The engine as the journal left it, and the recorder that journals into it from here on. */
  engine: Engine;
  recorder: Recorder;
  sources: SidecarSources;
  log: Logger;
  scheduler: Scheduler;
  /** The server already listening (early-server.ts), closed after the app; none: the app is not listening. */
  listener?: { close(): Promise<void> };
  serverFactory?: FastifyServerFactory;
}

/**
 * The sidecar, its parts wired: hooks' frames into the journal, each tick's snapshot out to the
 * viewers, the history, stall watch, captures and summaries. Built from decided inputs; every
 * periodic thing it owns runs on the injected scheduler and clock.
 */
export class Sidecar {
  readonly engine: Engine;
  readonly recorder: Recorder;
  readonly ingest: Ingest;
  readonly log: Logger;
  readonly runs: SidecarRuns;
  readonly captures: ProfileCaptures;
  /** Resolves with the exit code once the sidecar has stopped. */
  readonly stopped: Promise<number>;
  private appBuilt: FastifyInstance | null = null;
  private gpu: GpuSourceChoice | null = null;
  private ticks: TickSchedule | null = null;
  private stopping: Promise<number> | null = null;
  private resolveStopped: (code: number) => void = () => undefined;
  private readonly stalls: StallWatch;
  private readonly dumps: StackDumps | null;
  private readonly snapshotListeners = new Set<(snapshot: EngineSnapshot) => void>();
  /** Runs ended in this process: --exit-on-end waits for one, not for those replayed already ended. */
  private endedHere = 0;
  /** Whether a job was live at the last tick (the sources' pace follows it). */
  private jobsWereLive = false;
  private writing = Promise.resolve();
  private readonly now: () => number;

  constructor(
    private readonly settings: SidecarSettings,
    private readonly parts: SidecarParts,
  ) {
    const { engine, recorder, log, scheduler } = parts;
    this.engine = engine;
    this.recorder = recorder;
    this.log = log;
    this.now = () => scheduler.now();
    this.stopped = new Promise<number>((resolve) => (this.resolveStopped = resolve));
    // Each run's references (--baseline, or its past runs) are journaled; the engine compares.
    this.runs = sidecarRuns({ ...settings.history, record: (entry) => recorder.record(entry), snapshot: () => engine.snapshot(), now: this.now, log });
    this.ingest = new Ingest(engine.world.jobs, recorder, { now: this.now, gpuIntervalMs: settings.gpuIntervalMs, limits: settings.limits, nvml: engine.world.hookGpu });
    this.ingest.deepCaptures = settings.stackDumps;
    this.dumps = settings.stackDumps && settings.out ? new StackDumps(settings.out) : null;
    this.captures = new ProfileCaptures(this.ingest, engine.world.jobs, {
      out: settings.out,
      ...settings.capture,
      now: this.now,
      log,
    });
    this.stalls = new StallWatch(this.ingest, engine.world.jobs, { now: this.now, readProcess: (rank) => readRankProcess(rank, { procRoot: settings.procRoot, hostname: os.hostname() }) });
  }

  /** The HTTP/websocket app (once started). */
  get app(): FastifyInstance {
    if (!this.appBuilt) throw new Error('the sidecar has not started');
    return this.appBuilt;
  }

  /** The GPU counter source chosen at start. */
  get gpuSource(): GpuSourceChoice | null {
    return this.gpu;
  }

  /** Journals the start, chooses the GPU source, builds the app and starts ticking; on failure, closes what it opened. */
  async start(): Promise<void> {
    const { recorder, engine, sources, log } = this.parts;
    await recorder.record({ t: 'start', at: this.now(), config: this.settings.config }).catch(() => undefined);
    // Journaled, so a replayed summary names the node the live one did.
    await recorder.record({ t: 'node', at: this.now(), node: await sources.inventory }).catch(() => undefined);
    // Runs that ended before a crash, their summaries never written.
    void this.writeUpAll(engine.unsummarized(this.now()));
    try {
      this.gpu = await sources.start({
        gpu: (samples) => void this.ingest.gpuSamples(samples).catch(this.fail('GPU samples')),
        fill: (samples) => void recorder.record({ t: 'gpu', at: this.now(), samples, fill: 'nvidia-smi' }).catch(() => undefined),
        // Journaled like every input, so a replay shows the same other processes on the GPUs.
        apps: (apps) => void recorder.record({ t: 'apps', at: this.now(), apps }).catch(this.fail('GPU processes')),
        host: (sample) => void this.ingest.hostSample(sample).catch(this.fail('host sample')),
      });
    } catch (error) {
      await sources.stop();
      await recorder.close();
      await this.parts.listener?.close();
      throw error;
    }
    // Journaled: hook-forwarded GPU readings count only when they are the source, in a replay too.
    await recorder.record({ t: 'source', at: this.now(), gpu: this.gpu.source, reason: this.gpu.reason }).catch(() => undefined);
    // Under DCGM without nvidia-smi beside it, the hooks' NVML readings fill the throttle signals the
    // exporter lacks (every rank polling NVML otherwise is waste).
    this.ingest.wants.nvml = engine.world.hookGpu || sources.lacksThrottleFill;
    // No viewer yet: the snapshots leave out the sparkline history until one connects.
    engine.showHistory(false);
    const ticks = new TickSchedule(
      () => void this.tick(),
      () => engine.changed,
      // While no job is live, the readings of the host and the GPUs (each every 5 s) share a tick.
      // While watched, ticks no closer than the stream's frames (a closer one would not be sent).
      // While no viewer watches a live job, ticks at the hooks' unwatched sends (a reader still gets one within tickMs).
      {
        idleMs: this.settings.tickMs,
        unwatchedMs: Math.max(this.settings.tickMs, UNWATCHED_TICK_MS),
        watchedMs: Math.max(WATCHED_TICK_MS, streamPeriodMs(this.settings.stream?.rateHz)),
        quietMs: IDLE_INTERVAL_MS,
      },
      this.parts.scheduler,
      // Time alone changes nothing while no job is live.
      () => !this.jobsLive(),
      (since) => engine.world.jobs.stepsAwaited(since, AWAITED_WITHIN_MS),
    );
    engine.onChange = (kind) => ticks.entered(SHOWN_AT_ONCE.has(kind));
    this.ticks = ticks;
    const app = await buildServer({
      ingest: this.ingest,
      log,
      snapshot: () => this.decorate(engine.snapshot()),
      fresh: () => (engine.changed && this.stopping === null ? (ticks.soon(), this.nextSnapshot()) : Promise.resolve(this.decorate(engine.snapshot()))),
      onSnapshot: (listener) => (this.snapshotListeners.add(listener), () => this.snapshotListeners.delete(listener)),
      journal: () => recorder.health(),
      maxFrameBytes: this.settings.maxFrameBytes,
      token: this.settings.token,
      windowMs: this.settings.windowMs,
      sources: () => sources.status(),
      now: this.now,
      hostStepMs: this.parts.scheduler.hostStepMs,
      ready: () => (this.stopping !== null ? { ready: false, reason: 'stopping' } : { ready: true, reason: null }),
      detail: () => gpuSourceDetail(sources.status().gpu),
      stream: {
        ...this.settings.stream,
        // Before the stream reads the snapshot for the new viewer's first frame: the history is in it.
        onViewers: (count) => (engine.showHistory(count > 0), ticks.watched(count > 0)),
      },
      serverFactory: this.parts.serverFactory,
    });
    this.appBuilt = app;
    this.runs.route(app);
    // Deep capture on demand: `stepscope capture`, the viewer's key.
    this.captures.route(app, () => engine.snapshot());
    await app.ready();
  }

  /** Journals a tick at the scheduler's time and publishes its snapshot (what the tick schedule runs). */
  async tick(): Promise<EngineSnapshot | null> {
    const snapshot = await this.parts.recorder.record({ t: 'tick', at: this.now() }).catch((error: Error) => (this.fail('tick')(error), null));
    // The sources read more often while a job is live: told when that changes, not looking each second.
    const live = this.jobsLive();
    if (live !== this.jobsWereLive) {
      this.jobsWereLive = live;
      this.parts.sources.repace();
    }
    return snapshot ? this.published(snapshot) : null;
  }

  stop(reason: string): Promise<number> {
    this.stopping ??= (async () => {
      const { recorder, sources, log } = this.parts;
      this.ticks?.stop();
      log.info({ reason }, 'stopping');
      // The hooks go first: a step acknowledged once the summaries are being made would be in neither.
      await this.appBuilt?.close();
      await this.parts.listener?.close();
      const last = await recorder.record({ t: 'stop', at: this.now() }).catch(() => null);
      if (last) void this.writeUpAll(last.ended);
      await this.writing;
      await sources.stop();
      await recorder.close();
      this.resolveStopped(0);
      return 0;
    })();
    return this.stopping;
  }

  /** The state as served: each job's deep captures beside the engine's. */
  private decorate(snapshot: EngineSnapshot): EngineSnapshot {
    return snapshot.jobs.some((job) => this.captures.of(job.job).length > 0) ? { ...snapshot, jobs: this.captures.decorate(snapshot.jobs) } : snapshot;
  }

  /** Whether any job is live: time alone moves nothing while none is, and the sources read at their idle pace. */
  private jobsLive(): boolean {
    return this.engine.world.jobs.liveJobs().length > 0;
  }

  private nextSnapshot(): Promise<EngineSnapshot> {
    return new Promise<EngineSnapshot>((resolve) => {
      const once = (snapshot: EngineSnapshot) => (this.snapshotListeners.delete(once), resolve(snapshot));
      this.snapshotListeners.add(once);
    });
  }

  private fail(what: string): (error: Error) => void {
    return (error) => this.parts.log.error({ err: error.message }, `${what} not recorded`);
  }

  private published(engineSnapshot: EngineSnapshot): EngineSnapshot {
    const { log } = this.parts;
    const snapshot = this.decorate(engineSnapshot);
    this.runs.onSnapshot(snapshot);
    this.stalls.onSnapshot(snapshot);
    this.captures.onSnapshot(snapshot);
    if (this.dumps) void this.dumps.onSnapshot(snapshot).then((files) => files.length && log.info({ files }, 'job hung: every rank\'s stacks written'), (error: Error) => log.error({ err: error.message }, 'stack dumps not written'));
    for (const event of snapshot.events) {
      log.info(
        { job: event.job, rank: event.rank, from: event.from, to: event.to, cause: event.cause, since: new Date(event.since).toISOString(), rule: event.judgement.evidence.rule },
        event.rank === null ? 'job verdict changed' : 'rank verdict changed',
      );
    }
    for (const listener of this.snapshotListeners) listener(snapshot);
    if (snapshot.ended.length === 0) return snapshot;
    this.endedHere += snapshot.ended.length;
    for (const { job, summary } of snapshot.ended) log.info({ job, reason: summary.end_reason, steps: summary.steps, dropped: summary.lost }, 'job ended');
    void this.writeUpAll(snapshot.ended).then(() => {
      if (this.settings.exitOnEnd && this.endedHere > 0 && !this.jobsLive() && this.stopping === null) void this.stop('every job ended');
    });
    return snapshot;
  }

  private writeUpAll(runs: readonly EndedRun[]): Promise<void> {
    this.writing = this.writing.then(async () => {
      for (const run of runs) await this.writeUp(run);
    });
    return this.writing;
  }

  private async writeUp(ended: EndedRun): Promise<void> {
    const { recorder, log } = this.parts;
    const { job, run } = ended;
    const out = this.settings.out;
    // The summary is owed whatever the history does: without its earlier runs if need be.
    const finished = await this.runs.finish(ended).catch((error: Error) => (log.error({ err: error.message, job, run }, 'run not kept in its history'), ended.summary));
    // The deep captures asked for while this run stepped.
    const runCaptures = this.captures.of(job).filter((c) => c.requested_at >= finished.started_at);
    const summary = runCaptures.length ? { ...finished, captures: [...runCaptures] } : finished;
    const files = out ? await writeSummaryFiles(out, summary, run).catch((error: Error) => (log.error({ err: error.message }, 'summary not written'), null)) : [];
    log.info({ job, run, verdict: summary.verdict, cause: summary.cause, steps: summary.steps, files }, renderSummary(summary, 'text'));
    if (files !== null) await recorder.record({ t: 'summarized', at: this.now(), job, run }).catch(this.fail('summary written'));
  }
}
