import type { Static } from '@sinclair/typebox';
import type { StepsFrame } from './hook-schema.js';
import { CloseCode, ProtocolError } from './wire.js';

// A `steps` frame's records: their columns, how a frame's rows become records, and the checks every
// record passes, live or replayed from a journal (docs/protocol.md).

export interface StepRecord {
  seq: number;
  step: number;
  endNs: number;
  durNs: number;
  dataNs: number;
  h2dNs: number;
  computeNs: number;
  samples: number | null;
  gpuH2dNs: number | null;
  gpuComputeNs: number | null;
  gpuIdleNs: number | null;
  /** Wall time inside collectives during the step (overlaps merged), what the training thread waited of it, and the bytes moved. */
  commNs: number | null;
  commWaitNs: number | null;
  commBytes: number | null;
  /** Time in evaluation during the step (a part of what is not data, h2d or compute); null where the hook did not measure it. */
  evalNs: number | null;
}

export interface Steps {
  type: 'steps';
  records: StepRecord[];
  dropped: number;
  /**
   * The frame's bytes, where the usual-frame reader (steps-bytes.ts) read it: the journal keeps them
   * as they came. A view into the socket's read: not to be held past the frame's handling.
   */
  bytes?: Uint8Array;
}

const DAY_NS = 86_400 * 1e9;
// Phases are timed with separate clock reads, so their sum may exceed the step by a hair.
const PHASE_SLACK_NS = 1e6;

export const REQUIRED_COLUMNS = ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples'] as const;
export const GPU_COLUMNS = ['gpu_h2d_ns', 'gpu_compute_ns', 'gpu_idle_ns'] as const;
/** Sent only by hooks that measure collectives (stepscope.watch_ddp or the collective wrappers). */
export const COMM_FIELDS = ['comm_ns', 'comm_wait_ns', 'comm_bytes'] as const;
/** Sent by hooks that tell evaluation apart (the zero-code path, scope.phase("eval")). */
export const EVAL_FIELD = 'eval_ns';
const OPTIONAL_COLUMNS = [...GPU_COLUMNS, ...COMM_FIELDS, EVAL_FIELD] as const;
export const NULLABLE: ReadonlySet<string> = new Set<string>(['samples', ...OPTIONAL_COLUMNS]);
/** A step record's columns in StepRecord's order (parseSteps reads them by position). */
export const RECORD_COLUMNS = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS] as const;

function columnIndex(fields: string[]): Map<string, number> {
  const index = new Map<string, number>();
  fields.forEach((name, i) => {
    if (index.has(name)) throw new ProtocolError(CloseCode.invalidPayload, `steps.fields: duplicate column ${name}`);
    index.set(name, i);
  });
  for (const name of REQUIRED_COLUMNS) {
    if (!index.has(name)) throw new ProtocolError(CloseCode.invalidPayload, `steps.fields: missing column ${name}`);
  }
  return index;
}

function readColumn(row: readonly unknown[], r: number, name: string, at: number | undefined): number | null {
  const value = at === undefined ? null : row[at];
  if (value === null || value === undefined) {
    if (NULLABLE.has(name)) return null;
    throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${name}: missing`);
  }
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${name}: must be a non-negative integer, got ${describeValue(value)}`);
  }
  return value;
}

function describeValue(value: unknown): string {
  if (typeof value === 'bigint') return 'an integer beyond 2^53';
  if (typeof value === 'number') return String(value);
  return typeof value;
}

export function parseSteps(frame: Static<typeof StepsFrame>): Steps {
  const { fields, rows } = frame;
  const index = columnIndex(fields);
  // Each column's position, looked up once a frame rather than once a value (the ingest's hottest loop).
  const [seq, step, endNs, durNs, dataNs, h2dNs, computeNs, samples, gpuH2dNs, gpuComputeNs, gpuIdleNs, commNs, commWaitNs, commBytes, evalNs] = RECORD_COLUMNS.map((name) => index.get(name));
  const records: StepRecord[] = new Array(rows.length);
  let previousSeq = 0;
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!;
    if (row.length !== fields.length) {
      throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}]: has ${row.length} values for ${fields.length} fields`);
    }
    const record: StepRecord = {
      seq: readColumn(row, r, 'seq', seq)!,
      step: readColumn(row, r, 'step', step)!,
      endNs: readColumn(row, r, 'end_ns', endNs)!,
      durNs: readColumn(row, r, 'dur_ns', durNs)!,
      dataNs: readColumn(row, r, 'data_ns', dataNs)!,
      h2dNs: readColumn(row, r, 'h2d_ns', h2dNs)!,
      computeNs: readColumn(row, r, 'compute_ns', computeNs)!,
      samples: readColumn(row, r, 'samples', samples),
      gpuH2dNs: readColumn(row, r, 'gpu_h2d_ns', gpuH2dNs),
      gpuComputeNs: readColumn(row, r, 'gpu_compute_ns', gpuComputeNs),
      gpuIdleNs: readColumn(row, r, 'gpu_idle_ns', gpuIdleNs),
      commNs: readColumn(row, r, 'comm_ns', commNs),
      commWaitNs: readColumn(row, r, 'comm_wait_ns', commWaitNs),
      commBytes: readColumn(row, r, 'comm_bytes', commBytes),
      evalNs: readColumn(row, r, EVAL_FIELD, evalNs),
    };
    // readColumn has checked every value is a non-negative integer or null.
    const problem = relationProblem(record, previousSeq);
    if (problem !== null) throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${problem}`);
    previousSeq = record.seq;
    records[r] = record;
  }
  return { type: 'steps', records, dropped: frame.dropped };
}

/** Why a step record cannot be one (durations, phases, order), or null: the same checks for a frame and a journal row. */
export function recordProblem(record: StepRecord, previousSeq: number): string | null {
  // The engine checks every applied row again, live ones included: no Object.entries pairs per record.
  for (const name of RECORD_KEYS) {
    const value = record[name];
    if (value !== null && !(Number.isSafeInteger(value) && value >= 0)) return `${name}: must be a non-negative integer`;
  }
  return relationProblem(record, previousSeq);
}

/** Every StepRecord key (the object's type makes the list complete). */
const RECORD_KEYS = Object.keys({
  seq: true,
  step: true,
  endNs: true,
  durNs: true,
  dataNs: true,
  h2dNs: true,
  computeNs: true,
  samples: true,
  gpuH2dNs: true,
  gpuComputeNs: true,
  gpuIdleNs: true,
  commNs: true,
  commWaitNs: true,
  commBytes: true,
  evalNs: true,
} satisfies Record<keyof StepRecord, true>) as (keyof StepRecord)[];

/**
 * What is wrong between a record's values (its order, its phases against its duration), or null;
 * each value already a non-negative integer or null. No allocation on the way to null: it runs for
 * every step record received.
 */
export function relationProblem(record: StepRecord, previousSeq: number): string | null {
  if (record.seq < 1) return 'seq: must be >= 1';
  if (record.seq <= previousSeq) return `seq: ${record.seq} does not follow ${previousSeq}`;
  if (record.durNs <= 0) return 'dur_ns: must be > 0';
  if (record.durNs > DAY_NS) return `dur_ns: ${record.durNs} is longer than a day`;
  const phases = record.dataNs + record.h2dNs + record.computeNs;
  if (phases > record.durNs + PHASE_SLACK_NS) return 'phases: data_ns + h2d_ns + compute_ns exceed dur_ns';
  if (record.evalNs !== null && phases + record.evalNs > record.durNs + PHASE_SLACK_NS) return 'eval_ns: data_ns + h2d_ns + compute_ns + eval_ns exceed dur_ns';
  if (record.gpuH2dNs !== null && record.gpuH2dNs > DAY_NS) return `gpu_h2d_ns: ${record.gpuH2dNs} is longer than a day`;
  if (record.gpuComputeNs !== null && record.gpuComputeNs > DAY_NS) return `gpu_compute_ns: ${record.gpuComputeNs} is longer than a day`;
  if (record.gpuIdleNs !== null && record.gpuIdleNs > DAY_NS) return `gpu_idle_ns: ${record.gpuIdleNs} is longer than a day`;
  if (record.commNs !== null && record.commNs > DAY_NS) return `comm_ns: ${record.commNs} is longer than a day`;
  // The wait is part of the time in collectives, and the training thread cannot wait longer than its step.
  if (record.commWaitNs !== null && record.commWaitNs > Math.min(record.commNs ?? Infinity, record.durNs) + PHASE_SLACK_NS) {
    return 'comm_wait_ns: exceeds comm_ns or dur_ns';
  }
  return null;
}
