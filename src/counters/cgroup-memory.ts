import { readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The memory limit of the cgroup this process runs in (a container's `resources.limits.memory`),
 * from cgroup v2's `memory.max` or v1's `memory.limit_in_bytes`. Found as the kernel says, not by a
 * fixed path: /proc/self/cgroup names this process's cgroup, /proc/self/mountinfo where each
 * hierarchy is mounted and which of its directories the mount shows (a container without a cgroup
 * namespace sees only its own directory, at the mount point). Node's process.constrainedMemory()
 * is not used: Node 20, 22 and 24 all answer 2^64 where there is no limit (measured on cgroup v1),
 * and none says where the figure came from.
 */

export interface MemoryLimit {
  /** The tightest limit over the cgroup and its visible ancestors; null: none. */
  bytes: number | null;
  /** The file it was read from, or what was looked at when there is none. */
  source: string;
}

interface CgroupEntry {
  controllers: string[];
  path: string;
}

interface CgroupMount {
  version: 1 | 2;
  root: string;
  mountPoint: string;
  controllers: string[];
}

/** /proc/self/cgroup: `hierarchy-ID:controller-list:cgroup-path`, v2's as `0::path`. */
export function parseProcCgroup(text: string): CgroupEntry[] {
  return text.split('\n').flatMap((line) => {
    const match = /^(\d+):([^:]*):(.+)$/.exec(line.trim());
    return match ? [{ controllers: match[2] ? match[2].split(',') : [], path: match[3]! }] : [];
  });
}

/** Octal escapes as mountinfo writes spaces and the like in paths. */
const unescape = (field: string) => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));

/** The cgroup mounts of /proc/self/mountinfo (proc(5)): root and mount point, then after `-` the type and super options. */
export function parseCgroupMounts(text: string): CgroupMount[] {
  return text.split('\n').flatMap((line) => {
    const [left, right] = line.split(' - ');
    if (!left || !right) return [];
    const fields = left.split(' ');
    const [fsType, , superOptions = ''] = right.split(' ');
    if ((fsType !== 'cgroup' && fsType !== 'cgroup2') || fields.length < 5) return [];
    return [{ version: fsType === 'cgroup2' ? 2 : 1, root: unescape(fields[3]!), mountPoint: unescape(fields[4]!), controllers: superOptions.split(',') }];
  });
}

/**
 * The directories to read a memory limit from, the process's own first, then each ancestor the
 * mount shows (a pod's limit may sit on the pod's cgroup above the container's).
 */
export function memoryCgroupDirs(cgroups: CgroupEntry[], mounts: CgroupMount[]): Array<{ version: 1 | 2; dirs: string[] }> {
  const found: Array<{ version: 1 | 2; dirs: string[] }> = [];
  for (const mount of mounts) {
    const entry = mount.version === 2 ? cgroups.find((c) => c.controllers.length === 0) : cgroups.find((c) => c.controllers.includes('memory'));
    if (!entry || (mount.version === 1 && !mount.controllers.includes('memory'))) continue;
    // A cgroup outside what the mount shows (moved after a namespace was made): the mount's own directory.
    const relative = path.posix.relative(mount.root, entry.path);
    const inside = relative === '' || !relative.startsWith('..');
    const parts = inside && relative !== '' ? relative.split('/') : [];
    const dirs = parts.map((_, i) => path.posix.join(mount.mountPoint, ...parts.slice(0, parts.length - i)));
    found.push({ version: mount.version, dirs: [...dirs, mount.mountPoint] });
  }
  // v2 first: on a hybrid host the v1 memory controller is the one in use, and v2's files are then absent.
  return found.sort((a, b) => b.version - a.version);
}

/** `memory.max` or `memory.limit_in_bytes`: bytes, or null for none ("max", or v1's page-rounded 2^63). */
export function parseLimitFile(text: string): number | null {
  const value = text.trim();
  if (value === 'max' || !/^\d+$/.test(value)) return null;
  const bytes = Number(value);
  return bytes > Number.MAX_SAFE_INTEGER ? null : bytes;
}

/** v1's memory.stat `hierarchical_memory_limit`: the tightest limit of the cgroup and its ancestors. */
export function parseHierarchicalLimit(memoryStat: string): number | null {
  const match = /^hierarchical_memory_limit (\d+)$/m.exec(memoryStat);
  return match ? parseLimitFile(match[1]!) : null;
}

type Read = (file: string) => Promise<string | null>;

const readText: Read = (file) => readFile(file, 'utf8').catch(() => null);

/** Reads the limit under `root` ('/' but in tests); a file that cannot be read counts as no limit there. */
export async function readMemoryLimit(root = '/', read: Read = readText): Promise<MemoryLimit> {
  const at = (file: string) => path.join(root, file);
  const [cgroupText, mountText] = await Promise.all([read(at('/proc/self/cgroup')), read(at('/proc/self/mountinfo'))]);
  if (cgroupText === null || mountText === null) return { bytes: null, source: 'no /proc/self/cgroup or mountinfo: not Linux, or no procfs' };
  const hierarchies = memoryCgroupDirs(parseProcCgroup(cgroupText), parseCgroupMounts(mountText));
  const looked: string[] = [];
  for (const { version, dirs } of hierarchies) {
    const name = version === 2 ? 'memory.max' : 'memory.limit_in_bytes';
    let best: MemoryLimit | null = null;
    let seen = false;
    for (const dir of dirs) {
      const text = await read(at(path.posix.join(dir, name)));
      if (text === null) continue;
      seen = true;
      const bytes = parseLimitFile(text);
      if (bytes !== null && (best === null || bytes < best.bytes!)) best = { bytes, source: path.posix.join(dir, name) };
      if (version === 1) {
        // v1 says the ancestors' limit itself, in memory.stat; its leaf alone is enough.
        const stat = await read(at(path.posix.join(dir, 'memory.stat')));
        const inherited = stat === null ? null : parseHierarchicalLimit(stat);
        if (inherited !== null && (best === null || inherited < best.bytes!)) best = { bytes: inherited, source: `${path.posix.join(dir, 'memory.stat')} hierarchical_memory_limit` };
        break;
      }
    }
    if (best) return best;
    if (seen) return { bytes: null, source: `${path.posix.join(dirs[0]!, name)}: no limit` };
    looked.push(path.posix.join(dirs[0]!, name));
  }
  return { bytes: null, source: looked.length ? `no memory controller files (${looked.join(', ')})` : 'no cgroup memory controller mounted' };
}
