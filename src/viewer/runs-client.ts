import { parseInput } from '../protocol/parse.js';
import { RunsResponseSchema, type RunsResponse } from '../protocol/runs.js';
import { inertStrings } from '../protocol/terminal-text.js';
import type { WatchStore } from './model/watch-store.js';

/** `ws://host:port/v1/stream` → `http://host:port/v1/runs?job=…` */
export function runsUrl(streamUrl: string, job: string): string {
  const url = new URL(streamUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = '/v1/runs';
  url.search = new URLSearchParams({ job }).toString();
  return url.toString();
}

/** A sidecar's run history of a job, checked against its schema. */
export async function fetchRuns(streamUrl: string, job: string, token: string | undefined, timeoutMs = 5_000): Promise<RunsResponse> {
  const response = await fetch(runsUrl(streamUrl, job), {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return inertStrings(parseInput(RunsResponseSchema, await response.json(), 'runs'));
}

export interface RunsPollOptions {
  token?: string;
  /** Asked again this often while a job is looked at (and whenever it ends). */
  everyMs?: number;
  now?: () => number;
}

/**
 * Keeps the store's run history of the job looked at: asked of the sidecars in turn (the first
 * that answers wins) when the job is first looked at, when it ends, and every `everyMs`. A sidecar
 * too old to have a run history (404) or unreachable only means none is shown.
 */
export function pollRuns(store: WatchStore, urls: readonly string[], options: RunsPollOptions = {}): () => void {
  const now = options.now ?? Date.now;
  const everyMs = options.everyMs ?? 30_000;
  let asked: { job: string; ended: boolean; at: number } | null = null;
  let busy = false;
  let stopped = false;
  const ask = async (job: string) => {
    busy = true;
    try {
      for (const url of urls) {
        const runs = await fetchRuns(url, job, options.token).catch(() => null);
        if (runs && !stopped) {
          store.setRuns(runs);
          return;
        }
      }
    } finally {
      busy = false;
    }
  };
  const check = () => {
    if (busy || stopped) return;
    const view = store.view(now());
    const job = view.job;
    if (!job) return;
    const due = !asked || asked.job !== job.id || asked.ended !== job.ended || now() - asked.at >= everyMs;
    if (!due) return;
    asked = { job: job.id, ended: job.ended, at: now() };
    void ask(job.id);
  };
  const unsubscribe = store.subscribe((change) => {
    if (change.kind !== 'runs') check();
  });
  const timer = setInterval(check, Math.min(everyMs, 5_000));
  return () => {
    stopped = true;
    unsubscribe();
    clearInterval(timer);
  };
}
