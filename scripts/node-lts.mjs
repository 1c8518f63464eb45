#!/usr/bin/env node
// A current Node LTS release for CI to run the tests on as well as the machine's own Node: the
// registry's `node-linux-<arch>` package (the official binaries, checked against the registry's
// integrity hash by `npm pack`), kept in the machine's cache, ~/.cache/stepscope/node-<version>.
// A warm machine downloads nothing.
//
//   node scripts/node-lts.mjs ensure VERSION   fetch it unless it is there; print its bin folder
//
// STEPSCOPE_VENV_CACHE moves the cache, as for the Python environment (scripts/python-venv.mjs).
// Progress goes to stderr; stdout has the path only.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { cacheRoot } from './python-venv.mjs';

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', process.stderr], ...options });
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.error?.message ?? `exit ${result.status}`})`);
  return result.stdout.trim();
}

/** The bin folder of Node `version` for this machine, fetched into the cache unless it is there. */
export function ensureNode(version) {
  if (!/^\d+\.\d+\.\d+$/.test(version)) throw new Error(`a Node version is three numbers, such as 24.22.3 (got ${JSON.stringify(version)})`);
  const dir = path.join(cacheRoot(), `node-${version}`);
  const bin = path.join(dir, 'bin');
  if (existsSync(path.join(bin, 'node'))) return bin;
  mkdirSync(cacheRoot(), { recursive: true });
  const work = mkdtempSync(path.join(cacheRoot(), `.node-${version}-`));
  try {
    const pkg = `node-${process.platform}-${process.arch}@${version}`;
    console.error(`node-lts: fetching ${pkg} from the npm registry …`);
    run('npm', ['pack', '--silent', pkg], { cwd: work });
    const tarball = readdirSync(work).find((name) => name.endsWith('.tgz'));
    if (!tarball) throw new Error(`npm pack ${pkg} left no tarball`);
    run('tar', ['xzf', tarball], { cwd: work });
    const said = run(path.join(work, 'package', 'bin', 'node'), ['--version']);
    if (said !== `v${version}`) throw new Error(`${pkg}'s node says ${said}`);
    // npm and npx come with the machine's npm; the new node only has to be first on PATH.
    renameSync(path.join(work, 'package'), dir);
    return bin;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const [command, version] = process.argv.slice(2);
if (command === 'ensure' && version) {
  try {
    console.log(ensureNode(version));
  } catch (error) {
    console.error(`node-lts: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
} else {
  console.error('usage: node scripts/node-lts.mjs ensure VERSION');
  process.exit(2);
}
