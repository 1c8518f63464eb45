#!/usr/bin/env node
// Precompiles the largest schemas into dist/validators, after tsc, as part of `npm run build`:
// compiling them at run time costs Ajv 0.1 to 0.6 s each (the summary's, the run history's, the
// stream's frames), which `report`, `gate`, `watch` and a restarting `serve` would pay at start, and
// the hooks' frames, which `serve` paid on its first hello (0.08-0.09 s, its event loop held).
// Each becomes Ajv's standalone code (a CommonJS file), listed in index.json by the schema's
// fingerprint; src/protocol/parse.ts loads one where the fingerprint matches and compiles any other
// schema itself, so a schema changed without a rebuild is still checked, only slower.
//
// A listed schema that is not where this list says fails the build, saying so: a schema moved or
// renamed must be moved here too, not silently compiled at every start again.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Kind } from '@sinclair/typebox';
import { Ajv, _ } from 'ajv';
import standalone from 'ajv/dist/standalone/index.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DIST = path.join(ROOT, 'dist');
const OUT = path.join(DIST, 'validators');

/**
 * [the module under dist/, its export]: the schemas parsed on a command's or a start's path. An
 * export that is a table of schemas (not itself a schema) has each of its schemas precompiled.
 */
const SCHEMAS = [
  ['engine/entries.js', 'entrySchemas'], // replay, and serve resuming from its journal
  ['protocol/summary.js', 'SummarySchema'], // report, compare, gate, merge, --baseline
  ['outputs/past-runs.js', 'PastRunEntrySchema'], // gate --history, serve's run history
  ['engine/entries.js', 'ReferenceEntrySchema'], // a journal's run references (summaries in them)
  ['engine/checkpoint.js', 'CheckpointSchema'], // serve and replay from a checkpoint (summaries and series in it)
  ['protocol/stream.js', 'SnapshotFrameSchema'], // watch's first frame
  ['protocol/stream.js', 'UpdateFrameSchema'],
  ['protocol/stream.js', 'VerdictFrameSchema'],
  ['protocol/stream.js', 'RegressionFrameSchema'],
  ['protocol/hook-schema.js', 'HelloFrame'], // serve: a hook's frames (the usual steps frame needs none: steps-bytes.ts)
  ['protocol/hook-schema.js', 'EnvFrame'],
  ['protocol/hook-schema.js', 'StepsFrame'],
  ['protocol/hook-schema.js', 'EndFrame'],
  ['protocol/counters.js', 'counterSchemas'],
  ['protocol/capture.js', 'StackFrameSchema'],
  ['protocol/profile.js', 'ProfileFrameSchema'],
];

const { AJV_OPTIONS, PRECOMPILED_INDEX, isDateTime, schemaFingerprint } = await import(pathToFileURL(path.join(DIST, 'protocol', 'parse.js')).href);

const missing = [];
const found = [];
for (const [file, name] of SCHEMAS) {
  let module;
  try {
    module = await import(pathToFileURL(path.join(DIST, file)).href);
  } catch (error) {
    missing.push(`dist/${file} cannot be imported (${error.message.split('\n')[0]})`);
    continue;
  }
  const schema = module[name];
  if (schema === null || typeof schema !== 'object') missing.push(`dist/${file} has no export ${name}`);
  else if (Kind in schema) found.push({ name, schema });
  else for (const [key, each] of Object.entries(schema)) found.push({ name: `${name}.${key}`, schema: each });
}
if (missing.length) {
  console.error(`build-validators: ${missing.join('; ')}.\nA precompiled schema has moved or been renamed: update SCHEMAS in scripts/build-validators.mjs.`);
  process.exit(1);
}

rmSync(OUT, { recursive: true, force: true });
mkdirSync(OUT, { recursive: true });
// The date-time format parse.ts checks with, its own source (it uses no outer variable).
writeFileSync(path.join(OUT, 'formats.cjs'), `"use strict";\nmodule.exports = { "date-time": { type: "string", validate: ${isDateTime.toString()} } };\n`);
const index = {};
for (const { name, schema } of found) {
  const ajv = new Ajv({ ...AJV_OPTIONS, code: { source: true, formats: _`require("./formats.cjs")` } });
  ajv.addFormat('date-time', { type: 'string', validate: isDateTime });
  const code = standalone.default(ajv, ajv.compile(schema));
  writeFileSync(path.join(OUT, `${name}.cjs`), code);
  index[schemaFingerprint(schema)] = `${name}.cjs`;
}
writeFileSync(path.join(OUT, PRECOMPILED_INDEX), JSON.stringify(index, null, 2) + '\n');
console.error(`build-validators: ${found.length} schemas precompiled into dist/validators`);
