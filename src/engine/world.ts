import type { HostSample } from '../counters/host.js';
import type { CounterStore } from '../counters/counter-store.js';
import type { JobStore } from './job-store.js';
import { fromRow, type JournalEntry } from './journal.js';

export interface World {
  jobs: JobStore;
  counters: CounterStore<HostSample>;
  /** Whether GPU samples forwarded by hooks count (only when they are the chosen GPU source). */
  hookGpu: boolean;
}

/** Applies one journal entry: the same calls the live ingest made, so a replay rebuilds the same state. */
export function applyEntry(world: World, entry: JournalEntry): void {
  const { jobs, counters } = world;
  switch (entry.t) {
    case 'hello':
      jobs.hello(entry.hello, entry.at);
      break;
    case 'env':
      jobs.env(entry.session, entry.env);
      break;
    case 'steps':
      jobs.steps(entry.session, entry.rows.map(fromRow), entry.dropped, entry.at);
      break;
    case 'end':
      jobs.end(entry.session);
      break;
    case 'counters': {
      const gpu = jobs.counters(entry.session, entry.batch);
      if (world.hookGpu) counters.addGpuSamples(gpu);
      break;
    }
    case 'gpu':
      counters.addGpuSamples(entry.samples);
      break;
    case 'host':
      counters.addHostSample(entry.sample);
      break;
  }
}
