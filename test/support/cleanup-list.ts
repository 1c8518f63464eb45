import { afterEach } from 'vitest';

/**
 * What a test must undo, in one list per test file:
 *
 *     const cleanups = cleanupList();
 *     ...
 *     cleanups.push(() => sidecar.stop('SIGKILL'));
 *
 * After each test, every cleanup registered during it runs, the last registered first, each awaited
 * and each run even if an earlier one threw. Then the failures are rethrown (the error itself when
 * one failed, an AggregateError when several did), so a cleanup that fails fails the test and is
 * never hidden. A cleanup whose failure is expected (closing what may be closed already) must say
 * so itself, at the call site, with a catch and a comment why.
 *
 * Not to be confused with ./cleanup.ts, the vitest setup file that kills processes left running.
 */
export interface CleanupList {
  /** Registers `cleanup` to run after the current test. */
  push(cleanup: () => unknown): void;
  /** Runs every cleanup now (last first), as the afterEach does; rejects with the failures, if any. */
  run(): Promise<void>;
}

export async function runCleanups(cleanups: Array<() => unknown>): Promise<void> {
  const errors: unknown[] = [];
  for (const cleanup of [...cleanups].reverse()) {
    try {
      await cleanup();
    } catch (error) {
      errors.push(error);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, `${errors.length} cleanups failed`);
}

export function cleanupList(): CleanupList {
  const pending: Array<() => unknown> = [];
  const run = () => runCleanups(pending.splice(0));
  afterEach(run);
  return { push: (cleanup) => void pending.push(cleanup), run };
}
