// `npm test` after the build: the typecheck, vitest and the hook's Python suites at once, since each
// spends much of its time waiting on child processes and sockets. vitest streams its output; the
// typecheck's and the Python suites' come whole once each ends. Fails if any of them fails.
import { spawn } from 'node:child_process';

const run = (command, args, { buffered }) =>
  new Promise((resolve) => {
    const child = spawn(command, args, { stdio: buffered ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    if (buffered) {
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
    }
    child.on('close', (status) => resolve({ name: [command, ...args].join(' '), status: status ?? 1, output }));
  });

const results = await Promise.all([
  run('npx', ['tsc', '-p', 'tsconfig.test.json'], { buffered: true }),
  run('npx', ['vitest', 'run'], { buffered: false }),
  run(process.execPath, ['scripts/test-python.mjs'], { buffered: true }),
]);
for (const { name, status, output } of results) {
  if (output) process.stdout.write(`\n== ${name} ==\n${output}`);
  console.log(`${status === 0 ? 'ok' : 'FAILED'}: ${name}`);
}
process.exit(results.some((r) => r.status !== 0) ? 1 : 0);
