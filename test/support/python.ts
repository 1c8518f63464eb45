import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export interface PythonChoice {
  python: string | null;
  why: string;
}

const candidates = () => [process.env.STEPSCOPE_PYTHON, '/usr/bin/python3', 'python3'].filter((p): p is string => !!p);

function imports(python: string, modules: string[]): boolean {
  const probe = spawnSync(python, ['-c', `import ${modules.join(', ')}`], { stdio: 'ignore', timeout: 60_000 });
  return probe.status === 0;
}

/** The first Python that can import `modules` (STEPSCOPE_PYTHON, then Debian's, then PATH's), or why none can. */
export function findPython(modules: string[] = []): PythonChoice {
  for (const python of candidates()) {
    if (imports(python, modules.length ? modules : ['sys'])) return { python, why: '' };
  }
  const what = modules.length ? `importing ${modules.join(', ')}` : 'running';
  return { python: null, why: `no Python capable of ${what} among ${candidates().join(', ')} (CI installs Debian's python3-torch and python3-msgpack)` };
}

/**
 * The Python of the test environment on current PyTorch (torch, lightning, transformers, accelerate
 * from PyPI; python-hook/requirements-test.txt), as .ci/run builds and caches it through
 * scripts/python-venv.mjs: $STEPSCOPE_VENV_PYTHON, else the cached environment if it is built.
 * Nothing is built here, and nothing imported (importing torch alone takes seconds of CPU): the
 * environment is marked complete only once pip has installed all of it. Without it the tests that
 * need it are skipped and say how to get it.
 */
export function findVenvPython(): PythonChoice {
  const how = 'build it with `node scripts/python-venv.mjs ensure` (.ci/run does)';
  let python = process.env.STEPSCOPE_VENV_PYTHON || null;
  if (!python) {
    const probe = spawnSync(process.execPath, [new URL('../../scripts/python-venv.mjs', import.meta.url).pathname, 'python'], { encoding: 'utf8', timeout: 60_000 });
    python = probe.status === 0 ? probe.stdout.trim() || null : null;
  }
  if (!python) return { python: null, why: `no test environment with current PyTorch: ${how}` };
  if (!existsSync(python)) return { python: null, why: `STEPSCOPE_VENV_PYTHON=${python} does not exist: ${how}` };
  return { python, why: '' };
}
