import type { FastifyInstance } from 'fastify';
import type { SourceStatus } from '../../src/counters/status.js';
import { Engine } from '../../src/engine/engine.js';
import type { EngineConfig, JournalEntry } from '../../src/engine/entries.js';
import type { EngineSnapshot } from '../../src/engine/snapshot.js';
import { Ingest } from '../../src/ingest/ingest.js';
import { DEFAULT_LIMITS, type IngestLimits } from '../../src/ingest/limits.js';
import { Recorder } from '../../src/journal/recorder.js';
import type { Wal } from '../../src/journal/wal.js';
import { createLogger, type Logger } from '../../src/log/log.js';
import type { StreamOptions } from '../../src/outputs/stream.js';
import { buildServer } from '../../src/http-server.js';

/**
 * The sidecar assembled in this process, as serve() does, on a simulated clock: routes are tested
 * with app.inject and in-process sockets, and time moves only when the test says so.
 */
export interface InProcess {
  app: FastifyInstance;
  engine: Engine;
  ingest: Ingest;
  recorder: Recorder;
  now(): number;
  setTime(at: number): void;
  /** Records a tick at the current time and publishes its snapshot, as the sidecar's timer does. */
  tick(): Promise<EngineSnapshot>;
  record(entry: JournalEntry): Promise<EngineSnapshot | null>;
}

export const SOURCES_NONE: SourceStatus = { gpu: { source: 'none', reason: 'GPU counters turned off (--gpu-source none)', health: null }, host: null, collectors: [] };

export async function inProcess(
  options: {
    at?: number;
    wal?: Wal | null;
    ready?: () => { ready: boolean; reason: string | null };
    stream?: Pick<StreamOptions, 'rateHz' | 'limits'>;
    limits?: Partial<IngestLimits>;
    config?: EngineConfig;
    token?: string;
    /** A real clock instead of the simulated one (for a real hook on the other end). */
    now?: () => number;
    /** Where log lines go (silent unless given, e.g. a capturedLogger's). */
    log?: Logger;
  } = {},
): Promise<InProcess> {
  let simulated = options.at ?? Date.parse('2026-12-01T12:00:00Z');
  const clock = options.now ?? (() => simulated);
  const log = options.log ?? createLogger('silent');
  // Built like the sidecar's: the engine and the ingest with one set of limits.
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const engine = new Engine({ limits });
  const recorder = new Recorder(engine, options.wal ?? null, { checkpointBytes: 1 << 20, checkpointMs: 60_000, samplesGiveUpShare: 0.75, now: clock, log });
  const listeners = new Set<(snapshot: EngineSnapshot) => void>();
  const at = clock();
  await recorder.record({ t: 'start', at, config: options.config ?? { windowMs: 4_000, holdMs: 0, endGraceMs: 10_000 } });
  await recorder.record({ t: 'source', at, gpu: 'none', reason: SOURCES_NONE.gpu.reason });
  const ingest = new Ingest(engine.world.jobs, recorder, { now: clock, limits, nvml: engine.world.hookGpu });
  const app = await buildServer({
    ingest,
    log,
    snapshot: () => engine.snapshot(),
    // On the simulated clock, a state read ticks at the current time when the last tick is stale.
    fresh: async () => (engine.changed ? (await record({ t: 'tick', at: clock() }))! : engine.snapshot()),
    onSnapshot: (listener) => (listeners.add(listener), () => listeners.delete(listener)),
    journal: () => recorder.health(),
    maxFrameBytes: 1 << 20,
    windowMs: 4_000,
    sources: () => SOURCES_NONE,
    ready: options.ready,
    stream: options.stream,
    token: options.token,
    now: clock,
  });
  const record = async (entry: JournalEntry) => {
    const snapshot = await recorder.record(entry);
    if (snapshot) for (const listener of listeners) listener(snapshot);
    return snapshot;
  };
  return {
    app,
    engine,
    ingest,
    recorder,
    now: clock,
    setTime: (ms: number) => void (simulated = ms),
    record,
    tick: async () => (await record({ t: 'tick', at: clock() }))!,
  };
}
