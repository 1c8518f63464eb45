import { readdirSync, readFileSync } from 'node:fs';
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
    found.push({ file: path.relative(ROOT, file), from: nodeOf(file), to: nodeOf(target), specifier });
  }
  return found;
}

const imports = sourceFiles(SRC).flatMap(importsOf);
const between = imports.filter((i) => i.from !== i.to);

/** The folder graph's edges, each with the files that make it. */
function graph(): Map<string, Map<string, string[]>> {
  const edges = new Map<string, Map<string, string[]>>();
  for (const i of between) {
    const out = edges.get(i.from) ?? new Map<string, string[]>();
    out.set(i.to, [...(out.get(i.to) ?? []), `${i.file} → ${i.specifier}`]);
    edges.set(i.from, out);
  }
  return edges;
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
    const edges = graph();
    const found = cycles(edges).map((component) => {
      const inside = component.flatMap((from) =>
        [...(edges.get(from) ?? [])]
          .filter(([to]) => component.includes(to))
          .map(([to, files]) => `  ${from} → ${to}: ${files[0]}${files.length > 1 ? ` (+${files.length - 1} more)` : ''}`),
      );
      return `${component.join(' ⇄ ')}\n${inside.join('\n')}`;
    });
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
