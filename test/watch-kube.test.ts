import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runs, track } from './support/children.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { CLI, ROOT, startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * `stepscope watch --selector`: a job of two pods, each with its sidecar (two real sidecars on
 * loopback), found through kubectl (a stand-in that lists the pods and "forwards" to the sidecars)
 * and shown as one job.
 */

const FAKE_KUBECTL = path.join(ROOT, 'test', 'support', 'fake-kubectl.mjs');

const cleanups = cleanupList();

async function rank(sidecar: RunningSidecar, rank: number): Promise<void> {
  const hook = await TestHook.connect(sidecar.ingestUrl);
  cleanups.push(() => hook.close());
  hook.send(hello({ job: 'ddp', rank, local_rank: 0, world_size: 2, session: `ddp-${rank}`, host: `pod-${rank}`, clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: 2_000_000_000 } }));
  await hook.next((m) => m.type === 'welcome');
  hook.send(steps(range(1, 40).map((seq) => row({ seq, durMs: 20 }))));
  await hook.next((m) => m.type === 'ack' && m.ack >= 40);
}

describe('stepscope watch --selector', () => {
  it("finds the job's pods with kubectl, reaches each sidecar through port-forward, shows one job, and stops the forwards when it ends", async () => {
    const sidecars = await Promise.all([startSidecar(['--gpu-source', 'none']), startSidecar(['--gpu-source', 'none'])]);
    for (const sidecar of sidecars) cleanups.push(() => sidecar.stop('SIGKILL'));
    await Promise.all(sidecars.map((sidecar, i) => rank(sidecar, i)));
    const dir = tempDir();
    const pods = { items: ['train-1', 'train-0'].map((name) => ({ metadata: { name, namespace: 'ml' }, status: { phase: 'Running' } })) };
    const env = {
      ...process.env,
      FAKE_KUBECTL_DIR: dir,
      FAKE_KUBECTL_PODS: JSON.stringify({ items: [...pods.items, { metadata: { name: 'train-old' }, status: { phase: 'Succeeded' } }] }),
      FAKE_KUBECTL_PORTS: JSON.stringify({ 'train-0': sidecars[0]!.port, 'train-1': sidecars[1]!.port }),
    };
    const viewer = track(spawn(process.execPath, [CLI, 'watch', '--plain', '--selector', 'job-name=train', '--namespace', 'ml', '--kubectl', FAKE_KUBECTL], { env, stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
    cleanups.push(() => void viewer.kill('SIGKILL'));
    let out = '';
    viewer.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    const exited = new Promise<number | null>((resolve) => viewer.once('exit', (code) => resolve(code)));
    // Both ranks, from the two sidecars, in one line: the job seen as one.
    await waitFor(() => out.split('\n').find((line) => line.includes('job=ddp') && /ranks=0:\S+,1:\S+/.test(line)), 15_000);
    const forwards = ['train-0', 'train-1'].map((pod) => Number(readFileSync(path.join(dir, `${pod}.pid`), 'utf8')));
    viewer.kill('SIGTERM');
    expect(await exited).toBe(0);
    await waitFor(() => forwards.every((pid) => !runs(pid)), 5_000);
  });

  it('says so, and exits 1, when no pod matches', async () => {
    const viewer = track(spawn(process.execPath, [CLI, 'watch', '--plain', '--selector', 'job-name=none', '--kubectl', FAKE_KUBECTL], { env: { ...process.env, FAKE_KUBECTL_DIR: tempDir() }, stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
    let err = '';
    viewer.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
    const code = await new Promise<number | null>((resolve) => viewer.once('exit', (c) => resolve(c)));
    expect(code).toBe(1);
    expect(err.trim()).toBe('stepscope: no running pod matches --selector job-name=none');
  });
});

describe('stepscope watch --selector stops every port-forward it started', () => {
  const pods = (...names: string[]) => JSON.stringify({ items: names.map((name) => ({ metadata: { name }, status: { phase: 'Running' } })) });
  const forwardPids = (dir: string, names: string[]) => names.map((pod) => Number(readFileSync(path.join(dir, `${pod}.pid`), 'utf8')));
  function viewer(dir: string, env: Record<string, string>, plain = true) {
    const child = track(spawn(process.execPath, [CLI, 'watch', ...(plain ? ['--plain'] : []), '--selector', 'job-name=train', '--kubectl', FAKE_KUBECTL], { env: { ...process.env, FAKE_KUBECTL_DIR: dir, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }), 'viewer');
    cleanups.push(() => void child.kill('SIGKILL'));
    let err = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    return { child, exited, err: () => err };
  }

  it('on an error after they started (kubectl forwarding from a port that is none): exits 1, saying why', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const dir = tempDir();
    const run = viewer(dir, { FAKE_KUBECTL_PODS: pods('train-0', 'train-1'), FAKE_KUBECTL_PORTS: JSON.stringify({ 'train-0': 99_999, 'train-1': sidecar.port }) });
    expect(await run.exited).toBe(1);
    expect(run.err()).toMatch(/port-forward pod\/train-0: forwards from port 99999, which is no port/);
    const forwards = forwardPids(dir, ['train-0', 'train-1']);
    await waitFor(() => forwards.every((pid) => !runs(pid)) || null, 5_000);
  });

  it('on a signal while they are still starting', async () => {
    const dir = tempDir();
    const run = viewer(dir, { FAKE_KUBECTL_PODS: pods('train-0'), FAKE_KUBECTL_PORTS: JSON.stringify({ 'train-0': 1 }), FAKE_KUBECTL_DELAY_MS: '60000' });
    const [forward] = await waitFor(() => (existsSync(path.join(dir, 'train-0.pid')) ? forwardPids(dir, ['train-0']) : null), 10_000);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(1);
    // CI once saw this forward still there 45 s after the viewer exited; if it recurs, say what it is.
    const what = () => (existsSync(`/proc/${forward}/stat`) ? readFileSync(`/proc/${forward}/stat`, 'utf8').trim() : 'gone');
    await waitFor(() => !runs(forward!) || null, 5_000).catch((error: Error) => Promise.reject(new Error(`${error.message}; the port-forward: ${what()}`)));
  });

  it('on a signal while kubectl still lists the pods: none is forwarded, and the listing is stopped', async () => {
    const dir = tempDir();
    const run = viewer(dir, { FAKE_KUBECTL_PODS: pods('train-0'), FAKE_KUBECTL_PORTS: JSON.stringify({ 'train-0': 1 }), FAKE_KUBECTL_GET_DELAY_MS: '60000' });
    const get = await waitFor(() => (existsSync(path.join(dir, 'get.pid')) ? Number(readFileSync(path.join(dir, 'get.pid'), 'utf8')) : null), 10_000);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(1);
    // Stopped by the signal, not by kubectl's 30 s timeout.
    expect(run.err()).toMatch(/get pods --selector job-name=train: The operation was aborted/);
    await waitFor(() => !runs(get) || null, 5_000);
    expect(existsSync(path.join(dir, 'train-0.pid')), 'no port-forward started').toBe(false);
  });

  it('when the viewer ends on its own (its reader went away)', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none']);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    const dir = tempDir();
    const run = viewer(dir, { FAKE_KUBECTL_PODS: pods('train-0'), FAKE_KUBECTL_PORTS: JSON.stringify({ 'train-0': sidecar.port }) });
    await new Promise((resolve) => run.child.stdout!.once('data', resolve));
    const [forward] = forwardPids(dir, ['train-0']);
    run.child.stdout!.destroy();
    expect(await run.exited).toBe(0);
    await waitFor(() => !runs(forward!) || null, 5_000);
  });
});
