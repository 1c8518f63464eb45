// Runs the hook's own unittest suite under every distinct Python here: the one on PATH (usually
// without torch or msgpack, as in many training images) and Debian's /usr/bin/python3 (with them in CI).
import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const hook = path.join(root, 'python-hook');
const seen = new Set();
const pythons = [];
for (const candidate of [process.env.STEPSCOPE_PYTHON, 'python3', '/usr/bin/python3']) {
  if (!candidate) continue;
  const probe = spawnSync(candidate, ['-c', 'import sys; print(sys.executable, sys.version.split()[0])'], { encoding: 'utf8' });
  if (probe.status !== 0) continue;
  const [executable, version] = probe.stdout.trim().split(' ');
  const real = realpathSync(executable);
  if (seen.has(real)) continue;
  seen.add(real);
  pythons.push({ executable, version });
}
if (pythons.length === 0) {
  console.error('test-python: no python3 found');
  process.exit(1);
}
const totals = { passed: 0, failed: 0, skipped: 0 };
let failedRuns = 0;
for (const { executable, version } of pythons) {
  console.log(`\n== hook tests under ${executable} (Python ${version}) ==`);
  const run = spawnSync(executable, ['-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'], { cwd: hook, encoding: 'utf8', stdio: ['ignore', 'inherit', 'pipe'] });
  process.stderr.write(run.stderr);
  // unittest's own closing lines: "Ran 133 tests in 7.0s" then "OK (skipped=5)" or "FAILED (failures=1, errors=2)".
  const ran = Number(/^Ran (\d+) tests?/m.exec(run.stderr)?.[1] ?? 0);
  const count = (what) => Number(new RegExp(`${what}=(\\d+)`).exec(run.stderr)?.[1] ?? 0);
  const bad = count('failures') + count('errors');
  totals.failed += bad;
  totals.skipped += count('skipped');
  totals.passed += ran - bad - count('skipped') - count('expected failures');
  if (run.status !== 0) failedRuns += 1;
}
if (failedRuns && totals.failed === 0) totals.failed = failedRuns;
console.log(`\nhook: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(failedRuns ? 1 : 0);
