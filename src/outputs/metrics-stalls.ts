import type { Registry } from 'prom-client';
import { gaugeFamily } from './metrics-family.js';
import type { Scrape } from './metrics-scrape.js';

/** Per rank: how long since its last step, and whether it is stalled (src/analysis/stall.ts). */
export function registerStallFamilies(registry: Registry, scrape: () => Scrape): void {
  gaugeFamily(registry, {
    name: 'stepscope_rank_seconds_since_step',
    help: "Seconds since the rank's last step ended. Running jobs only; absent before a rank's first step.",
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const job of scrape().jobs) for (const rank of job.ranks) if (rank.live?.secondsSinceStep != null) yield [{ training_job: job.job, rank: String(rank.rank) }, rank.live.secondsSinceStep];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_stalled',
    help: 'Whether the rank is stalled (1): alive and heard from, or silent with its connection open, but no step for --stall-steps of its median steps (at least --stall-floor). Running jobs only.',
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const job of scrape().jobs) for (const rank of job.ranks) if (rank.live?.stalled != null) yield [{ training_job: job.job, rank: String(rank.rank) }, rank.live.stalled ? 1 : 0];
    },
  });
}
