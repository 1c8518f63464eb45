import { Kind, OptionalKind, type TSchema } from '@sinclair/typebox';
import { CAUSES, VERDICTS } from '../../src/model/verdict.js';
import { THROTTLE_REASON_NAMES } from '../../src/model/gpu.js';
import { SidecarStateSchema } from '../../src/protocol/state.js';
import { RunsResponseSchema } from '../../src/protocol/runs.js';
import { RegressionFrameSchema, SnapshotFrameSchema, StreamHistorySchema, UpdateFrameSchema, VerdictFrameSchema } from '../../src/protocol/stream.js';

/**
 * The field tables of docs/protocol.md ("State", the stream's frames, the run history), made from the schemas'
 * descriptions, so that the document says what the validator checks. protocol-state.test.ts checks
 * the document holds them; STEPSCOPE_WRITE_DOCS=1 makes it write them.
 */

export const BEGIN = '<!-- generated from src/protocol/ by test/support/protocol-doc.ts: do not edit by hand -->';
export const END = '<!-- end of generated tables -->';

interface Row {
  path: string;
  type: string;
  meaning: string;
}

type Schema = TSchema & {
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  patternProperties?: Record<string, Schema>;
  const?: unknown;
  format?: string;
  minimum?: number;
};

const kind = (schema: Schema): string => String(schema[Kind]);
const literals = (schema: Schema): unknown[] | null => (kind(schema) === 'Union' && schema.anyOf!.every((s) => kind(s) === 'Literal') ? schema.anyOf!.map((s) => s.const) : null);
const same = (a: readonly unknown[], b: readonly unknown[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** Names listed once, in their own table, and referred to by name. */
const NAMED: Array<{ name: string; values: readonly unknown[] }> = [
  { name: 'verdict', values: VERDICTS },
  { name: 'cause', values: CAUSES },
  { name: 'throttle reason', values: THROTTLE_REASON_NAMES },
];

function typeOf(schema: Schema): string {
  const values = literals(schema);
  if (values) {
    const named = NAMED.find((n) => same(n.values, values));
    return named ? named.name : values.map((v) => JSON.stringify(v)).join(' | ');
  }
  switch (kind(schema)) {
    case 'Union': {
      const parts = schema.anyOf!;
      const nonNull = parts.filter((s) => kind(s) !== 'Null');
      const causes = nonNull.filter((s) => kind(s) === 'Literal').map((s) => s.const);
      if (nonNull.length > 1 && same(causes, CAUSES)) return 'cause | null';
      return parts.map(typeOf).join(' | ');
    }
    case 'Integer':
      return schema.minimum === undefined ? 'int' : `int ≥ ${schema.minimum}`;
    case 'Number':
      return 'number';
    case 'String':
      return schema.format === 'date-time' ? 'ISO time' : 'string';
    case 'Boolean':
      return 'bool';
    case 'Null':
      return 'null';
    case 'Literal':
      return JSON.stringify(schema.const);
    case 'Unknown':
      return 'any';
    case 'Array':
      return `[${typeOf(schema.items!)}]`;
    case 'Record':
      return `{ string: ${typeOf(Object.values(schema.patternProperties!)[0]!)} }`;
    case 'Object': {
      const uniform = uniformProperties(schema);
      if (uniform) return `{ ${uniform.keys.join(', ')}: ${uniform.type} }`;
      return 'object';
    }
    default:
      return kind(schema);
  }
}

/** An object whose properties all have one schema and no description of their own: one row, not one each. */
function uniformProperties(schema: Schema): { keys: string[]; type: string; optional: boolean } | null {
  const entries = Object.entries(schema.properties ?? {});
  if (entries.length < 2 || entries.some(([, s]) => s.description !== undefined)) return null;
  const types = new Set(entries.map(([, s]) => typeOf(s)));
  if (types.size !== 1) return null;
  return { keys: entries.map(([k]) => k), type: [...types][0]!, optional: entries.every(([, s]) => s[OptionalKind] === 'Optional') };
}

/** The object a value of this schema holds fields of, if any: itself, or the non-null part of a nullable one, or an array's items. */
function inner(schema: Schema): { schema: Schema; suffix: string } | null {
  if (kind(schema) === 'Object' && !uniformProperties(schema)) return { schema, suffix: '' };
  if (kind(schema) === 'Array') {
    const deeper = inner(schema.items!);
    return deeper ? { schema: deeper.schema, suffix: `[]${deeper.suffix}` } : null;
  }
  if (kind(schema) === 'Union') {
    const nonNull = schema.anyOf!.filter((s) => kind(s) !== 'Null');
    return nonNull.length === 1 ? inner(nonNull[0]!) : null;
  }
  return null;
}

function rows(schema: Schema, prefix: string, stop: Map<Schema, string>): Row[] {
  const out: Row[] = [];
  for (const [key, property] of Object.entries(schema.properties ?? {})) {
    const path = `${prefix}${key}`;
    const optional = property[OptionalKind] === 'Optional' ? ' (optional)' : '';
    const referred = stop.get(property);
    if (referred) {
      out.push({ path, type: 'object', meaning: referred });
      continue;
    }
    const uniform = kind(property) === 'Object' ? uniformProperties(property) : null;
    const meaning = (property.description ?? inner(property)?.schema.description ?? '') + optional;
    out.push({ path, type: typeOf(property) + (uniform?.optional ? ', each optional' : ''), meaning });
    const deeper = inner(property);
    if (deeper) out.push(...rows(deeper.schema, `${path}${deeper.suffix}.`, stop));
  }
  return out;
}

const cell = (text: string) => text.replaceAll('|', '\\|');

function table(list: Row[]): string {
  return ['| field | type | meaning |', '|---|---|---|', ...list.map((r) => `| \`${cell(r.path)}\` | ${cell(r.type)} | ${cell(r.meaning)} |`)].join('\n');
}

/** The generated part of docs/protocol.md, markers included. */
export function protocolTables(): string {
  const stateRef = new Map<Schema, string>([[SidecarStateSchema as Schema, 'the state: the body of GET /v1/state, see [State](#state-get-v1state)']]);
  const historyRef = new Map<Schema, string>([...stateRef, [StreamHistorySchema as Schema, 'see [history](#history)']]);
  const names = NAMED.map((n) => `| ${n.name} | ${n.values.map((v) => `\`${String(v)}\``).join(', ')} |`);
  return [
    BEGIN,
    '',
    '#### Names',
    '',
    '| name | values |',
    '|---|---|',
    ...names,
    '',
    'A `cause | null` is a cause, or null where the verdict has none.',
    '',
    '#### State (`GET /v1/state`)',
    '',
    table(rows(SidecarStateSchema as Schema, '', new Map())),
    '',
    '#### `snapshot`',
    '',
    table(rows(SnapshotFrameSchema as Schema, '', historyRef)),
    '',
    '#### `update`',
    '',
    table(rows(UpdateFrameSchema as Schema, '', historyRef)),
    '',
    '#### `history`',
    '',
    table(rows(StreamHistorySchema as Schema, 'history.', stateRef)),
    '',
    '#### `verdict`',
    '',
    table(rows(VerdictFrameSchema as Schema, '', new Map())),
    '',
    '#### `regression` (with `?events=regression`)',
    '',
    table(rows(RegressionFrameSchema as Schema, '', new Map())),
    '',
    '#### Runs (`GET /v1/runs?job=NAME`)',
    '',
    table(rows(RunsResponseSchema as Schema, '', new Map())),
    '',
    END,
  ].join('\n');
}
