import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { validate } from 'dockerfile-utils';
import { describe, expect, it } from 'vitest';
import { IMAGE_NODE_OPTIONS, SIDECAR_MALLOC_ENV, SIDECAR_NODE_FLAGS } from '../src/ingest/node-flags.js';
import { dockerfile, envOf, type Stage } from './support/dockerfile.js';
import { CLI, ROOT, startSidecar } from './support/sidecar.js';

/**
 * The Dockerfile read as text, in seconds: what it copies exists and is not left out of the build
 * context, its entry point is the CLI the build produces, and the image runs as a non-root user with
 * a health check that sends the token (probe.js, also built here). The image itself is built and run
 * in real pods by `.ci/run`'s pod stage (scripts/pod-ci.mjs). (No Dockerfile linter installs from the
 * npm registry or Debian's archive: the npm `hadolint` package downloads its binary from GitHub.)
 */

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

const { args: globalArgs, stages } = dockerfile();
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

  it('builds every stage on ARG NODE_IMAGE, the current Node LTS by default, and the final stage holds production dependencies only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(globalArgs.get('NODE_IMAGE')).toMatch(/^node:24(\.\d+)*-[a-z]+-slim$/);
    for (const stage of stages) expect(stage.written).toBe('${NODE_IMAGE}');
    const sources = instructions('COPY').map((copy) => copyOf(copy.args));
    const modules = sources.find((copy) => copy.destination.replace(/\/$/, '').endsWith('node_modules'));
    expect(modules?.from, 'node_modules come from a stage').toBeTruthy();
    const installer = stages.find((stage) => stage.name === modules!.from)!;
    expect(instructions('RUN', installer).map((run) => run.args).join('\n')).toMatch(/npm (ci --omit=dev|prune --omit=dev)/);
  });

  it('says which Node it supports where npm and the README do: 22 and 24, Node 20 being past its end of life', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe('>=22');
    expect(readFileSync(path.join(ROOT, 'README.md'), 'utf8')).toMatch(/Node 22 or 24/);
  });

  it("takes npm's settings and a CA as build secrets, which no layer keeps, and says how", () => {
    const installs = stages.flatMap((stage: Stage) => instructions('RUN', stage)).filter((run) => /\bnpm ci\b/.test(run.args));
    expect(installs.length).toBeGreaterThanOrEqual(2);
    for (const run of installs) {
      expect(run.args).toContain('--mount=type=secret,id=npmrc,');
      expect(run.args).toContain('--mount=type=secret,id=npmca,');
      expect(run.args).toContain('NPM_CONFIG_USERCONFIG=/run/secrets/npmrc');
    }
    const settings = stages.flatMap((stage: Stage) => [...instructions('ENV', stage), ...instructions('ARG', stage)]).map((i) => i.args).join('\n');
    expect(settings).not.toMatch(/npmrc|NPM_|_authToken|registry/i);
    expect(ignored(dockerignore, '.npmrc'), 'a project .npmrc, with its token, stays out of the context').toBe(true);
    const readme = readFileSync(path.join(ROOT, 'deploy', 'kubernetes', 'README.md'), 'utf8');
    expect(readme).toContain('--secret id=npmrc,src=');
    expect(readme).toContain('--secret id=npmca,src=');
    expect(readme).toContain('--build-arg NODE_IMAGE=');
  });

  it("gives Node the sidecar's flags on every start path: the image, npm start, the README's own start", () => {
    const scripts = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    const assignments = Object.entries(SIDECAR_MALLOC_ENV).map(([name, value]) => `${name}=${value}`).join(' ');
    expect(scripts.start).toContain(`${assignments} node ${SIDECAR_NODE_FLAGS.join(' ')} dist/cli.js serve`);
    expect(readFileSync(path.join(ROOT, 'README.md'), 'utf8')).toContain(`${assignments} NODE_OPTIONS=${SIDECAR_NODE_FLAGS.join(' ')} stepscope serve`);
    const env = envOf(final);
    for (const [name, value] of Object.entries(SIDECAR_MALLOC_ENV)) expect(env.get(name), `the image's ${name}`).toBe(value);
  });

  it("sizes Node's heap from the container, and makes --out the one place it writes, its user's", () => {
    const env = envOf(final);
    expect(env.get('NODE_OPTIONS')).toBe(IMAGE_NODE_OPTIONS);
    const [user] = instructions('USER').at(-1)!.args.split(':');
    expect(instructions('RUN').map((run) => run.args).join('\n')).toContain(`mkdir -p ${env.get('STEPSCOPE_OUT')} && chown ${user}:`);
    // No VOLUME: every container of the image would leave an anonymous volume, the manifests' included.
    expect(instructions('VOLUME')).toEqual([]);
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
