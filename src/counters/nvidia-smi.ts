import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import type { Logger } from '../log/log.js';
import { execOnce, firstLine } from './nvidia-smi-exec.js';
import { anyMigEnabled, parseMigListing, parseMigQuery, withMigInstances, withQueryDetails, type MigDevice } from './nvidia-smi-mig.js';
import {
  driverWarning,
  exitWarning,
  hasFigures,
  OPTIONAL_GROUPS,
  parseGpuLine,
  queryFields,
  RoundGrouper,
  unknownQueryField,
  type ReasonNaming,
} from './nvidia-smi-parse.js';
import { ReadError, Supervised, type Collector, type StreamOutput, type StreamSource, type Warn } from './source.js';
import type { GpuSample } from './types.js';
import { sidecarNow } from '../model/clock.js';

export interface Backoff {
  initialMs: number;
  maxMs: number;
  /** A child that ran this long and delivered samples earns a restart at `initialMs` again. */
  resetAfterMs: number;
}

export interface NvidiaSmiOptions {
  /** Executable name (looked up on PATH, the one in `env` if given) or path. */
  binary?: string;
  intervalMs?: number;
  /**
   * Whether a job is live. While none is, the stream runs at IDLE_INTERVAL_MS (or intervalMs where
   * that is longer): the node's GPUs are still shown, but a sample every half second that only the
   * node view reads cost most of the idle sidecar's CPU. Always live when absent.
   */
  jobsLive?: () => boolean;
  log: Logger;
  /** Clock for `GpuSample.at`; ms since the epoch. */
  now?: () => number;
  /** Environment of nvidia-smi; the sidecar's own when absent. */
  env?: NodeJS.ProcessEnv;
  /** Without persistence mode the first NVML call on a big node can take seconds. */
  probeTimeoutMs?: number;
  /** A looping child that delivers no figure for this long is killed and restarted. */
  stallMs?: number;
  backoff?: Backoff;
}

const DEFAULT_BACKOFF: Backoff = { initialMs: 250, maxMs: 10_000, resetAfterMs: 30_000 };
/** nvidia-smi's interval while no job is live; the host's counters take it too (src/counters/registry.ts). */
export const IDLE_INTERVAL_MS = 5_000;
const STOP_GRACE_MS = 2_000;
/** The first reading's calls, each under the probe's limit: up to four queries (fields the driver refuses), -L and -q. */
const PROBE_CALLS = 6;

/** What the probe settled: the fields this driver answers, and its MIG instances. */
interface Query {
  naming: ReasonNaming;
  fields: string[];
  /** The highest GPU index of the probe's answer: a round of the loop ends there. */
  lastIndex: number;
  /** MIG instances, delivered as devices of their own after their GPU's row. */
  migs: MigDevice[];
}

/**
 * nvidia-smi, run by the one supervisor (source.ts) as a stream: its first reading is a single query
 * with every field (which also settles the fields this driver knows and the driver's name for the
 * clock-event reasons), then one long-lived `nvidia-smi --query-gpu ... -lms <interval>` child is
 * read line by line. The supervisor restarts a child that ends or goes quiet.
 */
export function nvidiaSmiCollector(options: NvidiaSmiOptions): Collector<GpuSample[]> {
  const intervalMs = options.intervalMs ?? 500;
  const backoff = options.backoff ?? DEFAULT_BACKOFF;
  const source = new NvidiaSmiSource({ ...options, intervalMs });
  const slowestMs = source.idleIntervalMs ?? intervalMs;
  return new Supervised(source, {
    intervalMs: null,
    log: options.log,
    now: options.now,
    timeoutMs: PROBE_CALLS * (options.probeTimeoutMs ?? 15_000),
    firstBackoffMs: backoff.initialMs,
    maxBackoffMs: backoff.maxMs,
    count: (devices) => devices.length,
    // A round of only "[Unknown Error]" and the like is printed, but reads nothing.
    stream: {
      stallMs: options.stallMs ?? Math.max(5 * slowestMs, 15_000),
      resetAfterMs: backoff.resetAfterMs,
      live: (round) => round.some(hasFigures),
      // A job went live (or the last one ended): the child runs again at the other pace.
      retune: () => source.running !== null && source.running !== source.wantedInterval(),
    },
  });
}

/** A line that cannot be read is skipped with a rate-limited warning, never a crash. */
class NvidiaSmiSource implements StreamSource<GpuSample[]> {
  readonly name = 'nvidia-smi';
  private readonly binary: string;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly probeTimeoutMs: number;
  private query: Query | null = null;
  /** The running child's interval; null between runs. */
  running: number | null = null;
  /** The interval while no job is live; null where the sidecar does not say whether one is. */
  readonly idleIntervalMs: number | null;

  constructor(private readonly options: NvidiaSmiOptions & { intervalMs: number }) {
    this.binary = options.binary ?? 'nvidia-smi';
    this.log = options.log.child({ source: this.name });
    this.now = options.now ?? sidecarNow;
    this.probeTimeoutMs = options.probeTimeoutMs ?? 15_000;
    this.idleIntervalMs = options.jobsLive ? Math.max(options.intervalMs, IDLE_INTERVAL_MS) : null;
  }

  /** The probe: its answer is the first reading. */
  async read(signal: AbortSignal, warn: Warn): Promise<GpuSample[]> {
    const { naming, fields, samples, mig } = await this.probe(signal, warn);
    const migs = mig ? await this.readMigDevices(signal) : [];
    this.query = { naming, fields, lastIndex: Math.max(...samples.map((sample) => sample.index)), migs };
    this.log.info(
      {
        binary: this.binary,
        gpus: samples.length,
        mig_instances: migs.length,
        reasons_field: fields.at(-1),
        power_fields: fields.filter((field) => field.startsWith('power.draw')),
        interval_ms: this.options.intervalMs,
        idle_interval_ms: this.idleIntervalMs,
      },
      'reading GPU counters from nvidia-smi',
    );
    return withMigInstances(samples, migs);
  }

  /** The interval the child should loop at now: the sidecar's while a job is live, else the idle one. */
  wantedInterval(): number {
    const { intervalMs, jobsLive } = this.options;
    return this.idleIntervalMs === null || jobsLive!() ? intervalMs : this.idleIntervalMs;
  }

  /** One looping child, until it exits or `signal` ends it. */
  run(out: StreamOutput<GpuSample[]>, signal: AbortSignal): Promise<void> {
    const query = this.query!;
    const intervalMs = (this.running = this.wantedInterval());
    const child = spawn(this.binary, [...queryArgs(query.fields), '-lms', String(intervalMs)], { env: this.options.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const rounds = new RoundGrouper(query.lastIndex);
    let lastStderr = '';
    /** The sidecar's own time on the lines of the round being read. */
    let spentMs = 0;
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.trim()) return;
      const started = performance.now();
      const sample = toSample(line, query.fields, this.now(), out.warn);
      for (const round of sample ? rounds.add(sample) : []) {
        out.emit(withMigInstances(round, query.migs), spentMs + (performance.now() - started));
        spentMs = -(performance.now() - started);
      }
      spentMs += performance.now() - started;
    });
    createInterface({ input: child.stderr! }).on('line', (line) => {
      if (line.trim()) lastStderr = line.trim();
    });
    return new Promise((_, reject) => {
      const gone = (what: string, fields: Record<string, unknown>) => {
        this.running = null;
        signal.removeEventListener('abort', end);
        clearTimeout(grace);
        reject(new ReadError(`nvidia-smi ${what}${lastStderr ? `: ${lastStderr}` : ''}`, `nvidia-smi ${what}`, { ...fields, stderr: lastStderr || null }));
      };
      let grace: NodeJS.Timeout | undefined;
      // The watchdog kills at once (a hung driver call may not heed SIGTERM); stop lets it end.
      const end = () => {
        if (signal.reason === 'stalled') return void child.kill('SIGKILL');
        child.kill('SIGTERM');
        grace = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      };
      // 'on', not 'once': a failed kill() emits 'error' too, and an unheard 'error' would crash the sidecar.
      child.on('error', (error) => gone(`could not run: ${error.message}`, {}));
      child.once('exit', (code, exitSignal) => gone(`exited (code ${code ?? 'none'}, signal ${exitSignal ?? 'none'})`, { code, signal: exitSignal }));
      if (signal.aborted) end();
      else signal.addEventListener('abort', end, { once: true });
    });
  }

  /**
   * One query with every field; a driver that refuses one is asked again without it: an optional
   * group (the split power readings, MIG mode) is dropped, and drivers before 535 get the old name
   * of the reasons bitmask. A current driver answers the first.
   */
  private async probe(signal: AbortSignal, warn: Warn): Promise<{ naming: ReasonNaming; fields: string[]; samples: GpuSample[]; mig: boolean }> {
    let naming: ReasonNaming = 'event';
    let groups = [...OPTIONAL_GROUPS];
    for (;;) {
      const attempt = await this.queryOnce(queryFields(naming, groups.flat()), signal, warn);
      if (attempt.ok) return { naming, ...attempt.query };
      const unknown = unknownQueryField(attempt.output);
      const refusedGroup = unknown === null ? undefined : groups.find((group) => group.includes(unknown));
      if (refusedGroup) {
        this.log.info({ refused: unknown, without: refusedGroup }, 'driver does not know an optional field; asking without it');
        groups = groups.filter((group) => group !== refusedGroup);
      } else if (naming === 'event' && unknown?.startsWith('clocks_event_reasons.')) {
        this.log.info({ refused: unknown }, 'driver predates clocks_event_reasons (before 535); using clocks_throttle_reasons');
        naming = 'throttle';
      } else {
        throw new ReadError(attempt.reason);
      }
    }
  }

  private async queryOnce(
    fields: string[],
    signal: AbortSignal,
    warn: Warn,
  ): Promise<{ ok: true; query: { fields: string[]; samples: GpuSample[]; mig: boolean } } | { ok: false; reason: string; output: string }> {
    const result = await execOnce(this.binary, queryArgs(fields), { env: this.options.env, timeoutMs: this.probeTimeoutMs, signal });
    const warning = result.ok ? null : exitWarning(result.code);
    if (!result.ok && warning === null) return { ok: false, reason: result.reason, output: result.output };
    const at = this.now();
    const samples = result.stdout.split('\n').flatMap((line) => (line.trim() ? (toSample(line, fields, at, warn) ?? []) : []));
    if (samples.length === 0) {
      return { ok: false, reason: result.ok ? `printed no GPU rows: ${firstLine(result.stdout) || '(nothing)'}` : result.reason, output: result.ok ? result.stdout : result.output };
    }
    if (!result.ok) {
      // Exit 14 and 15 are warnings about one GPU; the rows printed are good (NVIDIA/gpu-operator#285).
      warn(`exited ${result.code}`, 'nvidia-smi exited with a warning code; reading the rows it printed', { code: result.code, meaning: warning, stderr: firstLine(result.output) || null });
    }
    return { ok: true, query: { fields, samples, mig: anyMigEnabled(result.stdout, fields) } };
  }

  /** On a MIG-enabled GPU: `nvidia-smi -L` once, and `-q` if the instance ids are not in the UUIDs; none where either fails. */
  private async readMigDevices(signal: AbortSignal): Promise<MigDevice[]> {
    const options = { env: this.options.env, timeoutMs: this.probeTimeoutMs, signal };
    const listing = await execOnce(this.binary, ['-L'], options);
    if (!listing.ok && exitWarning(listing.code) === null) return [];
    let devices = parseMigListing(listing.stdout);
    if (devices.some((device) => device.gpuInstanceId === null)) {
      const query = await execOnce(this.binary, ['-q'], options);
      if (query.ok || exitWarning(query.code) !== null) devices = withQueryDetails(devices, parseMigQuery(query.stdout));
    }
    return devices;
  }
}

/** A row as a sample, or null for a line that is not one (a driver's warning, a broken row), with a warning. */
function toSample(line: string, fields: readonly string[], at: number, warn: Warn): GpuSample | null {
  const warning = driverWarning(line);
  if (warning !== null) {
    warn(warning, 'nvidia-smi printed a warning among its rows; the rows are read', { line: clip(line) });
    return null;
  }
  const parsed = parseGpuLine(line, fields, at);
  if (!parsed.ok) {
    warn(parsed.problem, 'skipped an nvidia-smi line that is not a row of the query', { line: clip(line) });
    return null;
  }
  for (const problem of parsed.problems) {
    warn(problem, 'nvidia-smi printed a value that is not understood; reporting it as not available', { line: clip(line) });
  }
  return parsed.sample;
}

function queryArgs(fields: readonly string[]): string[] {
  return [`--query-gpu=${fields.join(',')}`, '--format=csv,noheader,nounits'];
}

function clip(line: string): string {
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}
