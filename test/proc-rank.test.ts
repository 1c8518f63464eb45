import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parsePidState, parseWchan } from '../src/counters/proc-pid.js';
import { readRankProcess } from '../src/counters/proc-rank.js';
import { tempDir } from './support/sidecar.js';

/**
 * A silent rank's process as the sidecar's /proc shows it (src/counters/proc-rank.ts): read only where
 * it is the rank's own process — the same host, the pid's start time the one its hook gave — and the
 * reason said plainly everywhere else. A stand-in procfs with literal lines of proc(5)'s format.
 */

const root = tempDir('stepscope-proc-rank-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

// A python3 process in R state, 4150 + 262 ticks of CPU, started at tick 825771 after boot.
const STAT = '4981 (python3) R 4950 4950 4912 0 -1 4194304 61012 0 0 0 4150 262 0 0 20 0 3 0 825771 1530331136 65831 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0';

function proc(pid: number, stat: string, wchan: string | null) {
  mkdirSync(path.join(root, String(pid)), { recursive: true });
  writeFileSync(path.join(root, String(pid), 'stat'), stat + '\n');
  if (wchan !== null) writeFileSync(path.join(root, String(pid), 'wchan'), wchan);
}

describe("a rank's process in /proc", () => {
  proc(4981, STAT, '0');
  proc(4982, STAT.replace('4981 (python3) R', '4982 (python3) D'), 'nfs_wait_bit_killable');
  const options = { procRoot: root, hostname: 'node-a' };

  it('reads state, wchan and CPU of the process whose start time its hook gave', async () => {
    expect(await readRankProcess({ pid: 4981, host: 'node-a', procStart: 825771 }, options)).toEqual({ visible: true, state: 'R', wchan: null, cpu_s: 44.12, why: null });
    expect(await readRankProcess({ pid: 4982, host: 'node-a', procStart: 825771 }, options)).toMatchObject({ visible: true, state: 'D', wchan: 'nfs_wait_bit_killable' });
  });

  it('says why it cannot: another host, another process with that pid, none, an older hook', async () => {
    expect((await readRankProcess({ pid: 4981, host: 'node-b', procStart: 825771 }, options)).why).toBe('it runs on node-b, the sidecar on node-a: only the sidecar of its own node can read its /proc');
    expect((await readRankProcess({ pid: 4981, host: 'node-a', procStart: 1 }, options)).why).toBe(
      "pid 4981 here is another process (started at tick 825771, the rank's at 1): the pod does not share its process namespace",
    );
    expect((await readRankProcess({ pid: 77, host: 'node-a', procStart: 1 }, options)).why).toMatch(/^no process 77 in the sidecar's pid namespace: the pod does not share its process namespace \(shareProcessNamespace: true\)/);
    expect(await readRankProcess({ pid: 4981, host: 'node-a', procStart: null }, options)).toEqual({ visible: false, state: null, wchan: null, cpu_s: null, why: 'its hook gave no process start time to check the pid against (an older hook)' });
  });

  it('parses the state after a comm that holds spaces and parentheses, and an empty wchan as none', () => {
    expect(parsePidState('12 (my (odd) proc) S 1 12 12 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 99 0 0')).toMatchObject({ pid: 12, name: 'my (odd) proc', state: 'S', cpuTicks: 10, startTicks: 99 });
    expect(parsePidState('garbage')).toBeNull();
    expect([parseWchan('0'), parseWchan(''), parseWchan(null), parseWchan('do_epoll_wait\n')]).toEqual([null, null, null, 'do_epoll_wait']);
  });
});
