import type { Registry } from 'prom-client';
import { STEP_BUCKETS_S } from '../store/duration-counts.js';
import type { Scrape } from './metrics-scrape.js';

const NAME = 'stepscope_step_duration_seconds';
const HELP = 'Wall-clock duration of training steps, per job and rank.';

/**
 * The step-duration histogram, per job and rank, from the bucket counts the engine keeps: a
 * prom-client Histogram could not be rebuilt after a restart, these come back with the journal.
 */
export function registerStepDurations(registry: Registry, scrape: () => Scrape): void {
  registry.registerMetric({
    name: NAME,
    help: HELP,
    type: 'histogram',
    aggregator: 'sum',
    get: async () => {
      const values: Array<{ metricName: string; labels: Record<string, string | number>; value: number }> = [];
      for (const job of scrape().jobs) {
        for (const rank of job.ranks) {
          const labels = { training_job: job.job, rank: String(rank.rank) };
          let cumulative = 0;
          STEP_BUCKETS_S.forEach((le, i) => {
            cumulative += rank.durations.buckets[i]!;
            values.push({ metricName: `${NAME}_bucket`, labels: { le, ...labels }, value: cumulative });
          });
          values.push({ metricName: `${NAME}_bucket`, labels: { le: '+Inf', ...labels }, value: rank.durations.count });
          values.push({ metricName: `${NAME}_sum`, labels, value: rank.durations.sumS });
          values.push({ metricName: `${NAME}_count`, labels, value: rank.durations.count });
        }
      }
      return { name: NAME, help: HELP, type: 'histogram', aggregator: 'sum', values };
    },
  } as unknown as Parameters<Registry['registerMetric']>[0]);
}
