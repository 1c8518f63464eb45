import type { JobStore } from './job-store.js';
import { fromRow, type JournalEntry } from './journal.js';

/** Applies one journal entry to a store: the same calls the live ingest made. */
export function applyEntry(store: JobStore, entry: JournalEntry): void {
  switch (entry.t) {
    case 'hello':
      store.hello(entry.hello, entry.at);
      break;
    case 'env':
      store.env(entry.session, entry.env);
      break;
    case 'steps':
      store.steps(entry.session, entry.rows.map(fromRow), entry.dropped, entry.at);
      break;
    case 'end':
      store.end(entry.session);
      break;
  }
}
