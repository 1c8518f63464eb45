import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { track } from './support/children.js';
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
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    await waitFor(() => forwards.every((pid) => !alive(pid)), 5_000);
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
