import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { SourceStatus } from '../../src/counters/status.js';
import { Engine } from '../../src/engine/engine.js';
import type { EngineConfig, JournalEntry } from '../../src/engine/entries.js';
import type { EngineSnapshot } from '../../src/engine/snapshot.js';
import type { Ingest } from '../../src/ingest/ingest.js';
import { DEFAULT_LIMITS, type IngestLimits } from '../../src/ingest/limits.js';
import { Recorder } from '../../src/journal/recorder.js';
import { TICK_MS } from '../../src/journal/replay.js';
import type { Wal } from '../../src/journal/wal.js';
import { createLogger, type Logger } from '../../src/log/log.js';
import type { SidecarRuns } from '../../src/outputs/runs.js';
import type { StreamOptions } from '../../src/outputs/stream.js';
import type { ProfileCaptures } from '../../src/ingest/profiles.js';
import type { NodeInventory } from '../../src/protocol/state.js';
import { Sidecar, type SidecarSettings, type SidecarSources } from '../../src/sidecar.js';
import { manualScheduler, type ManualScheduler } from './manual-scheduler.js';

/**
 * The Sidecar class in this process, as serve() builds it, on a scheduler the test moves: routes
 * are tested with app.inject and in-process sockets, and time moves and the engine ticks only when
 * the test says so (tick(), or advance() to run the tick schedule as production's timers would).
 */
export interface InProcess {
  sidecar: Sidecar;
  app: FastifyInstance;
  engine: Engine;
  ingest: Ingest;
  recorder: Recorder;
  runs: SidecarRuns;
  captures: ProfileCaptures;
  scheduler: ManualScheduler;
  now(): number;
  /** Moves the clock to `at`; no timer runs. */
  setTime(at: number): void;
  /** Moves the clock `ms` on, running the sidecar's tick schedule on the way. */
  advance(ms: number): void;
  /** Ticks at the current time and publishes the snapshot, as the sidecar's schedule does. */
  tick(): Promise<EngineSnapshot>;
  /** GET /v1/state as read now: the tick a state read waits for, when anything came in, at the current time. */
  readState(): Promise<LightMyRequestResponse>;
  /** Ticks, at the current time, until `pending` settles (a state read over a real socket waits for one). */
  whileTicking<T>(pending: Promise<T>): Promise<T>;
  record(entry: JournalEntry): Promise<EngineSnapshot | null>;
}

export const SOURCES_NONE: SourceStatus = { gpu: { source: 'none', reason: 'GPU counters turned off (--gpu-source none)', health: null }, host: null, collectors: [] };

/** A node nothing could be read of (no lscpu, no nvidia-smi). */
const UNKNOWN_NODE: NodeInventory = { cpu_model: null, cores_logical: null, cores_physical: null, memory_bytes: null, gpu_models: null, gpu_count: null, driver_version: null, cuda_version: null };

/** --gpu-source none and no host counters: the sources a test feeds by hand. */
const NO_SOURCES: SidecarSources = {
  inventory: Promise.resolve(UNKNOWN_NODE),
  start: () => Promise.resolve({ source: 'none', reason: SOURCES_NONE.gpu.reason }),
  stop: () => Promise.resolve(),
  status: () => SOURCES_NONE,
  lacksThrottleFill: false,
  repace: () => undefined,
};

export async function inProcess(
  options: {
    at?: number;
    wal?: Wal | null;
    stream?: Pick<StreamOptions, 'rateHz' | 'limits'>;
    limits?: Partial<IngestLimits>;
    config?: EngineConfig;
    token?: string;
    /** A real clock instead of the simulated one (for a real hook on the other end). */
    now?: () => number;
    /** Where log lines go (silent unless given, e.g. a capturedLogger's). */
    log?: Logger;
    /** Where summaries and captures go (none unless given). */
    out?: string;
    /** The run history's folder (none unless given). */
    historyDir?: string;
    capture?: Partial<SidecarSettings['capture']>;
    tickMs?: number;
    /** Told when the sidecar tells its sources to look at their pace again (a job went live, or the last ended). */
    onRepace?: () => void;
  } = {},
): Promise<InProcess> {
  const manual = manualScheduler(options.at ?? Date.parse('2026-12-01T12:00:00Z'));
  const real = options.now;
  const scheduler = real ? { ...manual, now: real } : manual;
  const log = options.log ?? createLogger('silent');
  // Built like the sidecar's: the engine and the ingest with one set of limits.
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const engine = new Engine({ limits });
  const recorder = new Recorder(engine, options.wal ?? null, { checkpointBytes: 1 << 20, checkpointMs: 60_000, samplesGiveUpShare: 0.75, now: scheduler.now, log });
  const sidecar = new Sidecar(
    {
      out: options.out ?? null,
      exitOnEnd: false,
      config: options.config ?? { windowMs: 4_000, holdMs: 0, endGraceMs: 10_000 },
      tickMs: options.tickMs ?? TICK_MS,
      maxFrameBytes: 1 << 20,
      windowMs: 4_000,
      token: options.token,
      stream: options.stream,
      limits,
      stackDumps: false,
      capture: { enabled: false, afterMs: 60_000, everyMs: 600_000, steps: 20, maxBytes: 1 << 20, chunkBytes: 64 * 1024, ...options.capture },
      procRoot: '/proc',
      history: { dir: options.historyDir ?? null, baseline: null },
    },
    { engine, recorder, sources: { ...NO_SOURCES, repace: options.onRepace ?? NO_SOURCES.repace }, log, scheduler },
  );
  await sidecar.start();
  // A tick recorded by hand is the sidecar's tick at that time, published as its schedule's are.
  const record = async (entry: JournalEntry) => {
    if (entry.t !== 'tick') return recorder.record(entry);
    if (!real) manual.setTime(entry.at);
    return sidecar.tick();
  };
  const tick = async () => {
    const snapshot = await sidecar.tick();
    if (!snapshot) throw new Error('the tick was not recorded');
    return snapshot;
  };
  // A state read waits for the tick after anything new, as in production; here the ticks come at
  // the current time, one each turn of the event loop, until what the test waits on settles.
  const whileTicking = async <T>(pending: Promise<T>): Promise<T> => {
    let settled = false;
    const watched = pending.finally(() => (settled = true));
    for (;;) {
      await new Promise((resolve) => setImmediate(resolve));
      if (settled) return watched;
      await tick();
    }
  };
  return {
    sidecar,
    app: sidecar.app,
    engine,
    ingest: sidecar.ingest,
    recorder,
    runs: sidecar.runs,
    captures: sidecar.captures,
    scheduler: manual,
    now: scheduler.now,
    setTime: (at) => manual.setTime(at),
    advance: (ms) => manual.advance(ms),
    record,
    tick,
    readState: () => whileTicking(sidecar.app.inject({ url: '/v1/state' })),
    whileTicking,
  };
}
