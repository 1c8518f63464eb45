import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { validate } from 'dockerfile-utils';
import { describe, expect, it } from 'vitest';
import { CLI, ROOT, startSidecar } from './support/sidecar.js';

/**
 * The Dockerfile read as text, since no image can be built here: what it copies exists and is not
 * left out of the build context, its entry point is the CLI the build produces, and the image runs
 * as a non-root user with a health check that sends the token (probe.js, also built here). (No Dockerfile linter installs from the npm registry or
 * Debian's archive: the npm `hadolint` package downloads its binary from GitHub.)
 */

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  name: string | null;
  image: string;
  instructions: Instruction[];
}

function dockerfileStages(text: string): Stage[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
  const stages: Stage[] = [];
  for (const line of lines) {
    const [, keyword, args] = /^(\S+)\s+(.*)$/.exec(line)!;
    if (keyword!.toUpperCase() === 'FROM') {
      const [image, as, name] = args!.split(/\s+/);
      stages.push({ image: image!, name: as?.toUpperCase() === 'AS' ? name! : null, instructions: [] });
    } else {
      stages.at(-1)!.instructions.push({ keyword: keyword!.toUpperCase(), args: args! });
    }
  }
  return stages;
}

/** COPY's flags and its sources (the last argument is the destination). */
function copyOf(args: string): { from: string | null; sources: string[]; destination: string } {
  const words = args.split(/\s+/);
  const flags = words.filter((word) => word.startsWith('--'));
  const paths = words.filter((word) => !word.startsWith('--'));
  const from = flags.find((flag) => flag.startsWith('--from='))?.slice('--from='.length) ?? null;
  return { from, sources: paths.slice(0, -1), destination: paths.at(-1)! };
}

/** Whether .dockerignore leaves `file` (relative to the context) out: the last matching line decides. */
function ignored(patterns: string[], file: string): boolean {
  const escape = (text: string) => text.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  let out = false;
  for (const line of patterns) {
    const negated = line.startsWith('!');
    const pattern = (negated ? line.slice(1) : line).replace(/^\/+|\/+$/g, '');
    const source = pattern
      .split('**/')
      .map((part) => part.split('**').map((piece) => piece.split('*').map((bit) => escape(bit).replace(/\?/g, '[^/]')).join('[^/]*')).join('.*'))
      .join('(?:.*/)?');
    if (new RegExp(`^${source}(?:/|$)`).test(file)) out = !negated;
  }
  return out;
}

const stages = dockerfileStages(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
const final = stages.at(-1)!;
const dockerignore = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line && !line.startsWith('#'));
const instructions = (keyword: string, stage = final) => stage.instructions.filter((i) => i.keyword === keyword);
const execForm = (args: string): string[] => JSON.parse(args) as string[];

describe('Dockerfile', () => {
  // hadolint is not installable from npm or Debian here; the Docker language server's linter is.
  it('passes the dockerfile-utils linter without a problem', () => {
    const problems = validate(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
    expect(problems.map((p) => `${p.range.start.line + 1}: ${p.message}`)).toEqual([]);
  });

  it('builds in stages on Node 20 slim, and the final stage holds production dependencies only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const stage of stages) expect(stage.image).toMatch(/^node:20(\.\d+)*-[a-z]+-slim$/);
    const sources = instructions('COPY').map((copy) => copyOf(copy.args));
    const modules = sources.find((copy) => copy.destination.replace(/\/$/, '').endsWith('node_modules'));
    expect(modules?.from, 'node_modules come from a stage').toBeTruthy();
    const installer = stages.find((stage) => stage.name === modules!.from)!;
    expect(instructions('RUN', installer).map((run) => run.args).join('\n')).toMatch(/npm (ci --omit=dev|prune --omit=dev)/);
  });

  it('copies only files that exist and that .dockerignore leaves in the build context', () => {
    const names = new Set(stages.map((stage) => stage.name));
    const copies = stages.flatMap((stage) => instructions('COPY', stage).map((copy) => copyOf(copy.args)));
    expect(copies.length).toBeGreaterThan(0);
    for (const copy of copies) {
      if (copy.from !== null) {
        expect(names.has(copy.from), `COPY --from=${copy.from}: a stage of this Dockerfile`).toBe(true);
        continue;
      }
      for (const source of copy.sources) {
        expect(existsSync(path.join(ROOT, source)), `COPY ${source}`).toBe(true);
        expect(ignored(dockerignore, source), `COPY ${source} is left out by .dockerignore`).toBe(false);
      }
    }
    for (const needed of ['package-lock.json', 'src/cli.ts', 'python-hook/stepscope/__init__.py', 'python-hook/pyproject.toml', 'docs/metrics.md']) {
      expect(ignored(dockerignore, needed), needed).toBe(false);
    }
    for (const left of ['node_modules/fastify/package.json', 'dist/cli.js', '.git/HEAD', 'python-hook/stepscope/__pycache__/x.pyc', 'test/ingest.test.ts']) {
      expect(ignored(dockerignore, left), left).toBe(true);
    }
  });

  it('enters through the CLI that the build produces, and runs `serve` by default', () => {
    const [entry] = instructions('ENTRYPOINT');
    const command = execForm(entry!.args);
    expect(command[0]).toBe('node');
    const workdir = instructions('WORKDIR').at(-1)!.args;
    const script = path.posix.relative(workdir, command[1]!);
    expect(script).toBe('dist/cli.js');
    // The build output: tsc compiles src/cli.ts to dist/cli.js, as in the image's build stage.
    expect(existsSync(path.join(ROOT, 'src', 'cli.ts'))).toBe(true);
    expect(path.join(ROOT, script)).toBe(CLI);
    expect(existsSync(CLI), 'run `npx tsc -p .` first').toBe(true);
    const [cmd] = instructions('CMD');
    const args = execForm(cmd!.args);
    expect(args[0]).toBe('serve');
    const help = spawnSync(process.execPath, [CLI, ...args, '--help'], { encoding: 'utf8' });
    expect(help.status, help.stderr).toBe(0);
    // Every setting the image makes through the environment is one that serve reads.
    const env = instructions('ENV').flatMap((e) => [...e.args.matchAll(/(STEPSCOPE_[A-Z_]+)=/g)].map((m) => m[1]!));
    for (const name of env) expect(help.stdout.replace(/\s+/g, ' '), name).toContain(`env: ${name})`);
  });

  it('runs as a numeric non-root user, exposes 9477 and checks /healthz', () => {
    const [user, group] = instructions('USER').at(-1)!.args.split(':');
    expect(Number(user)).toBeGreaterThan(0);
    expect(Number(group ?? user)).toBeGreaterThan(0);
    expect(instructions('EXPOSE').map((e) => e.args)).toContain('9477');
    expect(instructions('HEALTHCHECK').at(-1)?.args).toContain('/healthz');
    // Listening beyond loopback, serve then wants STEPSCOPE_TOKEN (docker run -e) or --insecure.
    expect(instructions('ENV').map((e) => e.args).join(' ')).toMatch(/STEPSCOPE_HOST=0\.0\.0\.0/);
    expect(instructions('ENV').map((e) => e.args).join(' '), 'a token is never baked into the image').not.toMatch(/STEPSCOPE_(TOKEN|INSECURE)/);
  });

  it('checks health with probe.js from the build, which sends the container’s token', async () => {
    // /healthz wants the token too: the check runs the probe script, which reads STEPSCOPE_TOKEN.
    const check = instructions('HEALTHCHECK').at(-1)!.args;
    const command = execForm(/\bCMD\s+(\[.*\])\s*$/.exec(check)![1]!);
    expect(command).toEqual(['node', '/app/dist/probe.js', '/healthz']);
    const workdir = instructions('WORKDIR').at(-1)!.args;
    const script = path.posix.relative(workdir, command[1]!);
    expect(script).toBe('dist/probe.js');
    // The final stage holds the build stage's dist/, where tsc puts src/probe.ts.
    const dist = instructions('COPY')
      .map((copy) => copyOf(copy.args))
      .find((copy) => copy.from !== null && copy.sources.some((source) => source.replace(/\/$/, '').endsWith('/dist')));
    expect(dist, 'dist/ comes from a build stage').toBeDefined();
    expect(path.posix.resolve(workdir, dist!.destination)).toBe(path.posix.dirname(command[1]!));
    expect(existsSync(path.join(ROOT, 'src', 'probe.ts'))).toBe(true);
    expect(existsSync(path.join(ROOT, script)), 'run `npx tsc -p .` first').toBe(true);
    // Against the real sidecar: 0 with the token, 1 without it.
    const token = 'a-token-for-this-test-only';
    const sidecar = await startSidecar(['--gpu-source', 'none', '--token', token]);
    try {
      const { STEPSCOPE_TOKEN: _left, ...env } = process.env;
      const run = (extra: Record<string, string>) =>
        spawnSync(process.execPath, [path.join(ROOT, script), ...command.slice(2)], { env: { ...env, STEPSCOPE_PORT: String(sidecar.port), ...extra }, timeout: 10_000 }).status;
      expect(run({ STEPSCOPE_TOKEN: token })).toBe(0);
      expect(run({})).toBe(1);
    } finally {
      await sidecar.stop();
    }
  });

  it('carries the Python hook at /app/python-hook for an init container to copy', () => {
    const hook = instructions('COPY')
      .map((copy) => copyOf(copy.args))
      .find((copy) => copy.sources.includes('python-hook'));
    expect(path.posix.resolve(instructions('WORKDIR').at(-1)!.args, hook!.destination)).toBe('/app/python-hook');
  });
});
