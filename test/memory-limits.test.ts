import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { checkMemoryFits, DEFAULT_LIMITS, RANK_BYTES } from '../src/ingest/limits.js';
import { CLI } from './support/sidecar.js';

describe('limits that fit in memory', () => {
  it('the defaults fit in half of a 1 GiB heap, the smallest a pod is likely to give Node', () => {
    expect(DEFAULT_LIMITS.maxJobs * DEFAULT_LIMITS.maxRanksPerJob * RANK_BYTES).toBeLessThanOrEqual(512 * 1024 * 1024);
    expect(() => checkMemoryFits({}, 1024 * 1024 * 1024)).not.toThrow();
  });

  it('refuses limits that cannot fit, with the arithmetic and what to do', () => {
    expect(() => checkMemoryFits({ maxJobs: 64, maxRanksPerJob: 1024 }, 4096 * 1024 * 1024)).toThrow(
      '--max-jobs 64 × --max-ranks 1024 × 1 MiB per rank = 65536 MiB, more than half of the 4096 MiB heap: lower the limits, or raise the heap (NODE_OPTIONS=--max-old-space-size=MiB)',
    );
  });

  it('the sidecar refuses to start with them, in one line', () => {
    const run = spawnSync(process.execPath, [CLI, 'serve', '--port', '0', '--gpu-source', 'none', '--max-jobs', '10000', '--max-ranks', '65536'], { encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(1);
    expect(run.stderr.trim()).toMatch(/^stepscope: --max-jobs 10000 × --max-ranks 65536 × 1 MiB per rank = \d+ MiB, more than half of the \d+ MiB heap/);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
  });
});
