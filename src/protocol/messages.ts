import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { parseCounterBatch, type CounterBatch } from './counters.js';

export const PROTOCOL_VERSION = 1;

export const CloseCode = {
  goingAway: 1001,
  protocolError: 1002,
  unsupportedData: 1003,
  invalidPayload: 1007,
  policyViolation: 1008,
  tooBig: 1009,
  internalError: 1011,
  tryAgainLater: 1013,
} as const;

export class ProtocolError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export type Env = Record<string, unknown>;

export interface Hello {
  type: 'hello';
  job: string;
  rank: number;
  local_rank: number;
  world_size: number;
  session: string;
  pid: number;
  host: string;
  /** wall_ns arrives as a bigint when beyond 2^53 (it is, for today's dates); kept as ms here. */
  clock: { wall_ms: number; mono_ns: number };
  env: Env;
}

export interface EnvUpdate {
  type: 'env';
  env: Env;
}

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
}

export interface Steps {
  type: 'steps';
  records: StepRecord[];
  dropped: number;
}

export interface End {
  type: 'end';
  reason: string;
}

export type Counters = { type: 'counters' } & CounterBatch;

export type HookMessage = Hello | EnvUpdate | Steps | End | Counters;

export const MAX_ROWS_PER_FRAME = 4096;
const DAY_NS = 86_400 * 1e9;
// Phases are timed with separate clock reads, so their sum may exceed the step by a hair.
const PHASE_SLACK_NS = 1e6;

const uint = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;
const envSchema = { type: 'object', maxProperties: 64 } as const;

const schemas = {
  hello: {
    type: 'object',
    required: ['job', 'rank', 'local_rank', 'world_size', 'session', 'pid', 'host', 'clock', 'env'],
    properties: {
      job: { type: 'string', minLength: 1, maxLength: 128 },
      rank: uint,
      local_rank: { ...uint, maximum: 65535 },
      world_size: { type: 'integer', minimum: 1, maximum: 65536 },
      session: { type: 'string', minLength: 1, maxLength: 64 },
      pid: uint,
      host: { type: 'string', maxLength: 255 },
      clock: {
        type: 'object',
        required: ['wall_ns', 'mono_ns'],
        properties: { wall_ns: {}, mono_ns: uint },
      },
      env: envSchema,
    },
  },
  env: {
    type: 'object',
    required: ['env'],
    properties: { env: envSchema },
  },
  steps: {
    type: 'object',
    required: ['fields', 'rows', 'dropped'],
    properties: {
      fields: {
        type: 'array',
        minItems: 8,
        maxItems: 64,
        items: { type: 'string', maxLength: 64 },
      },
      rows: {
        type: 'array',
        minItems: 1,
        maxItems: MAX_ROWS_PER_FRAME,
        items: { type: 'array', maxItems: 64 },
      },
      dropped: uint,
    },
  },
  end: {
    type: 'object',
    required: ['reason'],
    properties: { reason: { type: 'string', maxLength: 64 } },
  },
  counters: {
    type: 'object',
    required: ['source', 'samples'],
    properties: {
      source: { type: 'string', maxLength: 64 },
      samples: { type: 'array', maxItems: 64 },
    },
  },
} as const;

type MessageType = keyof typeof schemas;

const ajv = new Ajv({ allErrors: false, strict: true });
const validators = Object.fromEntries(
  Object.entries(schemas).map(([type, schema]) => [type, ajv.compile(schema)]),
) as Record<MessageType, ValidateFunction>;

function describe(type: string, error: ErrorObject | undefined): string {
  if (!error) return `${type}: invalid`;
  const where = error.instancePath.replace(/^\//, '').replaceAll('/', '.');
  return `${type}${where ? '.' + where : ''}: ${error.message ?? 'invalid'}`;
}

function isMessageType(type: unknown): type is MessageType {
  return typeof type === 'string' && Object.hasOwn(schemas, type);
}

/** Validates one decoded frame from a hook; throws ProtocolError with the close code to use. */
export function parseHookMessage(value: unknown): HookMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ProtocolError(CloseCode.invalidPayload, 'frame: must be a msgpack map');
  }
  const frame = value as Record<string, unknown>;
  if (frame.v !== PROTOCOL_VERSION) {
    throw new ProtocolError(CloseCode.policyViolation, `v: unsupported protocol version ${String(frame.v)}`);
  }
  if (!isMessageType(frame.type)) {
    throw new ProtocolError(CloseCode.policyViolation, `type: unknown message type ${String(frame.type).slice(0, 32)}`);
  }
  const type = frame.type;
  const validate = validators[type];
  if (!validate(frame)) {
    throw new ProtocolError(CloseCode.invalidPayload, describe(type, validate.errors?.[0]));
  }
  switch (type) {
    case 'hello':
      return parseHello(frame);
    case 'env':
      return { type: 'env', env: frame.env as Env };
    case 'steps':
      return parseSteps(frame);
    case 'end':
      return { type: 'end', reason: frame.reason as string };
    case 'counters': {
      const batch = parseCounterBatch(frame.source, frame.samples);
      if (typeof batch === 'string') throw new ProtocolError(CloseCode.invalidPayload, batch);
      return { type: 'counters', ...batch };
    }
  }
}

function wallMs(value: unknown): number {
  if (typeof value === 'bigint' && value >= 0n) return Number(value / 1000n) / 1000;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value / 1e6;
  throw new ProtocolError(CloseCode.invalidPayload, 'hello.clock.wall_ns: must be a non-negative integer');
}

function parseHello(frame: Record<string, unknown>): Hello {
  const hello = frame as unknown as Omit<Hello, 'clock'> & { clock: { wall_ns: unknown; mono_ns: number } };
  if (hello.rank >= hello.world_size) {
    throw new ProtocolError(CloseCode.invalidPayload, `hello.rank: ${hello.rank} is not below world_size ${hello.world_size}`);
  }
  return {
    type: 'hello',
    job: hello.job,
    rank: hello.rank,
    local_rank: hello.local_rank,
    world_size: hello.world_size,
    session: hello.session,
    pid: hello.pid,
    host: hello.host,
    clock: { wall_ms: wallMs(hello.clock.wall_ns), mono_ns: hello.clock.mono_ns },
    env: hello.env,
  };
}

const REQUIRED_COLUMNS = ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples'] as const;
const OPTIONAL_COLUMNS = ['gpu_h2d_ns', 'gpu_compute_ns', 'gpu_idle_ns'] as const;
const NULLABLE = new Set<string>(['samples', ...OPTIONAL_COLUMNS]);

export const STEP_FIELDS = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS] as const;

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

function readColumn(row: unknown[], r: number, name: string, at: number | undefined): number | null {
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

function parseSteps(frame: Record<string, unknown>): Steps {
  const fields = frame.fields as string[];
  const rows = frame.rows as unknown[][];
  const index = columnIndex(fields);
  const at = (name: string) => index.get(name);
  const records: StepRecord[] = new Array(rows.length);
  let previousSeq = 0;
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!;
    if (row.length !== fields.length) {
      throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}]: has ${row.length} values for ${fields.length} fields`);
    }
    const col = (name: string) => readColumn(row, r, name, at(name));
    const record: StepRecord = {
      seq: col('seq')!,
      step: col('step')!,
      endNs: col('end_ns')!,
      durNs: col('dur_ns')!,
      dataNs: col('data_ns')!,
      h2dNs: col('h2d_ns')!,
      computeNs: col('compute_ns')!,
      samples: col('samples'),
      gpuH2dNs: col('gpu_h2d_ns'),
      gpuComputeNs: col('gpu_compute_ns'),
      gpuIdleNs: col('gpu_idle_ns'),
    };
    checkRecord(record, r, previousSeq);
    previousSeq = record.seq;
    records[r] = record;
  }
  return { type: 'steps', records, dropped: frame.dropped as number };
}

function checkRecord(record: StepRecord, r: number, previousSeq: number): void {
  const fail = (what: string) => {
    throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${what}`);
  };
  if (record.seq < 1) fail('seq: must be >= 1');
  if (record.seq <= previousSeq) fail(`seq: ${record.seq} does not follow ${previousSeq}`);
  if (record.durNs <= 0) fail('dur_ns: must be > 0');
  if (record.durNs > DAY_NS) fail(`dur_ns: ${record.durNs} is longer than a day`);
  if (record.dataNs + record.h2dNs + record.computeNs > record.durNs + PHASE_SLACK_NS) {
    fail('phases: data_ns + h2d_ns + compute_ns exceed dur_ns');
  }
  for (const [name, value] of [
    ['gpu_h2d_ns', record.gpuH2dNs],
    ['gpu_compute_ns', record.gpuComputeNs],
    ['gpu_idle_ns', record.gpuIdleNs],
  ] as const) {
    if (value !== null && value > DAY_NS) fail(`${name}: ${value} is longer than a day`);
  }
}

export interface Welcome {
  type: 'welcome';
  session: string;
  ack: number;
  /** Which counters the sidecar wants the hook to forward, and how often (ms). */
  counters: { nvml: boolean; interval_ms: number; process: boolean };
}

export interface Ack {
  type: 'ack';
  ack: number;
  end?: true;
}

export type SidecarMessage = Welcome | Ack;

export function sidecarFrame(message: SidecarMessage): Record<string, unknown> {
  return { v: PROTOCOL_VERSION, ...message };
}
