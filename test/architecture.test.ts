import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/sidecar.js';

/**
 * Which part of src/ may import which. Each direct child folder of src/ is a node, the top-level
 * files together are the node "root"; the imports are read from the source with a regex, which is
 * enough for code that only ever imports by relative path with a .js suffix.
 */

const SRC = path.join(ROOT, 'src');

interface Import {
  file: string;
  from: string;
  to: string;
  /** The file imported, relative to the repository (a .js specifier names its .ts or .tsx). */
  target: string;
  specifier: string;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return /\.tsx?$/.test(entry.name) ? [full] : [];
  });
}

/** The node of a file under src/: its folder directly under src/, or "root". */
function nodeOf(file: string): string {
  const parts = path.relative(SRC, file).split(path.sep);
  return parts.length > 1 ? parts[0]! : 'root';
}

/** `… from '…'` (imports and re-exports), `import('…')` and `import '…'`. */
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm;

function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8');
  const found: Import[] = [];
  for (const match of text.matchAll(IMPORT)) {
    const specifier = match[1]!;
    if (!specifier.startsWith('.')) continue;
    const target = path.resolve(path.dirname(file), specifier);
    if (!target.startsWith(SRC + path.sep)) continue;
    const source = target.replace(/\.js$/, '.ts');
    found.push({ file: path.relative(ROOT, file), from: nodeOf(file), to: nodeOf(target), target: path.relative(ROOT, existsSync(source) ? source : `${source}x`), specifier });
  }
  return found;
}

const imports = sourceFiles(SRC).flatMap(importsOf);
const between = imports.filter((i) => i.from !== i.to);

/** The graph's edges between the nodes `ends` gives each import (folders, or files), each with the files that make it. */
function graph(edgesOf: readonly Import[], ends: (i: Import) => [string, string]): Map<string, Map<string, string[]>> {
  const edges = new Map<string, Map<string, string[]>>();
  for (const i of edgesOf) {
    const [from, to] = ends(i);
    const out = edges.get(from) ?? new Map<string, string[]>();
    out.set(to, [...(out.get(to) ?? []), `${i.file} → ${i.specifier}`]);
    edges.set(from, out);
  }
  return edges;
}

/** Each cycle with the edges inside it, in words. */
function cyclesText(edges: Map<string, Map<string, string[]>>): string[] {
  return cycles(edges).map((component) => {
    const inside = component.flatMap((from) =>
      [...(edges.get(from) ?? [])]
        .filter(([to]) => component.includes(to))
        .map(([to, files]) => `  ${from} → ${to}: ${files[0]}${files.length > 1 ? ` (+${files.length - 1} more)` : ''}`),
    );
    return `${component.join(' ⇄ ')}\n${inside.join('\n')}`;
  });
}

/** Strongly connected components with more than one node (Tarjan): the cycles between folders. */
function cycles(edges: Map<string, Map<string, string[]>>): string[][] {
  const nodes = [...new Set([...edges.keys(), ...[...edges.values()].flatMap((out) => [...out.keys()])])].sort();
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (node: string) => {
    index.set(node, next);
    low.set(node, next);
    next += 1;
    stack.push(node);
    onStack.add(node);
    for (const to of [...(edges.get(node)?.keys() ?? [])].sort()) {
      if (!index.has(to)) {
        visit(to);
        low.set(node, Math.min(low.get(node)!, low.get(to)!));
      } else if (onStack.has(to)) {
        low.set(node, Math.min(low.get(node)!, index.get(to)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of nodes) if (!index.has(node)) visit(node);
  return found;
}

/** Imports from `node` to nodes outside `allowed`, as `file → specifier`. */
function outside(node: string, allowed: string[]): string[] {
  return between.filter((i) => i.from === node && !allowed.includes(i.to)).map((i) => `${i.file} → ${i.specifier}`);
}

describe('the folders of src/', () => {
  it('reads the imports it judges by', () => {
    // The regex must see imports, re-exports and dynamic imports, or every assertion below is empty.
    const specifiers = (file: string) => imports.filter((i) => i.file === file).map((i) => i.specifier);
    expect(specifiers('src/viewer/watch.ts')).toContain('./ui/render.js');
    expect(specifiers('src/analysis/verdict.ts')).toContain('../model/verdict.js');
    expect(between.length).toBeGreaterThan(20);
  });

  it('have no import cycle between them', () => {
    const found = cyclesText(graph(between, (i) => [i.from, i.to]));
    expect(found, found.join('\n\n')).toEqual([]);
  });

  it('keep the viewer to the protocol, the model and itself', () => {
    expect(outside('viewer', ['protocol', 'model', 'viewer'])).toEqual([]);
  });

  it('keep the model a leaf', () => {
    expect(outside('model', ['model'])).toEqual([]);
  });

  it('keep the protocol to itself and the model', () => {
    expect(outside('protocol', ['protocol', 'model'])).toEqual([]);
  });
});

describe('the files of src/', () => {
  it('have no import cycle between them, type imports included', () => {
    // A type-only import erases at run time but still ties the two files' meanings together: a
    // circle of them (the file-format types beside the code that builds them) is a circle all the same.
    expect(imports.some((i) => i.file === 'src/analysis/summary.ts' && /protocol\/summary\.js$/.test(i.specifier))).toBe(true);
    const found = cyclesText(graph(imports, (i) => [i.file, i.target]));
    expect(found, found.join('\n\n')).toEqual([]);
  });

  it('the cycle check finds a cycle made of type imports', () => {
    const made: Import[] = [
      { file: 'a.ts', from: 'x', to: 'x', target: 'b.ts', specifier: './b.js' },
      { file: 'b.ts', from: 'x', to: 'x', target: 'a.ts', specifier: './a.js' },
    ];
    expect(cycles(graph(made, (i) => [i.file, i.target]))).toEqual([['a.ts', 'b.ts']]);
  });
});

/**
 * The schema is the type: an outward shape (the state, the summary, the stream) is written once, as
 * a TypeBox schema whose `Static` is its type. A hand-written interface or type of the same name
 * as an exported schema is a second copy that can drift from it.
 */
const SCHEMA = /^export const (\w+)Schema\b/gm;
const DECLARED = /^export (?:interface|type) (\w+)\b([^\n]*)/gm;

/**
 * Same-named declarations that stay, and why. Not twins: the names' lists that the schemas are built
 * from (`Names(VERDICTS)` is made of the list `Verdict` is the union of). The model is the leaf below
 * the protocol ('keep the model a leaf'): its shapes (a straggler, a verdict's evidence) are schemas
 * there, which the protocol reuses.
 */
const NOT_TWINS: Record<string, string> = {
  'src/model/verdict.ts:Verdict': 'the name list VerdictSchema is built from',
  'src/model/verdict.ts:Cause': 'the union of the name lists CauseSchema is built from',
  'src/model/gpu.ts:ThrottleReasonName': 'the name list ThrottleReasonNameSchema is built from',
};

describe('the outward shapes', () => {
  const files = sourceFiles(SRC).map((file) => ({ file: path.relative(ROOT, file), text: readFileSync(file, 'utf8') }));
  const schemas = new Set(files.flatMap(({ text }) => [...text.matchAll(SCHEMA)].map((m) => m[1]!)));
  const twins = files.flatMap(({ file, text }) =>
    [...text.matchAll(DECLARED)]
      // `export type X = Static<typeof XSchema>` is the schema's own type, not a twin of it.
      .filter((m) => schemas.has(m[1]!) && !new RegExp(`^\\s*=\\s*Static<typeof ${m[1]}Schema>`).test(m[2]!))
      .map((m) => `${file}:${m[1]}`),
  );

  it('reads the schemas and declarations it judges by', () => {
    expect(schemas).toContain('Summary');
    expect(schemas).toContain('RankWindow');
    expect(twins).toContain('src/model/verdict.ts:Verdict');
  });

  it('have no hand-written twin of a schema: the schema is the type', () => {
    const unlisted = twins.filter((twin) => !(twin in NOT_TWINS));
    expect(unlisted, `declared again beside their schema: ${unlisted.join(', ')}`).toEqual([]);
    // An entry whose twin is gone is taken off the list.
    expect(Object.keys(NOT_TWINS).filter((twin) => !twins.includes(twin))).toEqual([]);
  });
});
