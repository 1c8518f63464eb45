import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { throttleUnchecked } from '../src/counters/coverage.js';
import { canonicalMetric, DCGM_METRICS } from '../src/counters/dcgm-parse.js';
import { describePlan, heapFlag, MemoryError, planMemory } from '../src/ingest/memory-budget.js';
import { dockerfile, envOf as imageEnvOf } from './support/dockerfile.js';
import { measuredHeap } from './support/node-heap.js';
import { CLI, ROOT, startSidecar } from './support/sidecar.js';
import { parseDcgmMetrics } from './support/counters.js';

/**
 * The manifests in deploy/kubernetes, read as YAML and checked for what running stepscope beside a
 * training job needs. No cluster and no schema validator here: kubeconform is neither on the npm
 * registry nor in Debian's archive.
 */

const DIR = path.join(ROOT, 'deploy', 'kubernetes');
const PORT = 9477;
/** The image's WORKDIR, where its build stage's dist/ lands (test/deploy-image.test.ts checks that). */
const APP = '/app';
/** The probe script in the image, and what the build makes of src/probe.ts here. */
const PROBE_IN_IMAGE = `${APP}/dist/probe.js`;
const PROBE = path.join(ROOT, path.posix.relative(APP, PROBE_IN_IMAGE));

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string; optional?: boolean } };
}
interface Probe {
  httpGet?: { path: string; port: number | string };
  exec?: { command: string[] };
  timeoutSeconds?: number;
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: Array<{ name?: string; containerPort: number }>;
  restartPolicy?: string;
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  securityContext?: Record<string, any>;
  volumeMounts?: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  startupProbe?: Probe;
}
interface PodSpec {
  initContainers?: Container[];
  containers: Container[];
  volumes?: Array<{ name: string; emptyDir?: object }>;
  terminationGracePeriodSeconds?: number;
}
interface Manifest {
  file: string;
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec: any;
}

const manifests: Manifest[] = readdirSync(DIR)
  .filter((file) => /\.ya?ml$/.test(file))
  .flatMap((file) =>
    parseAllDocuments(readFileSync(path.join(DIR, file), 'utf8')).map((doc) => {
      if (doc.errors.length || doc.warnings.length) throw new Error(`${file}: ${[...doc.errors, ...doc.warnings].map((e) => e.message).join('; ')}`);
      return { file, ...(doc.toJS() as Omit<Manifest, 'file'>) };
    }),
  );
const jobs = manifests.filter((m) => m.kind === 'Job');
const podMonitors = manifests.filter((m) => m.kind === 'PodMonitor');
const configMaps = manifests.filter((m) => m.kind === 'ConfigMap');

/** Every variable `stepscope serve` reads, from its own --help. */
const serveHelp = spawnSync(process.execPath, [CLI, 'serve', '--help'], { encoding: 'utf8' }).stdout.replace(/\s+/g, ' ');
const SERVE_ENV = new Set([...serveHelp.matchAll(/env: (STEPSCOPE_[A-Z_]+)\)/g)].map((m) => m[1]!));
/** What the sidecar reads besides its own: Node, the NVIDIA runtime, the downward API for DCGM. */
const OTHER_SIDECAR_ENV = new Set(['NODE_OPTIONS', 'NVIDIA_VISIBLE_DEVICES', 'NVIDIA_DRIVER_CAPABILITIES', 'POD_NAME', 'POD_NAMESPACE', 'NODE_IP']);

const envOf = (container: Container, name: string) => container.env?.find((e) => e.name === name);
const valueOf = (container: Container, name: string) => envOf(container, name)?.value;
const cpu = (q: string | number) => (typeof q === 'number' ? q : q.endsWith('m') ? Number(q.slice(0, -1)) / 1000 : Number(q));
const mib = (q: string | number) => {
  const [, n, unit] = /^(\d+)(Mi|Gi)?$/.exec(String(q))!;
  return Number(n) * (unit === 'Gi' ? 1024 : unit === 'Mi' ? 1 : 1 / 1024 / 1024);
};

function pod(job: Manifest) {
  const spec = job.spec.template.spec as PodSpec;
  const all = [...(spec.initContainers ?? []), ...spec.containers];
  const sidecar = all.find((c) => c.name === 'stepscope');
  const copier = spec.initContainers?.find((c) => c.command?.some((word) => word.startsWith('/app/python-hook')));
  const trainers = spec.containers.filter((c) => c !== sidecar);
  if (!sidecar || !copier || trainers.length === 0) throw new Error(`${job.file}: a stepscope container, a hook-copying init container and a training container`);
  return { spec, sidecar, copier, trainers, native: spec.initContainers?.includes(sidecar) ?? false };
}

/** Where `container` sees the file that `source` has at `file`, through a volume both mount. */
function seenBy(source: Container, file: string, container: Container, volume: string): string {
  const from = source.volumeMounts!.find((m) => m.name === volume)!.mountPath;
  const to = container.volumeMounts!.find((m) => m.name === volume)!.mountPath;
  return path.posix.join(to, path.posix.relative(from, file));
}

/**
 * An exec probe running probe.js on `route`: kubelet's httpGet probes cannot take the token from a
 * Secret into a header, and probe.js reads it (and the port) from the container's environment.
 */
const probesWithScript = (probe: Probe | undefined, route: string, where: string) => {
  expect(probe?.httpGet, `${where}: an httpGet probe would get 401`).toBeUndefined();
  expect(probe?.exec?.command, where).toEqual(['node', PROBE_IN_IMAGE, route]);
  // Node starting under the CPU cap plus probe.js's own 2 s request timeout; kubelet's default is 1 s.
  expect(probe?.timeoutSeconds, where).toBeGreaterThanOrEqual(3);
};

/** The Secret that `container` takes STEPSCOPE_TOKEN from, never a value written in the manifest. */
const tokenSecret = (container: Container, where: string) => {
  const token = envOf(container, 'STEPSCOPE_TOKEN');
  expect(token?.value, `${where}: ${container.name} has no token written in the manifest`).toBeUndefined();
  const ref = token?.valueFrom?.secretKeyRef;
  expect(ref, `${where}: ${container.name} takes STEPSCOPE_TOKEN from a Secret`).toMatchObject({ name: expect.any(String), key: expect.any(String) });
  expect(ref!.optional ?? false, `${where}: ${container.name} does not start without it`).toBe(false);
  return { name: ref!.name, key: ref!.key };
};

const restricted = (container: Container) => {
  const security = container.securityContext ?? {};
  expect(security.runAsNonRoot, container.name).toBe(true);
  expect(security.runAsUser, container.name).toBeGreaterThan(0);
  expect(security.allowPrivilegeEscalation, container.name).toBe(false);
  expect(security.readOnlyRootFilesystem, container.name).toBe(true);
  expect(security.capabilities?.drop, container.name).toContain('ALL');
};

describe('Kubernetes manifests', () => {
  it('parse as YAML: training Jobs, a PodMonitor, the Prometheus rules and the dcgm-exporter counters', () => {
    expect(SERVE_ENV.size).toBeGreaterThan(10);
    expect(jobs.length).toBeGreaterThanOrEqual(3);
    expect(podMonitors).toHaveLength(1);
    // Its groups are checked against deploy/prometheus/stepscope-rules.yml by test/prometheus-rules.test.ts.
    expect(manifests.filter((m) => m.kind === 'PrometheusRule').map((m) => m.file)).toEqual(['prometheus-rules.yaml']);
    expect(configMaps.map((m) => m.file)).toEqual(['dcgm-exporter-counters.yaml']);
    for (const m of manifests) expect(`${m.apiVersion} ${m.kind}`, m.file).toMatch(/^(batch\/v1 Job|monitoring\.coreos\.com\/v1 (PodMonitor|PrometheusRule)|v1 ConfigMap)$/);
    // The token's Secret is created out of band (README.md): no value of it is kept here.
    expect(manifests.filter((m) => m.kind === 'Secret')).toEqual([]);
  });

  it('run stepscope as a native sidecar (restartPolicy: Always), or for older clusters as a container that exits on its own', () => {
    const kinds = jobs.map((job) => {
      const { sidecar, native, spec } = pod(job);
      if (native) {
        expect(sidecar.restartPolicy, job.file).toBe('Always');
        // Started before the training container, which starts once this passes.
        probesWithScript(sidecar.startupProbe, '/readyz', `${job.file}: startupProbe`);
      } else {
        expect(sidecar.restartPolicy, job.file).toBeUndefined();
        expect(valueOf(sidecar, 'STEPSCOPE_EXIT_ON_END'), `${job.file}: else the Job never completes`).toBe('true');
        expect(job.spec.activeDeadlineSeconds, job.file).toBeGreaterThan(0);
      }
      expect(spec.terminationGracePeriodSeconds, `${job.file}: time for the training's own shutdown and stepscope's summary`).toBeGreaterThanOrEqual(30);
      return native;
    });
    expect(kinds).toContain(true);
    expect(kinds).toContain(false);
  });

  it('share an emptyDir: the hook copied in for the training container, --out for the sidecar', () => {
    for (const job of jobs) {
      const { spec, sidecar, copier, trainers } = pod(job);
      expect(copier.image, job.file).toBe(sidecar.image);
      const shared = spec.volumes!.filter((v) => v.emptyDir && [sidecar, copier, ...trainers].every((c) => c.volumeMounts?.some((m) => m.name === v.name)));
      expect(shared, job.file).toHaveLength(1);
      const volume = shared[0]!.name;
      const hookDir = copier.command!.at(-1)!;
      const out = valueOf(sidecar, 'STEPSCOPE_OUT')!;
      expect(out.startsWith(sidecar.volumeMounts!.find((m) => m.name === volume)!.mountPath + '/'), `${job.file}: --out ${out} on the shared volume`).toBe(true);
      for (const trainer of trainers) {
        expect(valueOf(trainer, 'PYTHONPATH')?.split(':'), job.file).toContain(seenBy(copier, hookDir, trainer, volume));
        expect(trainer.volumeMounts!.find((m) => m.name === volume)!.readOnly, `${job.file}: the training container only reads the hook`).toBe(true);
      }
    }
  });

  it('point the training container at the sidecar, which listens on the pod network for Prometheus', () => {
    for (const job of jobs) {
      const { sidecar, trainers } = pod(job);
      expect(sidecar.ports, job.file).toEqual([{ name: 'stepscope', containerPort: PORT }]);
      expect(valueOf(sidecar, 'STEPSCOPE_PORT') ?? String(PORT), job.file).toBe(String(PORT));
      expect(valueOf(sidecar, 'STEPSCOPE_HOST'), job.file).toBe('0.0.0.0');
      expect(sidecar.args?.[0] ?? 'serve', job.file).toBe('serve');
      for (const trainer of trainers) {
        expect(valueOf(trainer, 'STEPSCOPE_URL'), job.file).toBe(`ws://127.0.0.1:${PORT}/v1/ingest`);
        expect(envOf(trainer, 'STEPSCOPE_JOB'), `${job.file}: every pod of the Job reports one job`).toBeDefined();
      }
    }
  });

  it('keep the sidecar small, capped, non-root, and probed on /healthz and /readyz', () => {
    for (const job of jobs) {
      const { sidecar, copier } = pod(job);
      const { requests, limits } = sidecar.resources ?? {};
      expect(cpu(requests!.cpu!), job.file).toBeLessThanOrEqual(0.25);
      expect(cpu(limits!.cpu!), job.file).toBeLessThanOrEqual(1);
      expect(mib(requests!.memory!), job.file).toBeLessThanOrEqual(256);
      expect(mib(limits!.memory!), job.file).toBeLessThanOrEqual(512);
      expect(copier.resources?.limits, job.file).toBeDefined();
      restricted(sidecar);
      restricted(copier);
      probesWithScript(sidecar.livenessProbe, '/healthz', `${job.file}: livenessProbe`);
      probesWithScript(sidecar.readinessProbe, '/readyz', `${job.file}: readinessProbe`);
    }
  });

  it('give the sidecar and every training container the token from one Secret, which the README says how to create', () => {
    const readme = readFileSync(path.join(DIR, 'README.md'), 'utf8');
    const secrets = new Set<string>();
    for (const job of jobs) {
      const { sidecar, trainers } = pod(job);
      // Listening on 0.0.0.0, serve refuses to start without a token; --insecure would drop it.
      const own = tokenSecret(sidecar, job.file);
      expect(envOf(sidecar, 'STEPSCOPE_INSECURE'), `${job.file}: any value of STEPSCOPE_INSECURE turns it on`).toBeUndefined();
      // The hook sends STEPSCOPE_TOKEN from its environment, else every step gets 401.
      for (const trainer of trainers) expect(tokenSecret(trainer, job.file), job.file).toEqual(own);
      secrets.add(JSON.stringify(own));
    }
    expect(secrets.size, 'one Secret for every manifest, so one for the PodMonitor').toBe(1);
    const { name, key } = JSON.parse([...secrets][0]!) as { name: string; key: string };
    expect(readme).toContain(`kubectl create secret generic ${name} --from-literal=${key}=$(openssl rand -hex 32)`);
    for (const job of jobs) {
      expect(readFileSync(path.join(DIR, job.file), 'utf8'), `${job.file} says how to create the Secret`).toContain(`kubectl create secret generic ${name} --from-literal=${key}=`);
    }
  });

  it('probe with a script the build produces, which passes with the container’s token and fails without it', async () => {
    expect(existsSync(path.join(ROOT, 'src', 'probe.ts'))).toBe(true);
    expect(existsSync(PROBE), 'run `npx tsc -p .` first').toBe(true);
    const commands = new Map<string, string[]>();
    for (const job of jobs) {
      const { sidecar } = pod(job);
      for (const probe of [sidecar.startupProbe, sidecar.readinessProbe, sidecar.livenessProbe]) {
        if (probe?.exec) commands.set(probe.exec.command.join(' '), probe.exec.command);
      }
    }
    expect([...commands.values()].map((command) => command.at(-1)).sort()).toEqual(['/healthz', '/readyz']);
    const token = 'a-token-for-this-test-only';
    const sidecar = await startSidecar(['--gpu-source', 'none', '--token', token]);
    try {
      const run = (command: string[], env: Record<string, string>) => {
        const { STEPSCOPE_TOKEN: _left, ...rest } = process.env;
        const [node, script, ...args] = command;
        expect(node).toBe('node');
        expect(script).toBe(PROBE_IN_IMAGE);
        return spawnSync(process.execPath, [PROBE, ...args], { env: { ...rest, STEPSCOPE_PORT: String(sidecar.port), ...env }, encoding: 'utf8', timeout: 10_000 }).status;
      };
      for (const command of commands.values()) {
        expect(run(command, { STEPSCOPE_TOKEN: token }), command.join(' ')).toBe(0);
        expect(run(command, {}), `${command.join(' ')} without the token`).toBe(1);
        expect(run(command, { STEPSCOPE_TOKEN: 'wrong' }), `${command.join(' ')} with a wrong token`).toBe(1);
      }
    } finally {
      await sidecar.stop();
    }
  });

  it("set only variables the sidecar reads, and refer only to variables defined before", () => {
    for (const job of jobs) {
      const { sidecar } = pod(job);
      const defined: string[] = [];
      for (const variable of sidecar.env ?? []) {
        expect(SERVE_ENV.has(variable.name) || OTHER_SIDECAR_ENV.has(variable.name), `${job.file}: ${variable.name}`).toBe(true);
        for (const [, name] of (variable.value ?? '').matchAll(/\$\(([A-Z_]+)\)/g)) expect(defined, `${job.file}: $(${name})`).toContain(name);
        defined.push(variable.name);
      }
    }
  });

  it('show each way of giving the sidecar GPU counters: the NVIDIA runtime, the node’s DCGM exporter, the hooks', () => {
    const sidecars = jobs.map((job) => pod(job).sidecar);
    expect(sidecars.some((s) => valueOf(s, 'NVIDIA_VISIBLE_DEVICES') === 'all')).toBe(true);
    expect(sidecars.some((s) => valueOf(s, 'STEPSCOPE_GPU_SOURCE') === 'hook')).toBe(true);
    const dcgm = sidecars.find((s) => valueOf(s, 'STEPSCOPE_DCGM_URL'))!;
    expect(valueOf(dcgm, 'STEPSCOPE_DCGM_URL')).toBe('http://$(NODE_IP):9400/metrics');
    expect(envOf(dcgm, 'NODE_IP')?.valueFrom?.fieldRef?.fieldPath).toBe('status.hostIP');
    expect(envOf(dcgm, 'POD_NAME')?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.name');
    expect(envOf(dcgm, 'POD_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.namespace');
  });

  it('run a torchrun job with one process per GPU it asks for', () => {
    const torchrun = jobs.flatMap((job) => pod(job).trainers).find((c) => c.command?.[0] === 'torchrun')!;
    const perNode = torchrun.command!.find((word) => word.startsWith('--nproc_per_node='))!;
    // The spelling every torchrun takes: torch 1.x's knows no --nproc-per-node.
    expect(torchrun.command!.some((word) => word.startsWith('--nproc-per-node'))).toBe(false);
    expect(Number(perNode.split('=')[1])).toBe(Number(torchrun.resources!.limits!['nvidia.com/gpu']));
    expect(Number(perNode.split('=')[1])).toBeGreaterThan(1);
  });

  it('time the training script unmodified by default: `python -m stepscope run`, or STEPSCOPE_AUTO=1 for torchrun', () => {
    const ways = new Set<string>();
    for (const job of jobs) {
      const { copier, trainers, spec } = pod(job);
      const volume = spec.volumes!.find((v) => v.emptyDir && trainers.every((t) => t.volumeMounts?.some((m) => m.name === v.name)))!.name;
      const hook = seenBy(copier, copier.command!.at(-1)!, trainers[0]!, volume);
      for (const trainer of trainers) {
        const entries = valueOf(trainer, 'PYTHONPATH')?.split(':') ?? [];
        if (trainer.command?.slice(0, 4).join(' ') === 'python -m stepscope run') {
          // The hook is importable; `run` sets STEPSCOPE_AUTO and the start-up folder for what it starts.
          expect(entries, job.file).toContain(hook);
          ways.add('python -m stepscope run');
        } else {
          // Any command (torchrun and each rank it starts): the start-up file, found through PYTHONPATH,
          // instruments the script once it imports torch.
          expect(valueOf(trainer, 'STEPSCOPE_AUTO'), `${job.file}: the zero-code path by default`).toBe('1');
          expect(entries[0], job.file).toBe(`${hook}/stepscope/_boot`);
          expect(entries, job.file).toContain(hook);
          ways.add('STEPSCOPE_AUTO=1');
        }
      }
    }
    expect([...ways].sort()).toEqual(['STEPSCOPE_AUTO=1', 'python -m stepscope run']);
    // What the manifests point at is in the hook the init container copies from the image.
    expect(existsSync(path.join(ROOT, 'python-hook', 'stepscope', '_boot', 'sitecustomize.py'))).toBe(true);
    expect(existsSync(path.join(ROOT, 'python-hook', 'stepscope', '__main__.py'))).toBe(true);
    const readme = readFileSync(path.join(DIR, 'README.md'), 'utf8');
    expect(readme).toContain('STEPSCOPE_AUTO=1');
    expect(readme).toContain('python -m stepscope run');
  });

  it('are scraped by the PodMonitor, on the sidecar’s port, with the token', () => {
    const [monitor] = podMonitors;
    const endpoint = monitor!.spec.podMetricsEndpoints[0];
    expect(endpoint).toMatchObject({ port: 'stepscope', path: '/metrics' });
    // prometheus-operator's PodMetricsEndpoint: the Secret, in the PodMonitor's namespace, that the
    // Jobs' containers take their token from.
    const { sidecar } = pod(jobs[0]!);
    expect(endpoint.authorization).toEqual({ type: 'Bearer', credentials: tokenSecret(sidecar, jobs[0]!.file) });
    for (const job of jobs) {
      const labels = job.spec.template.metadata.labels as Record<string, string>;
      expect(labels, job.file).toMatchObject(monitor!.spec.selector.matchLabels);
      const annotations = job.spec.template.metadata.annotations as Record<string, string> | undefined;
      if (annotations?.['prometheus.io/scrape']) expect(annotations['prometheus.io/port']).toBe(String(PORT));
    }
  });
});

/** The Node versions the image is built on: its default (24) and the other LTS a NODE_IMAGE may give (22). */
const IMAGE_NODES = ['22', '24'];
/** NODE_OPTIONS as the image sets it, which a manifest's own replaces. */
const IMAGE_NODE_OPTIONS = imageEnvOf(dockerfile().stages.at(-1)!).get('NODE_OPTIONS') ?? '';
/**
 * What the sidecar of `job` would decide at start, on Node `major`, with `nodeOptions` in place of what
 * it declares; `soft`: its memory request also a soft limit, which Node then sizes its heap from (podman
 * kube play sets it so; a cluster sets the limit alone).
 */
function startUp(job: Manifest, major: string, { soft = false, nodeOptions }: { soft?: boolean; nodeOptions?: string } = {}) {
  const { sidecar } = pod(job);
  const limit = String(sidecar.resources!.limits!.memory!);
  const request = soft ? String(sidecar.resources!.requests!.memory!) : '';
  const options = nodeOptions ?? valueOf(sidecar, 'NODE_OPTIONS') ?? IMAGE_NODE_OPTIONS;
  const number = (name: string) => (valueOf(sidecar, name) === undefined ? undefined : Number(valueOf(sidecar, name)));
  const facts = { limitBytes: mib(limit) * 1024 * 1024, limitSource: `${job.file}: resources.limits.memory ${limit}`, heapBytes: measuredHeap(major, limit, options, request), heapFlag: heapFlag([], options) };
  return { facts, plan: planMemory(facts, { maxJobs: number('STEPSCOPE_MAX_JOBS'), maxRanksPerJob: number('STEPSCOPE_MAX_RANKS') }) };
}

/** The ranks a pod of `job` starts: torchrun's processes per node, else one. */
function ranksOf(job: Manifest): number {
  const perNode = pod(job).trainers.flatMap((t) => t.command ?? []).find((word) => word.startsWith('--nproc_per_node='));
  return perNode ? Number(perNode.split('=')[1]) : 1;
}

describe("the sidecar's start-up check on each manifest's memory limit and settings", () => {
  it.each(jobs.map((job) => [job.file, job] as const))('%s starts, and holds every rank its pod runs', (_file, job) => {
    for (const major of IMAGE_NODES) {
      for (const soft of [false, true]) {
        // planMemory throws, with the sidecar's own message, where the sidecar would refuse to start.
        const { facts, plan } = startUp(job, major, { soft });
        const where = `Node ${major}${soft ? ', the request a soft limit' : ''}: ${describePlan(plan, facts)}`;
        expect(plan.warning, where).toBeNull();
        expect(plan.maxJobs, where).toBeGreaterThanOrEqual(1);
        expect(plan.maxRanksPerJob, where).toBeGreaterThanOrEqual(ranksOf(job));
      }
    }
  });

  it('would have failed on what they set before: a 192 MiB old space under 256 MiB', () => {
    for (const job of jobs) expect(() => startUp(job, '24', { nodeOptions: '--max-old-space-size=192' }), job.file).toThrow(MemoryError);
  });

  it('are described in the README as the sidecar decides: what each limit holds, its log line, its refusal', () => {
    const readme = readFileSync(path.join(DIR, 'README.md'), 'utf8');
    const MiB = 1024 * 1024;
    const facts = (limit: string, options = IMAGE_NODE_OPTIONS) => ({
      limitBytes: mib(limit) * MiB,
      limitSource: '/sys/fs/cgroup/memory.max',
      heapBytes: measuredHeap('24', limit, options),
      heapFlag: heapFlag([], options),
    });
    const rows = [...readme.matchAll(/^\| (\d+(?:Mi|Gi))[^|]*\| (\d+) MiB \| (\d+) × (\d+) \|$/gm)];
    expect(rows.map((row) => row[1])).toEqual(['256Mi', '512Mi', '1Gi']);
    for (const [, limit, heap, jobCount, ranks] of rows) {
      const plan = planMemory(facts(limit!), {});
      expect([Math.floor(facts(limit!).heapBytes / MiB), plan.maxJobs, plan.maxRanksPerJob], limit).toEqual([Number(heap), Number(jobCount), Number(ranks)]);
    }
    expect(readme).toContain(describePlan(planMemory(facts('256Mi'), {}), facts('256Mi')));
    const refusal = (() => {
      try {
        planMemory(facts('256Mi', '--max-old-space-size=192'), {});
        return 'started';
      } catch (error) {
        return (error as Error).message;
      }
    })();
    expect(readme).toContain(`stepscope: ${refusal}`);
  });
});

describe('dcgm-exporter counters (dcgm-exporter-counters.yaml)', () => {
  const [configMap] = configMaps;
  const csv = readFileSync(path.join(DIR, 'dcgm-exporter-counters.csv'), 'utf8');
  /** As dcgm-exporter reads it: encoding/csv with '#' comments, three fields, spaces trimmed. */
  const records = csv
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('#'))
    .map((line) => line.split(',').map((field) => field.trim()));
  const fields = records.map(([field]) => field!);

  it('hold the CSV beside it under the keys the GPU Operator mounts and dcgm-exporter -m reads', () => {
    expect(configMap!.metadata.name).toBe('stepscope-dcgm-counters');
    const data = (configMap as unknown as { data: Record<string, string> }).data;
    expect(data['dcgm-metrics.csv']).toBe(csv);
    expect(data.metrics).toBe(csv);
  });

  it('are records dcgm-exporter accepts: three fields, a known metric type, every field once', () => {
    for (const record of records) {
      expect(record, record.join(',')).toHaveLength(3);
      expect(['gauge', 'counter', 'label'], record.join(',')).toContain(record[1]);
      expect(record[0]).toMatch(/^DCGM_FI_[A-Z0-9_]+$/);
    }
    expect(new Set(fields).size).toBe(fields.length);
  });

  it('add what throttling is judged from, and the profiling fields, to the exporter’s defaults', () => {
    const defaults = [
      'DCGM_FI_DEV_SM_CLOCK',
      'DCGM_FI_DEV_MEM_CLOCK',
      'DCGM_FI_DEV_GPU_TEMP',
      'DCGM_FI_DEV_POWER_USAGE',
      'DCGM_FI_DEV_GPU_UTIL',
      'DCGM_FI_DEV_MEM_COPY_UTIL',
      'DCGM_FI_DEV_FB_FREE',
      'DCGM_FI_DEV_FB_USED',
      'DCGM_FI_DEV_FB_RESERVED',
      'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
      'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE',
      'DCGM_FI_PROF_DRAM_ACTIVE',
    ];
    const added = ['DCGM_FI_DEV_CLOCK_THROTTLE_REASONS', 'DCGM_FI_DEV_MAX_SM_CLOCK', 'DCGM_FI_DEV_POWER_MGMT_LIMIT', 'DCGM_FI_PROF_SM_ACTIVE', 'DCGM_FI_PROF_SM_OCCUPANCY'];
    expect(fields).toEqual(expect.arrayContaining([...defaults, ...added]));
    // Every field stepscope reads from it is one the parser knows, under the name it is exported as.
    for (const field of fields.filter((f) => DCGM_METRICS.includes(canonicalMetric(f)!))) expect(canonicalMetric(field), field).toBe(field);
  });

  it('make throttling checkable: an exporter serving them leaves no signal missing', () => {
    // What such an exporter serves for one GPU, one series per counter, in its label set.
    const labels = 'gpu="0",UUID="GPU-a1c5e7f9-3b2d-4e6a-8c0f-5d9b7a3e1c48",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"';
    const value: Record<string, string> = { DCGM_FI_DEV_CLOCK_THROTTLE_REASONS: '36', DCGM_FI_DEV_MAX_SM_CLOCK: '1980', DCGM_FI_DEV_POWER_MGMT_LIMIT: '700.000000' };
    const text = records.filter(([, type]) => type !== 'label').map(([field]) => `${field}{${labels}} ${value[field!] ?? '1'}`).join('\n');
    const [gpu] = parseDcgmMetrics(text, {}, 0);
    expect(gpu).toMatchObject({ throttleReasons: 36, smClockMaxMHz: 1980, powerLimitW: 700 });
    expect(throttleUnchecked({ samples: 1, reasonSamples: 1, smClockMaxMHz: gpu!.smClockMaxMHz, powerLimitW: gpu!.powerLimitW })).toBeNull();
  });

  it('are named where the exporter is configured and in the README, with the commands that wire them', () => {
    const readme = readFileSync(path.join(DIR, 'README.md'), 'utf8');
    expect(readme).toContain('kubectl apply -n gpu-operator -f dcgm-exporter-counters.yaml');
    expect(readme).toContain('--set dcgmExporter.config.name=stepscope-dcgm-counters');
    expect(readme).toContain('--set dcgmExporter.env[0].value=/etc/dcgm-exporter/dcgm-metrics.csv');
    expect(readme).toContain('--set-file customMetrics=dcgm-exporter-counters.csv');
    const dcgmJob = jobs.find((job) => pod(job).sidecar.env?.some((e) => e.name === 'STEPSCOPE_DCGM_URL'))!;
    expect(readFileSync(path.join(DIR, dcgmJob.file), 'utf8')).toContain('dcgm-exporter-counters.yaml');
  });
});
