// A virtual environment with TraceML (traceml-ai from PyPI) for the benchmarks that compare against
// it (scripts/accuracy.mjs, scripts/bench-hook-peers.mjs): made once in the machine's cache beside
// the test venv whose torch it reuses (a .pth line, not a second copy of torch).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const TRACEML_VERSION = '0.5.0';

/** `{ python, traceml, why: '' }` of the TraceML venv on `torchPython`'s torch, or `{ python: null, why }`. */
export function tracemlPython(torchPython) {
  if (!torchPython) return { python: null, why: 'TraceML not run: it needs torch ≥ 2 and the test environment with current PyTorch is not built (node scripts/python-venv.mjs ensure)' };
  const info = spawnSync(torchPython, ['-c', 'import sys, site; print(sys._base_executable); print(site.getsitepackages()[0])'], { encoding: 'utf8' });
  if (info.status !== 0) return { python: null, why: `TraceML not run: ${torchPython} does not start` };
  const [base, sitePackages] = info.stdout.trim().split('\n');
  const key = createHash('sha256').update(`${TRACEML_VERSION}\0${base}\0${sitePackages}`).digest('hex').slice(0, 12);
  const dir = path.join(path.dirname(path.dirname(path.dirname(sitePackages))), '..', `bench-traceml-${key}`);
  const python = path.join(dir, 'bin', 'python');
  const done = path.join(dir, '.complete');
  if (!existsSync(done)) {
    rmSync(dir, { recursive: true, force: true });
    const steps = [
      [base, ['-m', 'venv', dir]],
      ['sh', ['-c', `echo '${sitePackages}' > "$(${python} -c 'import site; print(site.getsitepackages()[0])')/stepscope-torch.pth"`]],
      [python, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', `traceml-ai==${TRACEML_VERSION}`]],
    ];
    for (const [command, args] of steps) {
      const step = spawnSync(command, args, { encoding: 'utf8', timeout: 600_000 });
      if (step.status !== 0) return { python: null, why: `TraceML not run: \`pip install traceml-ai==${TRACEML_VERSION}\` failed in a bench venv (${(step.stderr || step.error?.message || '').trim().split('\n').at(-1)})` };
    }
    writeFileSync(done, '');
  }
  return { python, traceml: path.join(dir, 'bin', 'traceml'), why: '' };
}
