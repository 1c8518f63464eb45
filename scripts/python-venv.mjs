#!/usr/bin/env node
// The Python environment of the tests and benchmarks on current PyTorch (torch, lightning,
// transformers, accelerate from PyPI, pinned in python-hook/requirements-test.txt): a virtual
// environment kept in the machine's cache, ~/.cache/stepscope/venv-<key>, where <key> hashes the
// requirements file and the base Python. A warm machine finds it and downloads nothing; a changed
// requirements file builds a new one (and removes the old ones: each is several GiB).
//
//   node scripts/python-venv.mjs ensure   build it if it is not there; print its python
//   node scripts/python-venv.mjs python   print its python if it is built, else exit 1 (builds nothing)
//   node scripts/python-venv.mjs dir      print where it is (built or not)
//
// STEPSCOPE_VENV_CACHE moves the cache; STEPSCOPE_VENV_BASE_PYTHON picks the Python it is made from
// (default: python3 on PATH). Progress goes to stderr; stdout has the path only.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(ROOT, 'python-hook', 'requirements-test.txt');
const DONE = '.stepscope-complete';
const LOCK_STALE_MS = 2 * 60 * 60 * 1000;

/** The machine's cache for the test environments (this venv, scripts/node-lts.mjs's Node). */
export function cacheRoot() {
  if (process.env.STEPSCOPE_VENV_CACHE) return process.env.STEPSCOPE_VENV_CACHE;
  return path.join(process.env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'stepscope');
}

/** The first Python that can make a virtual environment: $STEPSCOPE_VENV_BASE_PYTHON, python3 on PATH, Debian's. */
function basePython() {
  const candidates = process.env.STEPSCOPE_VENV_BASE_PYTHON ? [process.env.STEPSCOPE_VENV_BASE_PYTHON] : ['python3', '/usr/bin/python3'];
  for (const python of candidates) {
    const probe = spawnSync(python, ['-c', 'import sys, venv, ensurepip; print(sys.executable); print(sys.version)'], { encoding: 'utf8' });
    if (probe.status !== 0) continue;
    const [executable, ...version] = probe.stdout.trim().split('\n');
    return { python, executable: realpathSync(executable), version: version.join(' ') };
  }
  return null;
}

/** Where the environment for this requirements file and base Python lives; null without a usable Python. */
export function venvDir() {
  const base = basePython();
  if (!base) return null;
  const key = createHash('sha256').update(readFileSync(REQUIREMENTS)).update('\0').update(base.executable).update('\0').update(base.version).digest('hex').slice(0, 16);
  return { dir: path.join(cacheRoot(), `venv-${key}`), base };
}

/** Its python when it has been built completely, else null. */
export function venvPython() {
  const found = venvDir();
  if (!found) return null;
  const python = path.join(found.dir, 'bin', 'python');
  return existsSync(path.join(found.dir, DONE)) && existsSync(python) ? python : null;
}

function run(command, args, what) {
  const result = spawnSync(command, args, { stdio: ['ignore', process.stderr, process.stderr] });
  if (result.status !== 0) throw new Error(`${what} failed (${result.error?.message ?? `exit ${result.status}`})`);
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Builds the environment unless it is there; returns its python. */
export function ensureVenv() {
  const found = venvDir();
  if (!found) throw new Error('no python3 with the venv and ensurepip modules to build the test environment from (Debian: apt-get install python3-venv)');
  const { dir, base } = found;
  const python = path.join(dir, 'bin', 'python');
  if (venvPython()) return python;
  mkdirSync(path.dirname(dir), { recursive: true });
  const lock = `${dir}.lock`;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
      if (Date.now() - statSync(lock).mtimeMs > LOCK_STALE_MS) {
        rmSync(lock, { recursive: true, force: true });
        continue;
      }
      process.stderr.write(`python-venv: another build holds ${lock}; waiting\n`);
      sleep(10_000);
      if (venvPython()) return python;
    }
  }
  try {
    if (venvPython()) return python;
    const started = Date.now();
    process.stderr.write(`python-venv: building ${dir} from ${path.relative(ROOT, REQUIREMENTS)} with ${base.executable} (a cold build downloads ~5.6 GiB from PyPI)\n`);
    rmSync(dir, { recursive: true, force: true });
    run(base.python, ['-m', 'venv', dir], 'python -m venv');
    run(python, ['-m', 'pip', 'install', '--no-cache-dir', '--disable-pip-version-check', '--progress-bar', 'off', '--only-binary=:all:', '-r', REQUIREMENTS], 'pip install');
    const seconds = Math.round((Date.now() - started) / 1000);
    writeFileSync(path.join(dir, DONE), JSON.stringify({ requirements: path.relative(ROOT, REQUIREMENTS), base: base.executable, seconds, built_at: new Date().toISOString() }) + '\n');
    process.stderr.write(`python-venv: built in ${seconds} s\n`);
    // Older environments (other requirements) are several GiB each: keep only this one.
    for (const name of readdirSync(path.dirname(dir))) {
      const other = path.join(path.dirname(dir), name);
      if (/^venv-[0-9a-f]{16}$/.test(name) && other !== dir && !existsSync(`${other}.lock`)) {
        process.stderr.write(`python-venv: removing the outdated ${other}\n`);
        rmSync(other, { recursive: true, force: true });
      }
    }
    return python;
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const command = process.argv[2] ?? 'ensure';
  try {
    if (command === 'ensure') {
      const started = Date.now();
      const python = ensureVenv();
      process.stderr.write(`python-venv: ready in ${((Date.now() - started) / 1000).toFixed(1)} s: ${python}\n`);
      process.stdout.write(python + '\n');
    } else if (command === 'python') {
      const python = venvPython();
      if (!python) process.exit(1);
      process.stdout.write(python + '\n');
    } else if (command === 'dir') {
      const found = venvDir();
      if (!found) process.exit(1);
      process.stdout.write(found.dir + '\n');
    } else {
      process.stderr.write('usage: node scripts/python-venv.mjs ensure|python|dir\n');
      process.exit(2);
    }
  } catch (error) {
    process.stderr.write(`python-venv: ${error.message}\n`);
    process.exit(1);
  }
}
