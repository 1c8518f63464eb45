import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
    // Tests start real sidecars and Python processes; two cores do not take many at once.
    maxWorkers: 2,
    // Kills whatever the test support started and is still running after each test file.
    setupFiles: ['./test/support/cleanup.ts'],
  },
});
