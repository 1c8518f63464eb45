import { describe, expect, it } from 'vitest';
import { applyData, emptyWorld } from '../src/engine/world.js';
import { hello } from './support/entries.js';

describe("the jobs' pids the windows leave out of 'other processes'", () => {
  it('go with a job the store forgets to make room for a new one, so a long-lived sidecar does not keep them for ever', () => {
    const world = emptyWorld({ maxJobs: 1, maxRanksPerJob: 64 });
    applyData(world, hello('a-0', { job: 'a', pid: 4242 }));
    expect([...world.pids]).toEqual([['a', new Set([4242])]]);
    // Job a has no connection and no step: the store makes room for b by forgetting it.
    applyData(world, hello('b-0', { job: 'b', pid: 4343 }, 1_000));
    expect(world.jobs.hasJob('a')).toBe(false);
    expect([...world.pids]).toEqual([['b', new Set([4343])]]);
  });
});
