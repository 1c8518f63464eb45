import { StreamClient, streamUrl } from './client.js';
import { WatchStore } from './model/watch-store.js';
import { plainEvent, plainLine, plainRefused, plainRegression } from './plain.js';
import { pollRuns } from './runs-client.js';

export interface WatchOptions {
  /** Sidecars, one per node of the job: ws://HOST:PORT (the /v1/stream path is added). */
  targets: string[];
  token?: string;
  /** One plain line per update even on a terminal. */
  plain?: boolean;
  /** Plain lines at most this often (default: one per update). */
  plainEveryMs?: number;
  out?: NodeJS.WritableStream;
  /** Stops the viewer when it resolves. */
  stop?: Promise<void>;
}

export interface Watching {
  store: WatchStore;
  /** Resolves when the viewer has stopped: the user quit, or `stop` resolved. */
  done: Promise<void>;
}

/** Several sidecars' updates arriving together make one line, not one each. */
const COALESCE_MS = 50;

/**
 * Plain lines on `out` until stopped, or until `out` fails: a reader that went away (`watch --plain
 * | head` once head has its lines: EPIPE) ends the viewer quietly, as it would end `cat`.
 */
function printPlain(store: WatchStore, out: NodeJS.WritableStream, everyMs: number): { stop: () => void; closed: Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  /** When the last line was printed, on the monotonic clock: a step of the wall clock neither holds lines back nor hurries them. */
  let printedAt = Number.NEGATIVE_INFINITY;
  let broken = false;
  let closed: () => void = () => undefined;
  const whenClosed = new Promise<void>((resolve) => (closed = resolve));
  const onError = () => {
    broken = true;
    closed();
  };
  out.on('error', onError);
  const write = (line: string) => {
    if (!broken) out.write(line + '\n');
  };
  const print = () => {
    timer = null;
    printedAt = performance.now();
    const now = Date.now();
    write(plainLine(store.view(now), now));
  };
  const unsubscribe = store.subscribe((change) => {
    if (change.kind === 'frame' && change.frame.type === 'verdict') write(plainEvent(change.frame));
    else if (change.kind === 'frame' && change.frame.type === 'regression') write(plainRegression(change.frame));
    else if (change.kind === 'refused' && change.first) write(plainRefused(store.sourceStates[change.source]!.url, change.reason, Date.now()));
    else if (change.kind === 'frame' || change.kind === 'lost') timer ??= setTimeout(print, Math.max(COALESCE_MS, printedAt + everyMs - performance.now()));
  });
  return {
    stop: () => {
      unsubscribe();
      if (timer) clearTimeout(timer);
      // Still listening: a write that fails after the stop must not crash the process either.
      out.off('error', onError);
      out.on('error', () => undefined);
    },
    closed: whenClosed,
  };
}

/**
 * A terminal is a person watching, even inside a CI job: ink renders nothing until exit when it
 * believes it runs under CI (is-in-ci), and Node's colour depth drops to two colours when CI is set.
 */
function renderLiveEvenUnderCi(): void {
  const env = process.env;
  for (const key of Object.keys(env)) if (key === 'CI' || key === 'CONTINUOUS_INTEGRATION' || key.startsWith('CI_')) delete env[key];
}

export function startWatch(options: WatchOptions): Watching {
  const urls = options.targets.map(streamUrl);
  const store = new WatchStore(urls);
  const clients = urls.map(
    (url, i) =>
      new StreamClient(
        url,
        {
          connecting: () => store.connecting(i),
          frame: (frame, at) => store.frame(i, frame, at),
          refused: (reason) => store.refused(i, reason),
          lost: (error, retryAt) => store.lost(i, error, retryAt),
        },
        { token: options.token },
      ),
  );
  const out = options.out ?? process.stdout;
  const stop = options.stop ?? new Promise<void>(() => undefined);
  const fullScreen = !options.plain && out === process.stdout && process.stdout.isTTY === true;
  clients.forEach((client) => client.start());

  const done = (async () => {
    try {
      if (fullScreen) {
        renderLiveEvenUnderCi();
        const colour = !process.env.NO_COLOR && process.stdout.hasColors?.() === true;
        const stopRuns = pollRuns(store, urls, { token: options.token });
        const { runFullScreen } = await import('./ui/render.js');
        const { askCapture } = await import('./capture-client.js');
        await runFullScreen(store, colour, stop, (job) => askCapture(urls, job, options.token)).finally(stopRuns);
      } else {
        const printing = printPlain(store, out, options.plainEveryMs ?? 0);
        await Promise.race([stop, printing.closed]);
        printing.stop();
      }
    } finally {
      clients.forEach((client) => client.stop());
    }
  })();
  return { store, done };
}
