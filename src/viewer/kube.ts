import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { Type, type Static } from '@sinclair/typebox';
import { parseInput } from '../protocol/parse.js';

/**
 * The sidecars of a job of many pods, found with the user's own kubectl: the pods a label selector
 * picks, each reached through `kubectl port-forward` (the pods' addresses are seldom reachable from a
 * laptop), so that `stepscope watch --selector …` shows the job as one.
 */

export interface KubeOptions {
  selector: string;
  namespace?: string;
  context?: string;
  /** The kubectl to run (default `kubectl` on PATH). */
  kubectl?: string;
  /** The sidecar's port in each pod (default 9477). */
  port?: number;
  /** How long a port-forward may take to start. */
  timeoutMs?: number;
  /** Gives up (stopping every port-forward started) when it aborts: the viewer was told to stop. */
  signal?: AbortSignal;
}

/** What is read of `kubectl get pods -o json`: checked, as anything that comes from outside. */
const PodListSchema = Type.Object({
  items: Type.Array(
    Type.Object({
      metadata: Type.Object({ name: Type.String({ minLength: 1 }), namespace: Type.Optional(Type.String()) }),
      status: Type.Optional(Type.Object({ phase: Type.Optional(Type.String()) })),
    }),
  ),
});
type PodList = Static<typeof PodListSchema>;

export interface KubeTargets {
  /** ws://127.0.0.1:PORT, one per pod, in pod-name order. */
  targets: string[];
  pods: string[];
  /** Stops the port-forwards. */
  close(): void;
}

const scope = (o: KubeOptions) => [...(o.context ? ['--context', o.context] : []), ...(o.namespace ? ['--namespace', o.namespace] : [])];

/** The running pods the selector picks, by name. */
export async function selectPods(options: KubeOptions): Promise<string[]> {
  const kubectl = options.kubectl ?? 'kubectl';
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(kubectl, ['get', 'pods', '--selector', options.selector, '--output', 'json', ...scope(options)], { maxBuffer: 64 * 1024 * 1024, timeout: 30_000, ...(options.signal ? { signal: options.signal } : {}) }, (error, out, err) => {
      if (error) reject(new Error(`${kubectl} get pods --selector ${options.selector}: ${(err || error.message).trim().split('\n').at(-1)}`));
      else resolve(out);
    }),
  );
  let list: PodList;
  try {
    list = parseInput(PodListSchema, JSON.parse(stdout), 'pods');
  } catch (error) {
    throw new Error(`${kubectl} get pods: not a pod list (${(error as Error).message})`);
  }
  return list.items
    .filter((pod) => pod.status?.phase === undefined || pod.status.phase === 'Running')
    .map((pod) => pod.metadata.name)
    .sort();
}

/**
 * Every port-forward this process started and has not stopped: stopped, whatever way the process
 * leaves (an error thrown anywhere, process.exit), so that none outlives the viewer.
 */
const children = new Set<ChildProcess>();
const stopChild = (child: ChildProcess) => {
  children.delete(child);
  if (children.size === 0) process.off('exit', stopAll);
  if (child.exitCode === null && child.signalCode === null) child.kill();
};
const stopAll = () => [...children].forEach(stopChild);

/** `kubectl port-forward pod/NAME :PORT`, resolved with the local port once it forwards. */
function portForward(pod: string, options: KubeOptions): Promise<{ port: number; child: ChildProcess }> {
  const kubectl = options.kubectl ?? 'kubectl';
  // An abort listener added to a signal already aborted never fires: none is started then.
  if (options.signal?.aborted) return Promise.reject(new Error(`${kubectl} port-forward pod/${pod}: stopped before it started`));
  const child = spawn(kubectl, ['port-forward', `pod/${pod}`, `:${options.port ?? 9477}`, '--address', '127.0.0.1', ...scope(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
  if (children.size === 0) process.on('exit', stopAll);
  children.add(child);
  return new Promise((resolve, reject) => {
    let said = '';
    const fail = (why: string) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', aborted);
      stopChild(child);
      reject(new Error(`${kubectl} port-forward pod/${pod}: ${why}`));
    };
    const aborted = () => fail('stopped before it forwarded');
    options.signal?.addEventListener('abort', aborted, { once: true });
    const timer = setTimeout(() => fail('no forwarding in time'), options.timeoutMs ?? 15_000);
    child.on('error', (error) => fail(error.message));
    child.on('exit', (code) => fail(`exited ${code}: ${said.trim().split('\n').at(-1) ?? ''}`));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (said += chunk));
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      said += chunk;
      // "Forwarding from 127.0.0.1:40123 -> 9477"
      const match = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(said);
      if (!match) return;
      const port = Number(match[1]);
      if (!(port >= 1 && port <= 65_535)) {
        fail(`forwards from port ${match[1]}, which is no port`);
        return;
      }
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', aborted);
      child.removeAllListeners('exit');
      resolve({ port, child });
    });
  });
}

/** A sidecar address per pod the selector picks, each through its own port-forward. */
export async function kubeTargets(options: KubeOptions): Promise<KubeTargets> {
  const pods = await selectPods(options);
  if (pods.length === 0) throw new Error(`no running pod matches --selector ${options.selector}${options.namespace ? ` in ${options.namespace}` : ''}`);
  const started = await Promise.allSettled(pods.map((pod) => portForward(pod, options)));
  const forwards = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const close = () => forwards.forEach((forward) => stopChild(forward.child));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed || options.signal?.aborted) {
    close();
    throw failed ? (failed.reason as Error) : new Error('stopped before every port-forward was up');
  }
  return { targets: forwards.map((forward) => `ws://127.0.0.1:${forward.port}`), pods, close };
}
