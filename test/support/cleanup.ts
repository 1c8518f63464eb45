import { afterAll } from 'vitest';
import { killAll } from './children.js';

/**
 * Vitest setup file (vitest.config.ts `setupFiles`): after each test file's own afterAll hooks,
 * whatever the test support started and is still running is killed, pass or fail, so that no test
 * leaves a sidecar or a Python loop behind. Tests still stop their own; this is the safety net.
 */
afterAll(async () => {
  const killed = await killAll();
  if (killed.length) console.warn(`test support: killed ${killed.length} process(es) left running: ${killed.map((k) => `${k.pid} (${k.what})`).join(', ')}`);
});
