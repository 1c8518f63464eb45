import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { memoryCgroupDirs, parseCgroupMounts, parseLimitFile, parseProcCgroup, readMemoryLimit } from '../src/counters/cgroup-memory.js';
import { BESIDE_HEAP_BYTES, describePlan, heapFlag, MemoryError, planMemory, RANK_BYTES, type MemoryFacts } from '../src/ingest/memory-budget.js';
import { DEFAULT_LIMITS } from '../src/ingest/limits.js';
import { measuredHeap } from './support/node-heap.js';
import { CLI, ROOT, startSidecar } from './support/sidecar.js';

const MiB = 1024 * 1024;
const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'cgroup');

/** Node 24's heap under a memory limit, as measured (test/fixtures/node-heap.json). */
const HEAP = {
  percent50In128: measuredHeap('24', '128Mi', '--max-old-space-size-percentage=50'),
  percent50In256: measuredHeap('24', '256Mi', '--max-old-space-size-percentage=50'),
  percent50In1G: measuredHeap('24', '1Gi', '--max-old-space-size-percentage=50'),
  old192In256: measuredHeap('24', '256Mi', '--max-old-space-size=192'),
  /** No flag: V8's floor, above the limit itself. */
  defaultIn256: measuredHeap('24', '256Mi', ''),
};
const PERCENT = 'NODE_OPTIONS=--max-old-space-size-percentage=50';

const facts = (limitMiB: number | null, heapBytes: number, flag: string | null): MemoryFacts => ({
  limitBytes: limitMiB === null ? null : limitMiB * MiB,
  limitSource: 'test',
  heapBytes,
  heapFlag: flag,
});
const refusal = (run: () => unknown): string => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(MemoryError);
    return (error as Error).message;
  }
  throw new Error('not refused');
};

describe("the container's memory limit, read from the cgroup", () => {
  it.each([
    ['podman-v1-256m', 256 * MiB, '/sys/fs/cgroup/memory/memory.limit_in_bytes'],
    ['podman-v1-unlimited', null, '/sys/fs/cgroup/memory/memory.limit_in_bytes: no limit'],
    ['podman-v1-pod-limit', 512 * MiB, '/sys/fs/cgroup/memory/memory.stat hierarchical_memory_limit'],
    ['vm-v1-hybrid', null, '/sys/fs/cgroup/memory/sessions/2f0cc2c5ac2134ffe32d8ab6280e4a2c/memory.limit_in_bytes: no limit'],
    ['k8s-v2-cgroupns-256m', 256 * MiB, '/sys/fs/cgroup/memory.max'],
    ['k8s-v2-hostns-pod-limit', 512 * MiB, '/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7f3c2a9e_5d41_4b8e_9a0c_1e2f3a4b5c6d.slice/memory.max'],
    ['v2-unlimited', null, '/sys/fs/cgroup/memory.max: no limit'],
  ])('%s', async (fixture, bytes, source) => {
    expect(await readMemoryLimit(path.join(FIXTURES, fixture))).toEqual({ bytes, source });
  });

  it('follows the mount: a container sees its own cgroup at the mount point, a host the whole tree', () => {
    const container = memoryCgroupDirs(
      parseProcCgroup('4:memory:/libpod_parent/libpod-ab\n0::/libpod_parent/libpod-ab\n'),
      parseCgroupMounts('95 91 0:32 /libpod_parent/libpod-ab /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n'),
    );
    expect(container).toEqual([{ version: 1, dirs: ['/sys/fs/cgroup/memory'] }]);
    const host = memoryCgroupDirs(parseProcCgroup('0::/a/b\n'), parseCgroupMounts('30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n'));
    expect(host).toEqual([{ version: 2, dirs: ['/sys/fs/cgroup/a/b', '/sys/fs/cgroup/a', '/sys/fs/cgroup'] }]);
    // A mount point with a space, as mountinfo escapes it.
    expect(parseCgroupMounts('30 23 0:26 / /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n')[0]!.mountPoint).toBe('/sys/fs/cgroup x');
  });

  it('reads "max" and v1\'s page-rounded 2^63 as no limit', () => {
    expect(parseLimitFile('max\n')).toBeNull();
    expect(parseLimitFile('9223372036854771712\n')).toBeNull();
    expect(parseLimitFile('268435456\n')).toBe(268_435_456);
    expect(parseLimitFile('')).toBeNull();
  });

  it('says so where there is no procfs', async () => {
    expect(await readMemoryLimit(path.join(FIXTURES, 'nowhere'))).toEqual({ bytes: null, source: 'no /proc/self/cgroup or mountinfo: not Linux, or no procfs' });
  });
});

describe('the heap flag in effect', () => {
  it('from NODE_OPTIONS or node\'s own arguments; the percentage wins, as in Node', () => {
    expect(heapFlag([], '--max-old-space-size-percentage=50')).toBe(PERCENT);
    expect(heapFlag(['--max-old-space-size=512'], undefined)).toBe('node --max-old-space-size=512');
    expect(heapFlag([], '--enable-source-maps --max_old_space_size=192')).toBe('NODE_OPTIONS=--max_old_space_size=192');
    expect(heapFlag(['--max-old-space-size-percentage=25'], '--max-old-space-size=512')).toBe('node --max-old-space-size-percentage=25');
    expect(heapFlag([], '--enable-source-maps')).toBeNull();
    expect(heapFlag([], undefined)).toBeNull();
  });
});

describe('jobs and ranks sized to the memory', () => {
  it('the image in a 256 MiB container: a heap of half the limit, the default jobs lowered to one of 64 ranks', () => {
    const given = facts(256, HEAP.percent50In256, PERCENT);
    const plan = planMemory(given, {});
    expect(plan).toEqual({ maxJobs: 1, maxRanksPerJob: 64, budgetBytes: Math.floor(HEAP.percent50In256 / 2), roomBytes: HEAP.percent50In256, lowered: true, warning: null });
    expect(describePlan(plan, given)).toBe(
      `memory: up to 1 job × 64 ranks (lowered from 4 × 64 to fit), 65 MiB for them: half of a 131 MiB heap (${PERCENT}), under a 256 MiB memory limit (test)`,
    );
  });

  it('the defaults where there is room for them: 1 GiB, or no container limit', () => {
    expect(planMemory(facts(1024, HEAP.percent50In1G, PERCENT), {})).toMatchObject({ maxJobs: 4, maxRanksPerJob: 64, lowered: false });
    expect(planMemory(facts(null, 4144 * MiB, null), {})).toMatchObject({ maxJobs: 4, maxRanksPerJob: 64, lowered: false, warning: null });
    expect(DEFAULT_LIMITS.maxJobs * DEFAULT_LIMITS.maxRanksPerJob * RANK_BYTES).toBe(256 * MiB);
  });

  it("Node's default heap, above what the container leaves: held to what it leaves, and said", () => {
    const plan = planMemory(facts(256, HEAP.defaultIn256, null), {});
    expect(plan).toMatchObject({ maxJobs: 1, maxRanksPerJob: 64, roomBytes: 160 * MiB, budgetBytes: 80 * MiB });
    expect(plan.warning).toBe(
      "Node's default heap (259 MiB) is larger than the container's 256 MiB memory limit leaves 160 MiB beside the 96 MiB Node needs outside its heap: what the sidecar holds is sized to 160 MiB; set NODE_OPTIONS=\"--max-old-space-size-percentage=50 --max-semi-space-size=8\" for Node to collect garbage within it too",
    );
  });

  it('refuses a heap flag that gives Node more than the container leaves it, saying what to set', () => {
    // What every shipped manifest had: the "no sidecar".
    expect(refusal(() => planMemory(facts(256, HEAP.old192In256, 'NODE_OPTIONS=--max-old-space-size=192'), {}))).toBe(
      "NODE_OPTIONS=--max-old-space-size=192 gives Node a 195 MiB heap, more than the container's 256 MiB memory limit leaves 160 MiB beside the 96 MiB Node needs outside its heap: set NODE_OPTIONS=\"--max-old-space-size-percentage=50 --max-semi-space-size=8\" (a heap of half the limit, as the image sets it), or raise resources.limits.memory to 304Mi",
    );
    // The image's own flag in a container too small for it: only the limit can change.
    expect(refusal(() => planMemory(facts(128, HEAP.percent50In128, PERCENT), {}))).toBe(
      `${PERCENT} gives Node a 67 MiB heap, more than the container's 128 MiB memory limit leaves 32 MiB beside the 96 MiB Node needs outside its heap: raise resources.limits.memory to 208Mi`,
    );
    expect(refusal(() => planMemory(facts(64, 40 * MiB, PERCENT), {}))).toMatch(/^the container's 64 MiB memory limit leaves 0 MiB beside the 96 MiB Node needs outside its heap, too little for one rank: raise resources.limits.memory to \d+Mi \(one job of 64 ranks\)$/);
  });

  it('keeps ranks before jobs, and lowers only what was not set', () => {
    expect(planMemory(facts(256, HEAP.percent50In256, PERCENT), { maxJobs: 4 })).toMatchObject({ maxJobs: 4, maxRanksPerJob: 16, lowered: true });
    expect(planMemory(facts(256, HEAP.percent50In256, PERCENT), { maxRanksPerJob: 8 })).toMatchObject({ maxJobs: 4, maxRanksPerJob: 8, lowered: false });
    expect(planMemory(facts(256, HEAP.percent50In256, PERCENT), { maxJobs: 1, maxRanksPerJob: 65 })).toMatchObject({ maxJobs: 1, maxRanksPerJob: 65, lowered: false });
  });

  it('refuses limits set that cannot fit, with the arithmetic, the values that fit and the memory that would', () => {
    const small = facts(256, HEAP.percent50In256, PERCENT);
    const message = refusal(() => planMemory(small, { maxJobs: 4, maxRanksPerJob: 64 }));
    expect(message).toBe(
      '--max-jobs 4 × --max-ranks 64 × 1 MiB per rank = 256 MiB, more than the 65 MiB the sidecar keeps for ranks (half of the 131 MiB of heap its 256 MiB memory limit allows): ' +
        'lower --max-ranks to 16 (STEPSCOPE_MAX_RANKS) or --max-jobs to 1 (STEPSCOPE_MAX_JOBS), or leave --max-jobs and --max-ranks unset to take what fits, or raise resources.limits.memory to 1024Mi',
    );
    // The memory it names holds them, the heap sized as the image sizes it (half, plus its young generation).
    const limitMiB = Number(/to (\d+)Mi$/.exec(message)![1]);
    expect(planMemory(facts(limitMiB, (limitMiB / 2) * MiB + 3 * MiB, PERCENT), { maxJobs: 4, maxRanksPerJob: 64 })).toMatchObject({ maxJobs: 4, maxRanksPerJob: 64 });
    expect(refusal(() => planMemory(small, { maxRanksPerJob: 128 }))).toBe(
      'one job × --max-ranks 128 × 1 MiB per rank = 128 MiB, more than the 65 MiB the sidecar keeps for ranks (half of the 131 MiB of heap its 256 MiB memory limit allows): ' +
        'lower --max-ranks to 65 (STEPSCOPE_MAX_RANKS), or leave --max-ranks unset to take what fits, or raise resources.limits.memory to 512Mi',
    );
    expect(refusal(() => planMemory(facts(null, 4096 * MiB, null), { maxJobs: 64, maxRanksPerJob: 1024 }))).toBe(
      '--max-jobs 64 × --max-ranks 1024 × 1 MiB per rank = 65536 MiB, more than the 2048 MiB the sidecar keeps for ranks (half of its 4096 MiB heap): ' +
        'lower --max-ranks to 32 (STEPSCOPE_MAX_RANKS) or --max-jobs to 2 (STEPSCOPE_MAX_JOBS), or leave --max-jobs and --max-ranks unset to take what fits, or raise the heap to 131072 MiB (NODE_OPTIONS=--max-old-space-size=131072)',
    );
  });

  it('leaves the probes and Node itself room beside the heap', () => {
    expect(BESIDE_HEAP_BYTES).toBe(96 * MiB);
  });
});

describe('the sidecar at start', () => {
  it('refuses limits that cannot fit, in one line', () => {
    const run = spawnSync(process.execPath, [CLI, 'serve', '--port', '0', '--gpu-source', 'none', '--max-jobs', '10000', '--max-ranks', '65536'], { encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(1);
    expect(run.stderr.trim()).toMatch(/^stepscope: --max-jobs 10000 × --max-ranks 65536 × 1 MiB per rank = 655360000 MiB, more than the \d+ MiB the sidecar keeps for ranks/);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('logs what it sized itself to, and from what, before it listens', async () => {
    const sidecar = await startSidecar(['--gpu-source', 'none', '--max-ranks', '8'], { NODE_OPTIONS: '--max-old-space-size=300'});
    try {
      const line = sidecar.logs.find((l) => l.msg.startsWith('memory: '))!;
      expect(sidecar.logs.indexOf(line)).toBeLessThan(sidecar.logs.findIndex((l) => l.msg === 'listening'));
      // This machine's cgroup may or may not have a limit: the line says which, and the heap flag given.
      expect(line.msg).toMatch(/^memory: up to 4 jobs × 8 ranks, \d+ MiB for them: half of .*heap \(NODE_OPTIONS=--max-old-space-size=300\)(, under a \d+ MiB memory limit|; no container memory limit) \(.+\)$/);
      expect(line).toMatchObject({ heap_flag: 'NODE_OPTIONS=--max-old-space-size=300', max_jobs: 4, max_ranks: 8 });
    } finally {
      await sidecar.stop();
    }
  });
});
