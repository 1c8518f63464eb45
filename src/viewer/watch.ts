import { StreamClient, streamUrl } from './client.js';
import { WatchStore } from './model/watch-store.js';
import { plainEvent, plainLine, plainRefused } from './plain.js';

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

function printPlain(store: WatchStore, out: NodeJS.WritableStream, everyMs: number): () => void {
  let timer: NodeJS.Timeout | null = null;
  let lastAt = 0;
  const print = () => {
    timer = null;
    lastAt = Date.now();
    out.write(plainLine(store.view(lastAt), lastAt) + '\n');
  };
  const unsubscribe = store.subscribe((change) => {
    if (change.kind === 'frame' && change.frame.type === 'verdict') out.write(plainEvent(change.frame) + '\n');
    else if (change.kind === 'refused' && change.first) out.write(plainRefused(store.sourceStates[change.source]!.url, change.reason, Date.now()) + '\n');
    else if (change.kind === 'frame' || change.kind === 'lost') timer ??= setTimeout(print, Math.max(COALESCE_MS, lastAt + everyMs - Date.now()));
  });
  return () => {
    unsubscribe();
    if (timer) clearTimeout(timer);
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
        const { runFullScreen } = await import('./ui/render.js');
        await runFullScreen(store, colour, stop);
      } else {
        const stopPrinting = printPlain(store, out, options.plainEveryMs ?? 0);
        await stop;
        stopPrinting();
      }
    } finally {
      clients.forEach((client) => client.stop());
    }
  })();
  return { store, done };
}
