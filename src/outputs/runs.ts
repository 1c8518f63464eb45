import type { FastifyInstance } from 'fastify';
import type { Summary } from '../protocol/summary.js';
import type { JournalEntry } from '../engine/entries.js';
import { REFERENCE_ENTRY_VERSION } from '../engine/entries.js';
import { chooseReference, DEFAULT_REGRESSION_THRESHOLD_PCT } from '../engine/runs.js';
import type { EndedRun, EngineSnapshot } from '../engine/snapshot.js';
import { IoTimeoutError } from '../io/bounded-read.js';
import type { Logger } from '../log/log.js';
import { RUNS_SCHEMA, type RunsResponse } from '../protocol/runs.js';
import { DEFAULT_HISTORY_KEEP, describeReference, referencesFor, runRecord, type PastRunEntry } from './past-runs.js';
import { PastRunsStore } from './runs-store.js';

/**
 * The sidecar's past runs, wired: the store under --out; each job's references (--baseline, or its
 * past runs) journaled as a `reference` entry for the engine, which compares and calls regressions
 * (src/engine/runs.ts): when the sidecar first holds the job, and again once a run of it is kept, so
 * that they are there before its next run begins; a run that ended kept with the job's earlier runs
 * in its summary; `GET /v1/runs`. Reads only the snapshots the engine publishes.
 */

export interface SidecarRunsOptions {
  /** Where the past runs are kept; null keeps none (no --out). */
  dir: string | null;
  keep?: number;
  thresholdPct?: number;
  /** --baseline: every run is compared with it rather than with its past runs. */
  baseline: Summary | null;
  /** Journals an entry (the recorder's). */
  record: (entry: JournalEntry) => Promise<unknown>;
  /** The latest snapshot. */
  snapshot: () => EngineSnapshot;
  now: () => number;
  log: Logger;
}

export interface SidecarRuns {
  /** At each snapshot: journals the references of jobs it holds first, and logs the regressions that began or ended. */
  onSnapshot(snapshot: EngineSnapshot): void;
  /** A run that ended: its summary with the job's earlier runs, kept among them, and the job's references journaled anew. */
  finish(ended: EndedRun): Promise<Summary>;
  route(app: FastifyInstance): void;
  /** Where the past runs are kept (null without --out): what it holds in memory is bounded (runs-store.ts). */
  readonly store: PastRunsStore | null;
}

/** As hooks may name a job (hook-schema.ts). */
const MAX_JOB_NAME = 128;

/** Earlier runs listed in a summary. */
const RUNS_IN_SUMMARY = 10;

export function sidecarRuns(options: SidecarRunsOptions): SidecarRuns {
  const { log, baseline } = options;
  const thresholdPct = options.thresholdPct ?? DEFAULT_REGRESSION_THRESHOLD_PCT;
  const store = options.dir
    ? new PastRunsStore(options.dir, options.keep ?? DEFAULT_HISTORY_KEEP, (skipped) => log.warn(skipped, 'run history file skipped'))
    : null;
  /** Jobs whose references are journaled or being read (those the engine holds none for yet). */
  const asked = new Set<string>();

  /** Reads the job's past runs and journals what its runs are compared with (nothing where there is nothing). */
  const journalReferences = async (job: string) => {
    const entries = store ? await store.load(job, true) : [];
    const references = referencesFor(job, entries, baseline);
    if (!references.pinned && references.past.length === 0) return;
    await options.record({ t: 'reference', at: options.now(), v: REFERENCE_ENTRY_VERSION, ...references });
  };
  const failed = (job: string) => (error: Error) => log.error({ err: error.message, job }, 'runs of the job not compared with its history');

  return {
    store,

    onSnapshot(snapshot) {
      if (baseline || store) {
        for (const { job } of snapshot.jobs) {
          if (asked.has(job) || snapshot.references.some((r) => r.job === job)) continue;
          asked.add(job);
          void journalReferences(job).catch(failed(job));
        }
      }
      for (const job of asked) if (!snapshot.jobs.some((j) => j.job === job)) asked.delete(job);
      for (const change of snapshot.regressionChanges) {
        if (change.regressed) log.warn({ job: change.job, run: change.run, change_pct: change.changePct, threshold_pct: change.thresholdPct }, `regression: ${change.text}`);
        else log.info({ job: change.job, run: change.run, change_pct: change.changePct }, 'regression over: back within the threshold of its reference');
      }
    },

    async finish({ job, run, summary }) {
      const earlier = store ? await store.load(job, true) : [];
      const completed: Summary = earlier.length ? { ...summary, history: earlier.slice(-RUNS_IN_SUMMARY).reverse().map((e) => e.record) } : summary;
      const { baseline: comparison, regression } = summary;
      if (regression) log.warn({ job, run, change_pct: regression.change_pct, threshold_pct: regression.threshold_pct }, `regression: ${regression.text}`);
      if (store && summary.steps > 0) {
        const kept = await store.add(completed, runRecord(completed, run, comparison ?? null, regression ?? null)).then(
          () => true,
          (error: Error) => (log.error({ err: error.message, job, run }, 'run history not written'), false),
        );
        // The job's next run is compared with this one too.
        if (kept && !baseline) await journalReferences(job).catch(failed(job));
      }
      return completed;
    },

    route(app) {
      app.get<{ Querystring: { job?: string } }>('/v1/runs', async (request, reply) => {
        const job = request.query.job;
        if (typeof job !== 'string' || job === '') return reply.code(400).send({ error: 'give the job: /v1/runs?job=NAME' });
        if (job.length > MAX_JOB_NAME) return reply.code(400).send({ error: `a job name has at most ${MAX_JOB_NAME} characters` });
        const snapshot = options.snapshot();
        const held = snapshot.jobs.find((j) => j.job === job);
        // Known to the sidecar or not, a name is only kept if it has a history on disk: names cannot grow memory.
        let entries: readonly PastRunEntry[] = [];
        try {
          entries = store ? await store.load(job, held !== undefined) : [];
        } catch (error) {
          if (!(error instanceof IoTimeoutError)) throw error;
          return reply.code(503).header('retry-after', '5').send({ error: `the run history cannot be read now: ${error.message}` });
        }
        // The run going on: what the engine compares it with; else what the next one will be compared with.
        const chosen = held && !held.ended ? snapshot.references.find((r) => r.job === job && r.run === held.run)?.reference : null;
        const latest = entries.at(-1)?.summary ?? baseline;
        const reference = chosen ?? (latest ? describeReference(chooseReference(entries.map((e) => e.summary), latest, baseline, true)) : null);
        const body: RunsResponse = {
          schema: RUNS_SCHEMA,
          job,
          threshold_pct: thresholdPct,
          runs: entries.map((e) => e.record).reverse(),
          reference,
          skipped: store?.skippedOf(job).length ?? 0,
        };
        return body;
      });
    },
  };
}
