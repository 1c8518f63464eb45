import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/support/sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Waits on wall-clock conditions get at least 45 s each (test/support/sidecar.ts MIN_WAIT_MS): a test
    // that waits on a few must not be cut short on a loaded machine.
    testTimeout: 180_000,
    hookTimeout: 60_000,
    // Tests start real sidecars and Python processes; two cores do not take many at once.
    maxWorkers: 2,
    // Test files share a worker's module cache instead of each loading src/ afresh: on two cores
    // that was ~50 s of the suite. Tests keep their state to themselves (cleanup lists, in-process
    // sidecars they close), which is what makes this safe.
    isolate: false,
    sequence: { sequencer: SlowFirstSequencer },
    // Kills whatever the test support started and is still running after each test file.
    setupFiles: ['./test/support/cleanup.ts'],
  },
});
