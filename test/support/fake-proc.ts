import { cpSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { atFileEnd } from './children.js';
import { ROOT, tempDir } from './sidecar.js';

/**
 * A stand-in procfs for the sidecar's host collector (`serve --proc-root DIR`), so that host CPU
 * figures are scripted rather than whatever a shared test machine happens to be doing.
 *
 * It starts from a copy of a real machine's files (test/fixtures/proc/this-machine: stat, uptime,
 * loadavg, meminfo, diskstats, net/dev, which is what HostSource reads) and then keeps
 * advancing `stat` and `uptime` as time passes, every `intervalMs`, so that the collector's rate
 * between any two readings comes out at the scripted load: `cpuPct` busy (user and system),
 * `iowaitPct` waiting for I/O, the rest idle, on every core alike. Each file is replaced whole
 * (written aside, then renamed), so a reader never sees half of one.
 */

export interface HostLoad {
  /** Percent of all CPU time busy (not idle, not iowait), 0..100. */
  cpuPct: number;
  /** Percent of all CPU time in iowait; cpuPct + iowaitPct ≤ 100. */
  iowaitPct?: number;
}

export interface FakeProc {
  /** The directory to pass as `--proc-root`. */
  root: string;
  /** From now on the counters advance at this load. */
  set(load: HostLoad): void;
  /** Stops advancing the counters and removes the directory. */
  stop(): void;
}

const SOURCE = path.join(ROOT, 'test', 'fixtures', 'proc', 'this-machine');
/** USER_HZ: /proc/stat counts in 1/100 s on every Linux the collector runs on. */
const TICKS_PER_S = 100;
const COLUMNS = ['user', 'nice', 'system', 'idle', 'iowait', 'irq', 'softirq', 'steal', 'guest', 'guest_nice'] as const;
type Column = (typeof COLUMNS)[number];

function parseCpuLines(text: string): Map<string, Record<Column, number>> {
  const cpus = new Map<string, Record<Column, number>>();
  for (const line of text.split('\n')) {
    const match = /^(cpu\d*)\s+(.*)$/.exec(line.trim());
    if (!match) continue;
    const values = match[2]!.split(/\s+/).map(Number);
    cpus.set(match[1]!, Object.fromEntries(COLUMNS.map((c, i) => [c, values[i] ?? 0])) as Record<Column, number>);
  }
  return cpus;
}

function checked(load: HostLoad): Required<HostLoad> {
  const iowaitPct = load.iowaitPct ?? 0;
  if (load.cpuPct < 0 || iowaitPct < 0 || load.cpuPct + iowaitPct > 100) throw new Error(`impossible host load ${JSON.stringify(load)}`);
  return { cpuPct: load.cpuPct, iowaitPct };
}

export function startFakeProc(initial: HostLoad, { intervalMs = 200 }: { intervalMs?: number } = {}): FakeProc {
  const root = tempDir('stepscope-fake-proc-');
  for (const file of ['loadavg', 'meminfo', 'diskstats']) cpSync(path.join(SOURCE, file), path.join(root, file));
  mkdirSync(path.join(root, 'net'));
  cpSync(path.join(SOURCE, 'net', 'dev'), path.join(root, 'net', 'dev'));

  const statText = readFileSync(path.join(SOURCE, 'stat'), 'utf8');
  const tail = statText.split('\n').filter((line) => !/^cpu\d*\s/.test(line)).join('\n');
  const cpus = parseCpuLines(statText);
  const cores = [...cpus.keys()].filter((name) => name !== 'cpu');
  // Exact (fractional) ticks per core; whole ticks are written, as the kernel does.
  const perCore = new Map(cores.map((name) => [name, { ...cpus.get(name)! }]));
  let uptimeS = Number(readFileSync(path.join(SOURCE, 'uptime'), 'utf8').split(/\s+/)[0]);
  let load = checked(initial);
  let last = performance.now();

  const replace = (file: string, text: string) => {
    const target = path.join(root, file);
    writeFileSync(`${target}.tmp`, text);
    renameSync(`${target}.tmp`, target);
  };
  const line = (name: string, t: Record<Column, number>) => `${name.padEnd(4)} ${COLUMNS.map((c) => Math.floor(t[c])).join(' ')}`;

  const advance = () => {
    const now = performance.now();
    const seconds = (now - last) / 1000;
    last = now;
    const ticks = seconds * TICKS_PER_S;
    for (const times of perCore.values()) {
      const busy = (ticks * load.cpuPct) / 100;
      times.user += busy * 0.8;
      times.system += busy * 0.2;
      times.iowait += (ticks * load.iowaitPct) / 100;
      times.idle += (ticks * (100 - load.cpuPct - load.iowaitPct)) / 100;
    }
    uptimeS += seconds;
    // The aggregate line is the sum of the per-core lines' whole ticks, as in the kernel.
    const total = Object.fromEntries(COLUMNS.map((c) => [c, [...perCore.values()].reduce((sum, t) => sum + Math.floor(t[c]), 0)])) as Record<Column, number>;
    replace('stat', [line('cpu', total), ...[...perCore].map(([name, t]) => line(name, t)), tail].join('\n'));
    replace('uptime', `${uptimeS.toFixed(2)} ${(uptimeS * cores.length * 0.9).toFixed(2)}\n`);
  };

  advance();
  const timer = setInterval(advance, intervalMs);
  const stop = () => {
    clearInterval(timer);
    rmSync(root, { recursive: true, force: true });
  };
  // Stopped at the end of the file at the latest (test/support/cleanup.ts), if a test did not.
  const forget = atFileEnd(stop);
  return {
    root,
    set(next) {
      advance(); // the time so far at the old load
      load = checked(next);
    },
    stop() {
      forget();
      stop();
    },
  };
}
