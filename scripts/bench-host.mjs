// node scripts/bench-host.mjs [rounds]: what each way of reading a host figure costs, as JSON.
// For every figure, systeminformation's call against reading /proc directly (with the parsers in
// dist/, so run `npx tsc -p .` first). Per call: median wall time and median CPU time of this
// process (all its threads), plus the mean CPU time of the child processes it spawned (counted
// from /proc/self/stat, whose 10 ms ticks are too coarse for a per-call median).
import { readFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import si from 'systeminformation';
import { memoryFigures, parseDiskstats, parseLoadavg, parseMeminfo, parseNetDev, parseProcStat } from '../dist/counters/host-parse.js';

const rounds = Number(process.argv[2] ?? 15);
// systeminformation answers from a cache when called again within 500 ms; wait that out.
const PAUSE_MS = 600;
const USER_HZ = 100;

const readers = {
  cpu: {
    'systeminformation.currentLoad': () => si.currentLoad(),
    'proc:/proc/stat': async () => parseProcStat(await readFile('/proc/stat', 'utf8')),
  },
  load: {
    'os.loadavg': async () => os.loadavg(),
    'proc:/proc/loadavg': async () => parseLoadavg(await readFile('/proc/loadavg', 'utf8')),
  },
  memory: {
    'systeminformation.mem': () => si.mem(),
    'proc:/proc/meminfo': async () => memoryFigures(parseMeminfo(await readFile('/proc/meminfo', 'utf8'))),
  },
  disk: {
    'systeminformation.fsStats': () => si.fsStats(),
    'systeminformation.disksIO': () => si.disksIO(),
    'proc:/proc/diskstats': async () => parseDiskstats(await readFile('/proc/diskstats', 'utf8')),
  },
  network: {
    'systeminformation.networkStats': () => si.networkStats(),
    'proc:/proc/net/dev': async () => parseNetDev(await readFile('/proc/net/dev', 'utf8')),
  },
};

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function childCpuTicks() {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ');
  return Number(fields[13]) + Number(fields[14]);
}

async function measure(read) {
  const cpuBefore = process.cpuUsage();
  const ticksBefore = childCpuTicks();
  const start = performance.now();
  await read();
  const wallUs = (performance.now() - start) * 1000;
  const cpu = process.cpuUsage(cpuBefore);
  return { wallUs, selfCpuUs: cpu.user + cpu.system, childTicks: childCpuTicks() - ticksBefore };
}

const entries = Object.entries(readers).flatMap(([figure, ways]) => Object.entries(ways).map(([way, read]) => ({ figure, way, read, runs: [] })));

for (const entry of entries) await entry.read(); // first calls prime caches and baselines
for (let round = 0; round < rounds; round++) {
  await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
  for (const entry of entries) entry.runs.push(await measure(entry.read));
}

const round1 = (value) => Math.round(value * 10) / 10;
const result = {
  rounds,
  cores: os.cpus().length,
  node: process.version,
  systeminformation: si.version(),
  figures: Object.fromEntries(
    Object.keys(readers).map((figure) => [
      figure,
      Object.fromEntries(
        entries
          .filter((entry) => entry.figure === figure)
          .map(({ way, runs }) => {
            const selfCpuUs = median(runs.map((run) => run.selfCpuUs));
            const childCpuUs = (runs.reduce((sum, run) => sum + run.childTicks, 0) * 1e6) / USER_HZ / runs.length;
            return [way, { wallUs: round1(median(runs.map((run) => run.wallUs))), selfCpuUs: round1(selfCpuUs), childCpuUs: round1(childCpuUs), cpuUsPerCall: round1(selfCpuUs + childCpuUs) }];
          }),
      ),
    ]),
  ),
};
console.log(JSON.stringify(result, null, 2));
