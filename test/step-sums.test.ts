import { describe, expect, it } from 'vitest';
import { emptySums, mergeSums, STEP_SUM_FIELDS, type StepSums } from '../src/store/step-buckets.js';

/** mergeSums names each field (a loop over the names cost too much at every tick): a field added to StepSums must be added there too. */
describe('step sums', () => {
  it('a checkpoint row and a merge hold every field of the sums', () => {
    expect([...STEP_SUM_FIELDS].sort()).toEqual(Object.keys(emptySums()).sort());
  });

  it.each(Object.keys(emptySums()) as (keyof StepSums)[])('mergeSums adds %s', (key) => {
    const into = emptySums();
    into[key] = 2;
    const from = emptySums();
    from[key] = 3;
    mergeSums(into, from);
    expect(into).toEqual({ ...emptySums(), [key]: 5 });
  });
});
