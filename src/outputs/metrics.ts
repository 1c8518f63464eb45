import type { FastifyInstance } from 'fastify';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { CloseCode } from '../protocol/messages.js';
import { registerCounterFamilies } from './metrics-counters.js';
import { counterFamily, gaugeFamily } from './metrics-family.js';
import { registerJobFamilies } from './metrics-jobs.js';
import { registerStallFamilies } from './metrics-stalls.js';
import { registerRegressionFamilies } from './metrics-regressions.js';
import { readScrape, type MetricsInputs, type Scrape } from './metrics-scrape.js';
import { registerStepDurations } from './metrics-steps.js';

export type { MetricsInputs } from './metrics-scrape.js';

// Reported from zero, so that rate() and increase() see the first refusal.
const REFUSAL_CODES = [CloseCode.protocolError, CloseCode.unsupportedData, CloseCode.invalidPayload, CloseCode.policyViolation, CloseCode.tooBig, CloseCode.tryAgainLater];
const LIMITS = ['connections', 'frame-rate', 'hello-timeout', 'idle', 'jobs', 'pending', 'ranks', 'unauthorized'];

/** Counts by key, the known keys from zero, in a stable order. */
function* byKey(counts: Record<string, number>, known: readonly (string | number)[]): Generator<[string, number]> {
  for (const key of [...new Set([...known.map(String), ...Object.keys(counts)])].sort()) yield [key, counts[key] ?? 0];
}

function registerIngestFamilies(registry: Registry, inputs: MetricsInputs): void {
  const stats = inputs.ingest;
  const single = (value: number) => [[{}, value] as const];
  gaugeFamily(registry, { name: 'stepscope_build_info', help: 'The running stepscope version.', labelNames: ['version'], samples: () => [[{ version: inputs.version }, 1]] });
  gaugeFamily(registry, { name: 'stepscope_ingest_open_connections', help: 'Hook websocket connections open now.', labelNames: [], samples: () => single(stats.connections) });
  counterFamily(registry, { name: 'stepscope_ingest_connections_total', help: 'Hook websocket connections accepted.', labelNames: [], samples: () => single(stats.connectionsTotal) });
  counterFamily(registry, { name: 'stepscope_ingest_frames_total', help: 'Websocket frames received from hooks, refused ones included.', labelNames: [], samples: () => single(stats.frames) });
  counterFamily(registry, { name: 'stepscope_ingest_records_total', help: 'Step records received and kept (duplicates left out).', labelNames: [], samples: () => single(stats.records) });
  counterFamily(registry, {
    name: 'stepscope_ingest_duplicate_records_total',
    help: 'Step records received again after a reconnect and dropped as duplicates.',
    labelNames: [],
    samples: () => single(stats.duplicates),
  });
  counterFamily(registry, {
    name: 'stepscope_ingest_rejected_frames_total',
    help: 'Frames refused, by the websocket close code the connection was closed with (see docs/protocol.md).',
    labelNames: ['close_code'],
    *samples() {
      for (const [code, count] of byKey(stats.rejected, REFUSAL_CODES)) yield [{ close_code: code }, count];
    },
  });
  counterFamily(registry, {
    name: 'stepscope_ingest_limited_connections_total',
    help: 'Hook connections closed for passing a limit (connections, frame rate, no hello in time, idle, jobs, waiting for hello, ranks per job, no token), by limit.',
    labelNames: ['limit'],
    *samples() {
      for (const [limit, count] of byKey(stats.limited, LIMITS)) yield [{ limit }, count];
    },
  });
  counterFamily(registry, {
    name: 'stepscope_ingest_implausible_total',
    help: 'Step records and counter samples left out (and acknowledged) for times the rank\'s clock could not give, by kind.',
    labelNames: ['kind'],
    *samples() {
      for (const [kind, count] of byKey(stats.implausible, ['counters', 'steps'])) yield [{ kind }, count];
    },
  });
  gaugeFamily(registry, {
    name: 'stepscope_host_clock_step_seconds',
    help: "How far the host's wall clock has stepped since the sidecar started (NTP, a date set by hand), 0 if not by a second: the sidecar keeps its own clock, which does not step, and its times differ from the host's by this until it restarts.",
    labelNames: [],
    samples: () => single(inputs.hostStepMs() / 1000),
  });
  gaugeFamily(registry, { name: 'stepscope_viewer_open_connections', help: 'Viewer connections (ws /v1/stream) open now.', labelNames: [], samples: () => single(inputs.viewers()) });
}

function registerJournalFamilies(registry: Registry, scrape: () => Scrape): void {
  const journal = () => scrape().journal;
  gaugeFamily(registry, {
    name: 'stepscope_journal_ok',
    help: 'Whether the journal writes (1) or has failed or reached its cap (0); acknowledgements wait for it. Absent without --out.',
    labelNames: [],
    samples: () => [[{}, journal() ? Number(journal()!.ok) : null]],
  });
  gaugeFamily(registry, { name: 'stepscope_journal_bytes', help: 'Bytes of the journal on disk now: the checkpoint and the segments since it.', labelNames: [], samples: () => [[{}, journal()?.bytes ?? null]] });
  gaugeFamily(registry, { name: 'stepscope_journal_max_bytes', help: 'The journal\'s hard cap (--journal-max-bytes).', labelNames: [], samples: () => [[{}, journal()?.maxBytes ?? null]] });
  counterFamily(registry, { name: 'stepscope_journal_write_errors_total', help: 'Journal writes that failed (disk full, I/O error, read-only): nothing in them was acknowledged.', labelNames: [], samples: () => [[{}, journal()?.writeErrors ?? null]] });
  counterFamily(registry, { name: 'stepscope_journal_checkpoints_total', help: 'Checkpoints written since the sidecar started.', labelNames: [], samples: () => [[{}, journal()?.checkpoints ?? null]] });
  counterFamily(registry, {
    name: 'stepscope_journal_given_up_total',
    help: 'Entries applied but not journaled to stay under the cap, by kind (counter samples only; steps are never given up, they wait).',
    labelNames: ['kind'],
    *samples() {
      const givenUp = journal()?.givenUp;
      if (givenUp) for (const [kind, count] of byKey(givenUp, ['gpu', 'host', 'counters'])) yield [{ kind }, count];
    },
  });
  counterFamily(registry, {
    name: 'stepscope_engine_skipped_entries_total',
    help: 'Entries (live or replayed) the engine could not apply, by reason, e.g. a session it no longer holds: skipped, never fatal.',
    labelNames: ['reason'],
    *samples() {
      for (const [reason, count] of byKey(scrape().skipped, ['unknown-session'])) yield [{ reason }, count];
    },
  });
  counterFamily(registry, {
    name: 'stepscope_journal_replay_skipped_total',
    help: 'Journal lines or entries the last start-up could not use (torn, corrupt, unknown): skipped, never fatal.',
    labelNames: [],
    samples: () => [[{}, journal()?.replay ? journal()!.replay!.skipped + journal()!.replay!.problems : null]],
  });
}

/**
 * GET /metrics in the Prometheus text format, from a registry of this sidecar's own. Every family
 * is read at scrape time from one reading of the engine's latest snapshot.
 */
export function registerMetrics(app: FastifyInstance, inputs: MetricsInputs): void {
  const registry = new Registry();
  // prom-client samples event-loop delay every 10 ms by default: 100 wakeups a second, about a third
  // of the idle sidecar's CPU (issue 24, target 8). Once a second still shows a stalled loop.
  collectDefaultMetrics({ register: registry, prefix: 'stepscope_', eventLoopMonitoringPrecision: 1_000 });
  let scrape: Scrape | null = null;
  const current = () => (scrape ??= readScrape(inputs));
  registerIngestFamilies(registry, inputs);
  registerStepDurations(registry, current);
  registerJournalFamilies(registry, current);
  registerJobFamilies(registry, current);
  registerStallFamilies(registry, current);
  registerCounterFamilies(registry, current, inputs.hostStepMs);
  registerRegressionFamilies(registry, inputs.snapshot);

  app.get('/metrics', async (_request, reply) => {
    scrape = null;
    const text = await registry.metrics();
    return reply.type(registry.contentType).send(text);
  });
}
