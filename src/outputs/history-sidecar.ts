import type { FastifyInstance } from 'fastify';
import type { Summary } from '../protocol/summary.js';
import type { Engine } from '../engine/engine.js';
import type { EndedRun, EngineSnapshot } from '../engine/snapshot.js';
import type { Logger } from '../log/log.js';
import { RUNS_SCHEMA, type RunsResponse } from '../protocol/runs.js';
import { chooseReference, DEFAULT_HISTORY_KEEP, DEFAULT_REGRESSION_THRESHOLD_PCT, describeReference, runRecord } from './history.js';
import { LIVE_DEFAULTS, LiveComparisons, type LiveOptions, type LiveSnapshot } from './history-live.js';
import { IoTimeoutError } from '../io/bounded-read.js';
import { HistoryStore } from './history-store.js';

/**
 * The sidecar's run history, wired: the store under --out, live comparisons put into each snapshot
 * the outputs read, the summary of a run that ended completed with its comparison, regression and
 * the job's earlier runs (and kept in the history), `GET /v1/runs`. The I/O around history.ts and
 * history-live.ts, which are pure.
 */

export interface SidecarHistoryOptions {
  /** Where the history is kept; null keeps none (no --out). */
  dir: string | null;
  keep?: number;
  thresholdPct?: number;
  /** --baseline: every run is compared with it rather than with its history. */
  baseline: Summary | null;
  engine: Engine;
  log: Logger;
  live?: Partial<Omit<LiveOptions, 'thresholdPct'>>;
}

export interface SidecarHistory {
  /**
   * The engine's snapshot with each live job's comparison, and the regressions that began or ended
   * at it (the same object back for the same snapshot, so each change goes out once).
   */
  decorate(snapshot: EngineSnapshot): LiveSnapshot;
  /** A run that ended: its summary completed, and kept in the history. */
  finish(ended: EndedRun): Promise<Summary>;
  route(app: FastifyInstance): void;
  /** Where the history is kept (null without --out): what it holds in memory is bounded (history-store.ts). */
  readonly store: HistoryStore | null;
}

/** As hooks may name a job (hook-schema.ts). */
const MAX_JOB_NAME = 128;

/** Earlier runs listed in a summary. */
const RUNS_IN_SUMMARY = 10;

export function sidecarHistory(options: SidecarHistoryOptions): SidecarHistory {
  const { log, engine, baseline } = options;
  const thresholdPct = options.thresholdPct ?? DEFAULT_REGRESSION_THRESHOLD_PCT;
  const store = options.dir
    ? new HistoryStore(options.dir, options.keep ?? DEFAULT_HISTORY_KEEP, (skipped) => log.warn(skipped, 'run history file skipped'))
    : null;
  const live = new LiveComparisons(
    {
      has: (job) => {
        if (baseline) return true;
        if (!store) return false;
        // A job the sidecar holds: kept in the history's cache even with no runs on disk yet.
        void store.load(job, true).catch(() => undefined);
        return store.entries(job).length > 0;
      },
      choose: (summary) => chooseReference(store?.entries(summary.job) ?? [], summary, baseline),
    },
    { ...LIVE_DEFAULTS, ...options.live, thresholdPct },
  );
  const decorated = new WeakMap<EngineSnapshot, LiveSnapshot>();

  return {
    store,

    decorate(snapshot) {
      let done = decorated.get(snapshot);
      if (done) return done;
      const { snapshot: next, changes } = live.decorate(snapshot, (job) => engine.analyst.summary(job, snapshot.at, { series: false }));
      for (const change of changes) {
        if (change.regressed) log.warn({ job: change.job, run: change.run, change_pct: change.changePct, threshold_pct: thresholdPct }, `regression: ${change.text}`);
        else log.info({ job: change.job, run: change.run, change_pct: change.changePct }, 'regression over: back within the threshold of its reference');
      }
      done = next;
      decorated.set(snapshot, done);
      return done;
    },

    async finish({ job, run, summary }) {
      const earlier = store ? await store.load(job, true) : [];
      const { comparison, regression } = live.finish(run, summary);
      const completed: Summary = {
        ...summary,
        ...(comparison ? { baseline: comparison } : {}),
        ...(regression ? { regression } : {}),
        ...(earlier.length ? { history: earlier.slice(-RUNS_IN_SUMMARY).reverse().map((e) => e.record) } : {}),
      };
      if (regression) log.warn({ job, run, change_pct: regression.change_pct, threshold_pct: thresholdPct }, `regression: ${regression.text}`);
      if (store && summary.steps > 0) {
        await store.add(completed, runRecord(completed, run, comparison, regression)).catch((error: Error) => log.error({ err: error.message, job, run }, 'run history not written'));
      }
      return completed;
    },

    route(app) {
      app.get<{ Querystring: { job?: string } }>('/v1/runs', async (request, reply) => {
        const job = request.query.job;
        if (typeof job !== 'string' || job === '') return reply.code(400).send({ error: 'give the job: /v1/runs?job=NAME' });
        if (job.length > MAX_JOB_NAME) return reply.code(400).send({ error: `a job name has at most ${MAX_JOB_NAME} characters` });
        // Known to the sidecar or not, a name is only kept if it has a history on disk: names cannot grow memory.
        let entries: Awaited<ReturnType<HistoryStore['load']>> = [];
        try {
          entries = store ? await store.load(job, engine.world.jobs.hasJob(job)) : [];
        } catch (error) {
          if (!(error instanceof IoTimeoutError)) throw error;
          return reply.code(503).header('retry-after', '5').send({ error: `the run history cannot be read now: ${error.message}` });
        }
        // What the run going on (else the next one) is compared with: the latest run tells the fingerprint.
        const running = engine.world.jobs.liveJobs().includes(job);
        const latest = engine.analyst.summary(job, engine.snapshot().at, { series: false }) ?? entries.at(-1)?.summary ?? null;
        const body: RunsResponse = {
          schema: RUNS_SCHEMA,
          job,
          threshold_pct: thresholdPct,
          runs: entries.map((e) => e.record).reverse(),
          reference: latest ? describeReference(chooseReference(entries, latest, baseline, !running)) : null,
          skipped: store?.skippedOf(job).length ?? 0,
        };
        return body;
      });
    },
  };
}
