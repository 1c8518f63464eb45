// Runs the hook's own unittest suite under every distinct Python here: the one on PATH (usually
// without torch or msgpack, as in many training images) and Debian's /usr/bin/python3 (with them in CI,
// PyTorch 1.13), and the tests that need torch (the zero-code path, the framework callbacks) under the
// test environment on current PyTorch from PyPI where it is built (scripts/python-venv.mjs, .ci/run).
// Lightning and Transformers run in those only with STEPSCOPE_TEST_FRAMEWORKS=1.
import { spawn, spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { venvPython } from './python-venv.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const hook = path.join(root, 'python-hook');
const seen = new Set();
const pythons = [];
/** The modules that need torch: all the test environment on current PyTorch adds to the others' runs. */
const TORCH_MODULES = ['tests.test_auto', 'tests.test_integrations', 'tests.test_where', 'tests.test_simcuda', 'tests.test_fsdp'];
const venv = process.env.STEPSCOPE_VENV_PYTHON || venvPython();
for (const candidate of [process.env.STEPSCOPE_PYTHON, 'python3', '/usr/bin/python3', venv]) {
  if (!candidate) continue;
  const probe = spawnSync(candidate, ['-c', 'import sys; print(sys.executable, sys.version.split()[0])'], { encoding: 'utf8' });
  if (probe.status !== 0) continue;
  const [executable, version] = probe.stdout.trim().split(' ');
  // A virtual environment's python is a link to its base: tell them apart by the environment.
  const real = candidate === venv ? `${realpathSync(executable)} in ${path.dirname(path.dirname(executable))}` : realpathSync(executable);
  if (seen.has(real)) continue;
  seen.add(real);
  pythons.push({ executable, version, modules: candidate === venv ? TORCH_MODULES : null });
}
if (pythons.length === 0) {
  console.error('test-python: no python3 found');
  process.exit(1);
}
const totals = { passed: 0, failed: 0, skipped: 0 };
let failedRuns = 0;
// The interpreters run at once (each suite mostly waits on sockets and child processes); their
// output is printed whole, one after the other.
const runs = await Promise.all(
  pythons.map(
    ({ executable, modules }) =>
      new Promise((resolve) => {
        const args = modules ? ['-m', 'unittest', '-v', ...modules] : ['-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'];
        const child = spawn(executable, args, { cwd: hook, stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (chunk) => (stdout += chunk));
        child.stderr.on('data', (chunk) => (stderr += chunk));
        child.on('close', (status) => resolve({ status, stdout, stderr }));
      }),
  ),
);
pythons.forEach(({ executable, version, modules }, i) => {
  const run = runs[i];
  console.log(`\n== hook tests under ${executable} (Python ${version})${modules ? `: ${modules.join(', ')}` : ''} ==`);
  process.stdout.write(run.stdout);
  process.stderr.write(run.stderr);
  // unittest's own closing lines: "Ran 133 tests in 7.0s" then "OK (skipped=5)" or "FAILED (failures=1, errors=2)".
  const ran = Number(/^Ran (\d+) tests?/m.exec(run.stderr)?.[1] ?? 0);
  const count = (what) => Number(new RegExp(`${what}=(\\d+)`).exec(run.stderr)?.[1] ?? 0);
  const bad = count('failures') + count('errors');
  totals.failed += bad;
  totals.skipped += count('skipped');
  totals.passed += ran - bad - count('skipped') - count('expected failures');
  if (run.status !== 0) failedRuns += 1;
});
if (failedRuns && totals.failed === 0) totals.failed = failedRuns;
console.log(`\nhook: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(failedRuns ? 1 : 0);
