import { describe, expect, it } from 'vitest';
import { fromRow, toRow } from '../src/engine/entries.js';
import { parseHookMessage, type StepRecord } from '../src/protocol/messages.js';
import { addStep, emptySums } from '../src/store/step-buckets.js';
import { STEP_FIELDS } from './support/hook-client.js';

/** The `eval_ns` column (issue 26): evaluation inside the loop, a part of "other", null where not measured. */

const frame = (fields: string[], rows: unknown[][]) => ({ v: 1, type: 'steps', fields, rows, dropped: 0 });
const ms = 1_000_000;
const base = [1, 0, 100 * ms, 100 * ms, 10 * ms, 0, 40 * ms, 8, null, null, null];

describe('eval_ns', () => {
  it('is read where sent and null where not: a hook that does not measure evaluation made no zero', () => {
    const withEval = parseHookMessage(frame([...STEP_FIELDS, 'comm_ns', 'comm_wait_ns', 'comm_bytes', 'eval_ns'], [[...base, null, null, null, 30 * ms]]));
    const without = parseHookMessage(frame([...STEP_FIELDS], [base]));
    expect(withEval.type === 'steps' && withEval.records[0]!.evalNs).toBe(30 * ms);
    expect(without.type === 'steps' && without.records[0]!.evalNs).toBeNull();
  });

  it('is refused where it does not fit in the step beside the other phases, with the reason', () => {
    expect(() => parseHookMessage(frame([...STEP_FIELDS, 'eval_ns'], [[...base, 60 * ms]]))).toThrow(/eval_ns: data_ns \+ h2d_ns \+ compute_ns \+ eval_ns exceed dur_ns/);
    expect(() => parseHookMessage(frame([...STEP_FIELDS, 'eval_ns'], [[...base, -1]]))).toThrow(/eval_ns: must be a non-negative integer/);
  });

  it('survives the journal, and rows without it stay as short as before', () => {
    const parsed = parseHookMessage(frame([...STEP_FIELDS, 'eval_ns'], [[...base, 30 * ms]]));
    const record = (parsed.type === 'steps' ? parsed.records[0] : null) as StepRecord;
    expect(fromRow(toRow(record))).toEqual(record);
    expect(toRow({ ...record, evalNs: null })).toHaveLength(STEP_FIELDS.length);
  });

  it('is summed with the steps that measured it', () => {
    const sums = emptySums();
    const record = fromRow([...base, null, null, null, 30 * ms]);
    addStep(sums, record);
    addStep(sums, { ...record, seq: 2, evalNs: null });
    expect([sums.evalSteps, sums.evalNs, sums.otherNs]).toEqual([1, 30 * ms, 100 * ms]);
  });
});
