import type { CollectorHealth, CollectorState } from './types.js';

/** What a polling collector (no child process to restart) reports of itself in /v1/state and /metrics. */
export class HealthTracker {
  state: CollectorState = 'starting';
  private samples = 0;
  private lastSampleAt: number | null = null;
  private lastError: string | null = null;

  constructor(readonly name: string) {}

  get stopped(): boolean {
    return this.state === 'stopped';
  }

  delivered(count: number, at: number): void {
    this.state = 'ok';
    this.lastError = null;
    this.samples += count;
    this.lastSampleAt = at;
  }

  failing(message: string): void {
    this.state = 'failing';
    this.lastError = message;
  }

  stop(): void {
    this.state = 'stopped';
  }

  snapshot(): CollectorHealth {
    return { name: this.name, state: this.state, samples: this.samples, lastSampleAt: this.lastSampleAt, lastError: this.lastError, restarts: 0 };
  }
}
