import { Type, type SchemaOptions, type TLiteral, type TOptionalWithFlag, type TSchema, type TUnion } from '@sinclair/typebox';

/**
 * The schema builders the model's own shapes need (a straggler, a verdict's evidence): here, below
 * the protocol, so that those shapes are written once, as schemas, and the protocol reuses them.
 */

/** One of the given names. */
export function Names<const T extends readonly string[]>(names: T, options: SchemaOptions = {}): TUnion<Array<TLiteral<T[number]>>> {
  return Type.Union(
    names.map((name: T[number]) => Type.Literal(name)),
    options,
  );
}

/** An object with an optional property per name, each of `value`'s schema. */
export function OptionalKeys<const K extends readonly string[], T extends TSchema>(keys: K, value: T, options: SchemaOptions = {}) {
  const properties = Object.fromEntries(keys.map((key) => [key, Type.Optional(value)])) as { [P in K[number]]: TOptionalWithFlag<T, true> };
  return Type.Object(properties, options);
}
