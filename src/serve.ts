import type { FastifyInstance } from 'fastify';
import { Ingest } from './ingest/ingest.js';
import { createLogger, type Logger, type LogLevel } from './log.js';
import { buildServer } from './server.js';
import { JobStore } from './store/job-store.js';
import { Journal } from './store/journal.js';
import { applyEntry } from './store/replay.js';

export interface ServeOptions {
  host: string;
  port: number;
  out?: string;
  exitOnEnd: boolean;
  endGraceS: number;
  logLevel: LogLevel;
  maxFrameBytes: number;
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

async function openStore(out: string | undefined, log: Logger): Promise<{ store: JobStore; journal: Journal | null }> {
  const store = new JobStore();
  if (!out) return { store, journal: null };
  const { journal, replay } = await Journal.open(out);
  for (const entry of replay.entries) applyEntry(store, entry);
  store.restarted(Date.now());
  if (replay.entries.length > 0 || replay.truncatedBytes > 0) {
    log.info(
      { journal: journal.path, entries: replay.entries.length, corrupt: replay.corrupt, truncated_bytes: replay.truncatedBytes, jobs: store.jobCount },
      'resumed from journal',
    );
  }
  return { store, journal };
}

export async function serve(options: ServeOptions): Promise<Sidecar> {
  const log = createLogger(options.logLevel);
  const { store, journal } = await openStore(options.out, log);
  const ingest = new Ingest(store, journal);
  const app = await buildServer({ ingest, log, maxFrameBytes: options.maxFrameBytes });
  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const url = `ws://${options.host.includes(':') ? `[${options.host}]` : options.host}:${port}`;
  log.info({ url, port, out: options.out ?? null }, 'listening');

  let resolveStopped: (code: number) => void = () => undefined;
  const stopped = new Promise<number>((resolve) => (resolveStopped = resolve));
  let stopping: Promise<number> | null = null;

  const stop = (reason: string): Promise<number> => {
    stopping ??= (async () => {
      clearInterval(settleTimer);
      const endedNow = store.endAll(Date.now());
      log.info({ reason, jobs_ended: endedNow }, 'stopping');
      await app.close();
      await journal?.close();
      resolveStopped(0);
      return 0;
    })();
    return stopping;
  };

  const settleTimer = setInterval(() => {
    for (const job of store.settle(Date.now(), options.endGraceS * 1000)) {
      const snapshot = store.snapshot(Date.now()).find((j) => j.job === job);
      log.info({ job, reason: snapshot?.end_reason, steps: snapshot?.steps, dropped: snapshot?.dropped }, 'job ended');
    }
    if (options.exitOnEnd && store.allEnded()) void stop('every job ended');
  }, SETTLE_INTERVAL_MS);

  return { app, ingest, log, url, stopped, stop };
}
