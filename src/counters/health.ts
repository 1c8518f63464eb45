import type { CollectorHealth, CollectorState } from './types.js';

/** What a collector reports of itself in /v1/state and /metrics. */
export class HealthTracker {
  private state: CollectorState = 'starting';
  private samples = 0;
  private lastSampleAt: number | null = null;
  private lastError: string | null = null;
  private restarts = 0;

  constructor(readonly name: string) {}

  /** A reading; only a live one (with figures) makes it ok, a first without any is a failure. */
  delivered(count: number, at: number, live = true): void {
    this.samples += count;
    this.lastSampleAt = at;
    if (live) {
      this.state = 'ok';
      this.lastError = null;
    } else if (this.state === 'starting') this.failing(`${this.name} answers, but with no figures`);
  }

  failing(message: string): void {
    if (this.state === 'stopped') return;
    this.state = 'failing';
    this.lastError = message;
  }

  /** Its child was started again. */
  restarted(): void {
    this.restarts += 1;
  }

  stop(): void {
    this.state = 'stopped';
  }

  snapshot(): CollectorHealth {
    return { name: this.name, state: this.state, samples: this.samples, lastSampleAt: this.lastSampleAt, lastError: this.lastError, restarts: this.restarts };
  }
}
