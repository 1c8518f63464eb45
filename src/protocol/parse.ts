import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Static, TSchema } from '@sinclair/typebox';
import type { Ajv, ErrorObject, Options, ValidateFunction } from 'ajv';

/**
 * Input checked against a protocol schema: the typed value, or an InputError that names where and
 * why, such as `state.jobs.0.ranks.1.window.steps: must be integer (got 1.5)`. Each schema is
 * compiled once (by Ajv: TypeBox schemas are JSON Schema) and kept for as long as the schema lives.
 *
 * Compiling a large schema takes Ajv hundreds of milliseconds (the summary's: 0.5 s), which every
 * command that reads a summary would pay at start. So `npm run build` compiles the largest ones
 * ahead (scripts/build-validators.mjs: Ajv's standalone code in dist/validators, found here by the
 * schema's fingerprint); any other schema, or one changed since the build, is compiled here on first
 * use by the one Ajv, itself made only then.
 */

/** The longest message an InputError carries; what an untrusted peer sent never makes it longer. */
export const MAX_INPUT_ERROR_LENGTH = 300;
const MAX_SEGMENT = 40;
const MAX_VALUE = 40;
const MAX_ALTERNATIVES = 8;
/**
 * Fields whose values are secrets (a hello's `resume`): a refusal never shows what was sent in
 * them, so a near miss cannot land in a log or a close reason. The one place this is decided.
 */
const SECRET_FIELDS: ReadonlySet<string> = new Set(['resume']);

export class InputError extends Error {
  constructor(
    /** Where, as dotted path from `what`: `update.state.jobs.0.steps`. */
    readonly path: string,
    /** Why, in words: `must be integer (got 1.5)`. */
    readonly reason: string,
  ) {
    super(clip(`${path}: ${reason}`, MAX_INPUT_ERROR_LENGTH));
    this.name = 'InputError';
  }
}

/**
 * RFC 3339 date-times. Self-contained (no outer variable), because the build writes its source into
 * the precompiled validators' formats file.
 */
export function isDateTime(text: string): boolean {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i.test(text) && !Number.isNaN(Date.parse(text));
}

/** The one Ajv's options; the build precompiles with the same. Union types for the hooks' counter samples (`['number', 'null']`). */
export const AJV_OPTIONS = { allErrors: false, strict: true, verbose: true, allowUnionTypes: true } as const satisfies Options;

/** Where `npm run build` leaves the precompiled validators: dist/validators, beside dist/protocol. */
const PRECOMPILED = new URL('../validators/', import.meta.url);
export const PRECOMPILED_INDEX = 'index.json';

/** A schema's identity across processes: what the build's index is keyed by. */
export function schemaFingerprint(schema: object): string {
  return createHash('sha256').update(JSON.stringify(schema)).digest('hex').slice(0, 32);
}

let ajv: Ajv | null = null;
let index: Record<string, string> | null | undefined;
const compiled = new WeakMap<object, ValidateFunction>();

function compileHere(schema: object): ValidateFunction {
  if (!ajv) {
    // Loaded with its first use: a command that parses nothing never pays for Ajv.
    const { Ajv } = createRequire(import.meta.url)('ajv') as typeof import('ajv');
    ajv = new Ajv(AJV_OPTIONS);
    ajv.addFormat('date-time', { type: 'string', validate: isDateTime });
  }
  return ajv.compile(schema);
}

/** The build's validator for this schema, if it made one for this very schema. */
function precompiled(schema: object): ValidateFunction | null {
  if (index === undefined) {
    try {
      index = JSON.parse(readFileSync(new URL(PRECOMPILED_INDEX, PRECOMPILED), 'utf8')) as Record<string, string>;
    } catch {
      index = null; // run from src/ (the tests), or a build without them
    }
  }
  const file = index?.[schemaFingerprint(schema)];
  return file ? (createRequire(PRECOMPILED)(`./${file}`) as ValidateFunction) : null;
}

/** `schema`'s validator, compiled once: by the build where it could, else here. */
export function validatorOf(schema: object): ValidateFunction {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = precompiled(schema) ?? compileHere(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

/**
 * `value` as `schema`'s type if it matches the schema, else throws an InputError naming the first
 * place it does not. `what` names the value in the message (`state`, `update`).
 */
export function parseInput<T extends TSchema>(schema: T, value: unknown, what: string): Static<T> {
  const validate = validatorOf(schema);
  if (validate(value)) return value as Static<T>;
  const { path, reason } = describe(validate.errors ?? []);
  throw new InputError(clip([what, ...path].join('.'), MAX_INPUT_ERROR_LENGTH), reason);
}

// ---------------------------------------------------------------------------------------------------

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Ajv's JSON pointer as path segments, each clipped. */
function segments(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((segment) => clip(segment.replaceAll('~1', '/').replaceAll('~0', '~'), MAX_SEGMENT));
}

function shown(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'object':
      return 'an object';
    case 'string':
      return clip(JSON.stringify(value), MAX_VALUE);
    case 'number':
    case 'boolean':
      return clip(String(value), MAX_VALUE);
    case 'bigint':
      return 'an integer beyond 2^53';
    default:
      return typeof value;
  }
}

/** Where an error is: for a missing property, the property itself. */
function pathOf(error: ErrorObject): string[] {
  const path = segments(error.instancePath);
  if (error.keyword === 'required') path.push(clip(String((error.params as { missingProperty: string }).missingProperty), MAX_SEGMENT));
  return path;
}

/** The alternative an error asks for, when it is one of several (a union's branches). */
function alternative(error: ErrorObject): { type: string } | { value: unknown } | null {
  if (error.keyword === 'type') return { type: String((error.params as { type: string }).type) };
  if (error.keyword === 'const') return { value: (error.params as { allowedValue: unknown }).allowedValue };
  return null;
}

/** "must be" what: the types and values asked for, a value's own type not repeated beside it (a name is a string). */
function oneOf(asked: Array<{ type: string } | { value: unknown }>): string {
  const valueTypes = new Set<string>(asked.flatMap((a) => ('value' in a ? [typeof a.value] : [])));
  const alternatives = asked.flatMap((a) => ('value' in a ? [JSON.stringify(a.value)] : valueTypes.has(a.type) ? [] : [a.type]));
  const unique = [...new Set(alternatives)];
  if (unique.length === 1) return unique[0]!;
  const listed = unique.length > MAX_ALTERNATIVES ? [...unique.slice(0, MAX_ALTERNATIVES - 1), '…'] : unique;
  const either = `${listed.slice(0, -1).join(', ')} or ${listed.at(-1)}`;
  return listed.length === 2 ? either : `one of ${either}`;
}

/**
 * The error to report. Ajv stops at the first failing keyword but tries every branch of a union
 * (`anyOf`), reporting each branch's error and then the union's: the deepest of these is where the
 * value went wrong (a field inside a nullable object, rather than "must be null"); several at the
 * same depth that each ask for a type or a constant are the union's alternatives, and are merged.
 */
function describe(errors: ErrorObject[]): { path: string[]; reason: string } {
  const specific = errors.filter((error) => error.keyword !== 'anyOf' && error.keyword !== 'oneOf');
  if (specific.length === 0) {
    const error = errors[0];
    return { path: error ? pathOf(error) : [], reason: error?.message ?? 'invalid' };
  }
  const depth = Math.max(...specific.map((error) => pathOf(error).length));
  const deepest = specific.filter((error) => pathOf(error).length === depth);
  const first = deepest[0]!;
  const path = pathOf(first);
  const secret = path.some((segment) => SECRET_FIELDS.has(segment));
  const got = first.keyword === 'required' ? '' : ` (got ${secret ? '[redacted]' : shown(first.data)})`;
  const alternatives = deepest.filter((error) => pathOf(error).join('.') === path.join('.')).map(alternative);
  if (alternatives.every((a) => a !== null)) return { path, reason: `must be ${oneOf(alternatives)}${got}` };
  if (first.keyword === 'required') return { path, reason: 'missing' };
  return { path, reason: `${first.message ?? 'invalid'}${got}` };
}

/**
 * A client's value in a few words, safely: String() of a null-prototype object throws, and of a list
 * nested a million deep overflows the stack.
 */
export function shortly(value: unknown): string {
  // Control characters escaped, as JSON would, without the quotes.
  if (typeof value === 'string') return JSON.stringify(value.slice(0, 32)).slice(1, -1);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint' || value === undefined || value === null) return String(value);
  return Array.isArray(value) ? 'a list' : typeof value === 'object' ? 'a map' : typeof value;
}
