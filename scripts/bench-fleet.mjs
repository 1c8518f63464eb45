// npm run bench:fleet: a simulated 1,024-rank job across 128 sidecars, scraped by the real Prometheus
// server with the stepscope rules (BENCHMARKS.md, "A job of 1,024 ranks on Prometheus"). Each
// sidecar is the real one assembled in this process (engine, recorder, ingest and server from dist/,
// as serve() puts them together; no journal, no collectors), listening on loopback and fed its 8
// ranks' steps on the real clock as the ingest would hand them to the engine. The baseline, in the
// same run and on the same Prometheus, is a 16-rank job over 2 such sidecars, measured before the
// big job's targets are added. Figures: medians.
//   node scripts/bench-fleet.mjs [--ranks-per-sidecar 8] [--sidecars 128] [--seconds 120] [--interval 15]
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';
import { Engine } from '../dist/engine/engine.js';
import { Ingest } from '../dist/ingest/ingest.js';
import { DEFAULT_LIMITS } from '../dist/ingest/limits.js';
import { Recorder } from '../dist/journal/recorder.js';
import { createLogger } from '../dist/log/log.js';
import { buildServer } from '../dist/http-server.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
const PER = arg('ranks-per-sidecar', 8);
const SIDECARS = arg('sidecars', 128);
const SECONDS = arg('seconds', 120);
// Scrape and rule interval, s (Prometheus's usual 15 s): the 128 sidecars share this process's one core.
const INTERVAL = arg('interval', 15);
const STEP_MS = 200;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length === 0 ? null : s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const log = createLogger('silent');
const SOURCES = { gpu: { source: 'none', reason: 'GPU counters turned off (--gpu-source none)', health: null }, host: null };

/** One sidecar in this process, its ranks `ranks` of `job`, stepping every STEP_MS (the slow rank waiting 60 ms more for data). */
async function sidecar(job, ranks, worldSize, slow) {
  // Built like the sidecar's: the engine and the ingest with one set of limits.
  const engine = new Engine({ limits: DEFAULT_LIMITS });
  const recorder = new Recorder(engine, null, { checkpointBytes: 1 << 20, checkpointMs: 60_000, samplesGiveUpShare: 0.75, now: Date.now, log });
  const started = Date.now();
  await recorder.record({ t: 'start', at: started, config: { windowMs: 4_000, holdMs: 2_000, endGraceMs: 10_000 } });
  await recorder.record({ t: 'source', at: started, gpu: 'none', reason: SOURCES.gpu.reason });
  const ingest = new Ingest(engine.world.jobs, recorder, { now: Date.now, limits: DEFAULT_LIMITS });
  const app = await buildServer({
    ingest,
    log,
    snapshot: () => engine.snapshot(),
    fresh: async () => engine.snapshot(),
    onSnapshot: () => () => {},
    journal: () => null,
    maxFrameBytes: 1 << 20,
    windowMs: 4_000,
    sources: () => SOURCES,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = app.server.address().port;
  for (const rank of ranks) {
    await recorder.record({
      t: 'hello',
      at: started,
      hello: { type: 'hello', job, rank, local_rank: rank % PER, world_size: worldSize, session: `${job}-${rank}`, pid: 1000 + rank, host: `node-${Math.floor(rank / PER)}`, clock: { wall_ms: started, mono_ns: 0 }, env: {} },
    });
    await recorder.record({ t: 'connect', at: started, session: `${job}-${rank}` });
  }
  let seq = 0;
  let last = 0;
  // Every 5 s: the steps each rank ended since the last, then a tick (a sidecar ticks 4 times a second; the scrapes read the latest).
  const feed = async () => {
    const now = Date.now() - started;
    const upTo = Math.floor(now / STEP_MS);
    if (upTo > last) {
      for (const rank of ranks) {
        const data = rank === slow ? 70 : 10;
        const rows = [];
        for (let s = last; s < upTo; s++) rows.push([s + 1, s, (s + 1) * STEP_MS * 1e6, STEP_MS * 1e6, data * 1e6, 0, (STEP_MS - data) * 1e6, 32, null, null, null]);
        await recorder.record({ t: 'steps', at: started + now, session: `${job}-${rank}`, dropped: 0, rows });
      }
      seq = upTo;
      last = upTo;
    }
    await recorder.record({ t: 'tick', at: started + now });
  };
  const timer = setInterval(() => void feed(), 5000);
  return { port, app, stop: async () => (clearInterval(timer), await app.close()), steps: () => seq };
}

async function scrapeFigures(ports) {
  const sizes = [];
  const times = [];
  for (const port of ports) {
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      times.push(performance.now() - t0);
      sizes.push(Buffer.byteLength(text));
    }
  }
  const text = await (await fetch(`http://127.0.0.1:${ports[0]}/metrics`)).text();
  const series = text.split('\n').filter((line) => line && !line.startsWith('#'));
  const perRank = series.filter((line) => /rank="\d+"/.test(line)).length / PER;
  return { bytes: median(sizes), ms: median(times), series: series.length, perRank };
}

const prometheusBin = spawnSync('sh', ['-c', 'command -v prometheus'], { encoding: 'utf8' }).stdout.trim();
if (!prometheusBin) throw new Error('the prometheus server is not on PATH (Debian: apt-get install prometheus)');
const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-bench-fleet-'));
const rules = parse(readFileSync(path.join(root, 'deploy/prometheus/stepscope-rules.yml'), 'utf8'));
for (const group of rules.groups) if (group.interval) group.interval = `${INTERVAL}s`;
writeFileSync(path.join(dir, 'rules.yml'), stringify(rules));
const writeConfig = (targets) =>
  writeFileSync(
    path.join(dir, 'prometheus.yml'),
    stringify({
      global: { scrape_interval: `${INTERVAL}s`, evaluation_interval: `${INTERVAL}s`, scrape_timeout: `${INTERVAL}s` },
      rule_files: ['rules.yml'],
      scrape_configs: [{ job_name: 'stepscope', static_configs: targets.map(([port, pod]) => ({ targets: [`127.0.0.1:${port}`], labels: { pod } })) }],
    }),
  );

const free = await new Promise((resolve) => {
  import('node:net').then(({ createServer }) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
});
const promUrl = `http://127.0.0.1:${free}`;
const sidecars = [];
let prometheus;
// Stopped early (Ctrl-C), Prometheus and the temp folder go too.
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => (prometheus?.kill('SIGTERM'), rmSync(dir, { recursive: true, force: true }), process.exit(130)));
try {
  // The baseline: 16 ranks over 2 sidecars.
  const small = [];
  for (let i = 0; i < 2; i++) small.push(await sidecar('small', Array.from({ length: 8 }, (_, r) => i * 8 + r), 16, 13));
  sidecars.push(...small);
  writeConfig(small.map((s, i) => [s.port, `small-${i}`]));
  prometheus = spawn(prometheusBin, [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${free}`, '--web.enable-lifecycle', '--log.level=warn'], { stdio: 'ignore' });
  for (let i = 0; i < 300 && !(await fetch(`${promUrl}/-/ready`).then((r) => r.ok).catch(() => false)); i++) await sleep(100);

  const ruleTimes = async (seconds) => {
    // The stepscope-job group's last evaluation time, read from Prometheus's own /metrics at each interval.
    const seen = [];
    for (let t = 0; t < seconds; t += INTERVAL) {
      await sleep(INTERVAL * 1000);
      const own = await (await fetch(`${promUrl}/metrics`)).text();
      const match = own.match(/^prometheus_rule_group_last_duration_seconds\{rule_group="[^"]*;stepscope-job"\} (\S+)$/m);
      if (match) seen.push(Number(match[1]) * 1000);
    }
    return seen;
  };
  const reportMs = async (job, from) => {
    const times = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const run = spawnSync(process.execPath, [path.join(root, 'dist/cli.js'), 'report', '--prometheus', promUrl, '--job', job, '--from', String(from), '--format', 'json', '--window', '30'], { encoding: 'utf8', maxBuffer: 1 << 28 });
      times.push(performance.now() - t0);
      if (run.status !== 0) throw new Error(run.stderr);
      if (i === 0) {
        const summary = JSON.parse(run.stdout);
        process.stderr.write(`report ${job}: ${summary.ranks.length} ranks, straggler ${summary.straggler?.rank ?? 'none'}, verdict ${summary.verdict}, ${run.stdout.length} bytes\n`);
      }
    }
    return median(times);
  };
  const smallFrom = Date.now() / 1000;
  const smallRules = await ruleTimes(Math.min(60, SECONDS));
  const smallScrape = await scrapeFigures(small.map((s) => s.port));
  const smallReport = await reportMs('small', smallFrom);
  process.stderr.write(`baseline: rules ${median(smallRules)} ms, report ${smallReport} ms\n`);

  // The big job: 1,024 ranks over 128 sidecars, rank 1000 slow; the baseline's targets kept.
  const big = [];
  for (let i = 0; i < SIDECARS; i++) big.push(await sidecar('big', Array.from({ length: PER }, (_, r) => i * PER + r), SIDECARS * PER, 1000));
  sidecars.push(...big);
  writeConfig([...small.map((s, i) => [s.port, `small-${i}`]), ...big.map((s, i) => [s.port, `big-${i}`])]);
  await fetch(`${promUrl}/-/reload`, { method: 'POST' });
  const bigFrom = Date.now() / 1000;
  // Past the first 5-minute rate's warm-up is not needed: the rules' cost is the series they read.
  const bigRules = await ruleTimes(SECONDS);
  const bigScrape = await scrapeFigures(big.slice(0, 16).map((s) => s.port));
  const promScrape = await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent('quantile(0.5, scrape_duration_seconds{pod=~"big-.*"})')}`)).json();
  const promSamples = await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent('quantile(0.5, scrape_samples_scraped{pod=~"big-.*"})')}`)).json();
  const up = await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent('avg(avg_over_time(up{pod=~"big-.*"}[1h]))')}`)).json();
  const series = await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent('count({training_job="big"})')}`)).json();
  // Each rule's own last evaluation time, the costliest first.
  const groups = (await (await fetch(`${promUrl}/api/v1/rules`)).json()).data.groups;
  const costliest = groups
    .flatMap((g) => g.rules.map((r) => [r.name, Math.round(r.evaluationTime * 1e4) / 10]))
    .sort((a, b) => b[1] - a[1])
    .slice(0, 8);
  const bigReport = await reportMs('big', bigFrom);
  const result = {
    sidecars: SIDECARS,
    ranks: SIDECARS * PER,
    interval_s: INTERVAL,
    scrape: {
      bytes_per_sidecar: bigScrape.bytes,
      ms_per_sidecar_fetch: Math.round(bigScrape.ms * 100) / 100,
      ms_per_sidecar_prometheus: Math.round(Number(promScrape.data.result[0]?.value[1]) * 1e5) / 100,
      samples_per_sidecar: Number(promSamples.data.result[0]?.value[1]),
      series_per_rank: bigScrape.perRank,
      scrapes_succeeded: Number(up.data.result[0]?.value[1]),
      job_series_in_prometheus: Number(series.data.result[0]?.value[1]),
      baseline_bytes_per_sidecar: smallScrape.bytes,
    },
    rules_ms: { baseline_16_ranks: median(smallRules), job_1024_ranks: median(bigRules), ratio: Math.round((median(bigRules) / median(smallRules)) * 10) / 10 },
    costliest_rules_ms: Object.fromEntries(costliest),
    report_ms: { baseline_16_ranks: Math.round(smallReport), job_1024_ranks: Math.round(bigReport), ratio: Math.round((bigReport / smallReport) * 10) / 10 },
  };
  process.stdout.write(JSON.stringify(result, null, 2) + '\n');
} finally {
  if (prometheus && prometheus.exitCode === null) {
    const exited = new Promise((resolve) => prometheus.once('exit', resolve));
    prometheus.kill('SIGTERM');
    await exited;
  }
  await Promise.all(sidecars.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
}
