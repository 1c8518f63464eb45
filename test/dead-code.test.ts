import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/sidecar.js';

/**
 * No production code is reached only by tests (issue 25). knip, in production mode, follows the
 * imports from the sidecar's entries (the CLI, the container's probe; knip.json) and lists the files
 * nothing reaches and the exports no other production file imports. An export its own file uses is
 * live (exported for its tests); one its own file does not use either is reached by tests alone.
 */

interface KnipSymbol {
  name: string;
}
interface KnipFileIssues {
  file: string;
  files?: KnipSymbol[] | boolean;
  exports?: KnipSymbol[];
  types?: KnipSymbol[];
  enumMembers?: Record<string, KnipSymbol[]> | KnipSymbol[];
}

/** Left, and why; each entry must still be found, so a stale one fails too. */
const ALLOWED: Record<string, string> = {};

function knip(): KnipFileIssues[] {
  const bin = path.join(ROOT, 'node_modules/knip/bin/knip.js');
  const args = [bin, '--production', '--include', 'files,exports,types,enumMembers', '--reporter', 'json', '--no-progress'];
  let out: string;
  try {
    out = execFileSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    // knip exits 1 when it finds anything; its report is still on stdout.
    out = String((error as { stdout?: unknown }).stdout ?? '');
    if (!out.trim().startsWith('{')) throw error;
  }
  const report = JSON.parse(out) as { issues: KnipFileIssues[] };
  return report.issues;
}

function symbolsOf(value: KnipFileIssues['enumMembers'] | KnipSymbol[] | undefined): KnipSymbol[] {
  if (!value) return [];
  return Array.isArray(value) ? value : Object.values(value).flat();
}

describe('production code', () => {
  it('has no file and no export that only tests reach', () => {
    const found: string[] = [];
    for (const issue of knip()) {
      if (issue.files === true || (Array.isArray(issue.files) && issue.files.length > 0)) found.push(`${issue.file}: the whole file`);
      const text = readFileSync(path.join(ROOT, issue.file), 'utf8');
      for (const symbol of [...symbolsOf(issue.exports), ...symbolsOf(issue.types), ...symbolsOf(issue.enumMembers)]) {
        const uses = text.match(new RegExp(`\\b${symbol.name.replace(/[$]/g, '\\$')}\\b`, 'g'))?.length ?? 0;
        if (uses <= 1) found.push(`${issue.file}:${symbol.name}`);
      }
    }
    const stale = Object.keys(ALLOWED).filter((key) => !found.includes(key));
    expect(stale, 'allowed entries no longer found: remove them').toEqual([]);
    expect(found.filter((key) => !(key in ALLOWED))).toEqual([]);
  }, 60_000);
});
