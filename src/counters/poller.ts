import { performance } from 'node:perf_hooks';

/**
 * Runs `work` every `intervalMs`, never two at once: the next run is timed from the start of the
 * previous one, so a slow read shortens the wait instead of piling runs up.
 */
export class Poller {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly intervalMs: number,
    private readonly work: () => Promise<void>,
  ) {}

  /** Schedules the first run `delayMs` from now (default: one interval). */
  start(delayMs = this.intervalMs): void {
    this.stopped = false;
    this.schedule(delayMs);
  }

  /** Cancels the next run and waits for one in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.run();
    }, delayMs);
  }

  private async run(): Promise<void> {
    const startedAt = performance.now();
    await this.work();
    this.schedule(Math.max(0, this.intervalMs - (performance.now() - startedAt)));
  }
}
