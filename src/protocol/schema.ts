import { Type, type SchemaOptions, type TObject, type TSchema } from '@sinclair/typebox';

export { Names, OptionalKeys } from '../model/schema.js';

/** Building blocks of the state's and the stream's schemas (TypeBox, so each is JSON Schema and a type). */

/** `schema` or null; the description goes on the whole. */
export const Nullable = <T extends TSchema>(schema: T, options: SchemaOptions = {}) => Type.Union([schema, Type.Null()], options);

/** An object with a property per name, each of `value`'s schema. */
export function Keys<const K extends readonly string[], T extends TSchema>(keys: K, value: T, options: SchemaOptions = {}): TObject<{ [P in K[number]]: T }> {
  const properties = Object.fromEntries(keys.map((key) => [key, value])) as { [P in K[number]]: T };
  return Type.Object(properties, options);
}

/** An ISO 8601 time of the sidecar's clock, such as `2026-12-02T15:20:01.456Z`. */
export const Time = (description: string) => Type.String({ format: 'date-time', description });
/** A whole number ≥ 0. */
export const Count = (description: string) => Type.Integer({ minimum: 0, description });
export const Num = (description: string) => Type.Number({ description });
/** A number, or null where it was not measured. */
export const NumOrNull = (description: string) => Nullable(Type.Number(), { description });
export const Str = (description: string) => Type.String({ description });
export const StrOrNull = (description: string) => Nullable(Type.String(), { description });
export const Bool = (description: string) => Type.Boolean({ description });
/** Counts by name (close code, limit, entry kind). */
export const CountsBy = (description: string) => Type.Record(Type.String(), Type.Integer({ minimum: 0 }), { description });

/** `schema` with a description of its own where it is used (the schema itself is left as it is). */
export const Described = <T extends TSchema>(schema: T, description: string): T => ({ ...schema, description });

/**
 * A sample held as the journal entry that brought it admitted it: an object with these numeric
 * fields checked, the rest taken as the entry's own type (src/engine/entries.ts checks no deeper,
 * so a state built from entries cannot be held to more than they were).
 */
export const Held = <T>(fields: readonly string[], description: string) =>
  Type.Unsafe<T>({ type: 'object', required: [...fields], properties: Object.fromEntries(fields.map((field) => [field, { type: 'number' }])), description });
