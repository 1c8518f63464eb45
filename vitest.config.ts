import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
    // Tests start real sidecars and Python processes; two cores do not take many at once.
    maxWorkers: 2,
  },
});
