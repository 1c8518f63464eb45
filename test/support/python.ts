import { spawnSync } from 'node:child_process';

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
