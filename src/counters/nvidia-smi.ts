import { execFile, spawn, type ChildProcess, type ExecFileException } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import type { Logger } from '../log/log.js';
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
import { RateLimitedWarnings, type Collector, type SourceTiming } from './source.js';
import type { CollectorHealth, CollectorState, GpuSample, GpuSink } from './types.js';

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

/** nvidia-smi is missing or cannot read the GPUs; a registry should try another source. */
export class NvidiaSmiUnavailableError extends Error {
  override name = 'NvidiaSmiUnavailableError';
}

const DEFAULT_BACKOFF: Backoff = { initialMs: 250, maxMs: 10_000, resetAfterMs: 30_000 };
const STOP_GRACE_MS = 2_000;
const WARNING_QUIET_MS = 5 * 60_000;
const MAX_OUTPUT_BYTES = 1 << 20;

interface Query {
  naming: ReasonNaming;
  fields: string[];
  samples: GpuSample[];
  /** A GPU answered mig.mode.current "Enabled". */
  mig: boolean;
}

/** One long-lived `nvidia-smi ... -lms N` child and what it has said. */
interface LoopRun {
  child: ChildProcess;
  rounds: RoundGrouper;
  startedAt: number;
  lastFiguresAt: number;
  delivered: number;
  lastStderr: string;
  exited: Promise<void>;
}

/**
 * GPU counters from one long-lived `nvidia-smi --query-gpu ... -lms <interval>` child, read as a
 * stream. `start` first probes with a single query (its answer is the first round the sink gets),
 * which also settles the driver's name for the clock-event reasons. A child that dies or goes quiet
 * is restarted with exponential backoff; a line that cannot be read is skipped with a rate-limited
 * warning, never a crash.
 */
export class NvidiaSmiCollector implements Collector<GpuSample[]> {
  readonly name = 'nvidia-smi';
  readonly restartsChild = true;

  private readonly binary: string;
  private readonly intervalMs: number;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly env: NodeJS.ProcessEnv | undefined;
  private readonly probeTimeoutMs: number;
  private readonly stallMs: number;
  private readonly backoff: Backoff;
  private readonly warnings: RateLimitedWarnings;

  private state: CollectorState = 'starting';
  private samples = 0;
  private lastSampleAt: number | null = null;
  private lastError: string | null = null;
  private restarts = 0;
  private failuresInARow = 0;

  private started = false;
  private stopped = false;
  private sink: GpuSink = () => undefined;
  private query: Query | null = null;
  /** MIG instances, delivered as devices of their own after their GPU's row. */
  private migs: MigDevice[] = [];
  private run: LoopRun | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private watchdog: NodeJS.Timeout | null = null;
  /** The probe, then the sidecar's own time on each round: reading its lines and handing it on. */
  private readonly timings: SourceTiming = { reads: 0, lastMs: null, totalMs: 0 };
  private roundMs = 0;

  constructor(options: NvidiaSmiOptions) {
    this.binary = options.binary ?? 'nvidia-smi';
    this.intervalMs = options.intervalMs ?? 500;
    this.log = options.log.child({ collector: 'nvidia-smi' });
    this.now = options.now ?? Date.now;
    this.env = options.env;
    this.probeTimeoutMs = options.probeTimeoutMs ?? 15_000;
    this.stallMs = options.stallMs ?? Math.max(5 * this.intervalMs, 15_000);
    this.backoff = options.backoff ?? DEFAULT_BACKOFF;
    this.warnings = new RateLimitedWarnings(this.log, WARNING_QUIET_MS);
  }

  async start(sink: GpuSink): Promise<void> {
    if (this.started) throw new Error('nvidia-smi collector already started');
    this.started = true;
    this.sink = sink;
    const probing = performance.now();
    try {
      this.query = await this.probe();
    } catch (error) {
      this.fail((error as Error).message);
      throw error;
    } finally {
      this.timed(performance.now() - probing);
    }
    if (this.query.mig) this.migs = await this.readMigDevices();
    if (this.stopped) return;
    this.log.info(
      {
        binary: this.binary,
        gpus: this.query.samples.length,
        mig_instances: this.migs.length,
        reasons_field: this.query.fields.at(-1),
        power_fields: this.query.fields.filter((field) => field.startsWith('power.draw')),
        interval_ms: this.intervalMs,
      },
      'reading GPU counters from nvidia-smi',
    );
    this.deliver(this.query.samples);
    if (this.state === 'starting') this.fail('nvidia-smi answers, but with no figure for any GPU');
    this.spawnLoop();
    this.watchdog = setInterval(() => this.checkStall(), Math.min(this.intervalMs, 1_000));
    this.watchdog.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.state = 'stopped';
    if (this.restartTimer) clearTimeout(this.restartTimer);
    if (this.watchdog) clearInterval(this.watchdog);
    const run = this.run;
    this.run = null;
    if (run) await terminate(run);
  }

  timing(): SourceTiming {
    return { ...this.timings };
  }

  private timed(ms: number): void {
    this.timings.reads += 1;
    this.timings.lastMs = ms;
    this.timings.totalMs += ms;
  }

  health(): CollectorHealth {
    return {
      name: this.name,
      state: this.state,
      samples: this.samples,
      lastSampleAt: this.lastSampleAt,
      lastError: this.lastError,
      restarts: this.restarts,
    };
  }

  /**
   * One query with every field; a driver that refuses one is asked again without it: an optional
   * group (the split power readings, MIG mode) is dropped, and drivers before 535 get the old name
   * of the reasons bitmask. A current driver answers the first.
   */
  private async probe(): Promise<Query> {
    let naming: ReasonNaming = 'event';
    let groups = [...OPTIONAL_GROUPS];
    for (;;) {
      const attempt = await this.queryOnce(queryFields(naming, groups.flat()));
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
        throw new NvidiaSmiUnavailableError(attempt.reason);
      }
    }
  }

  private async queryOnce(
    fields: string[],
  ): Promise<{ ok: true; query: { fields: string[]; samples: GpuSample[]; mig: boolean } } | { ok: false; reason: string; output: string }> {
    const result = await execOnce(this.binary, queryArgs(fields), { env: this.env, timeoutMs: this.probeTimeoutMs });
    const warning = result.ok ? null : exitWarning(result.code);
    if (!result.ok && warning === null) return { ok: false, reason: result.reason, output: result.output };
    const samples = this.parseProbe(result.stdout, fields);
    if (samples.length === 0) {
      return { ok: false, reason: result.ok ? `printed no GPU rows: ${firstLine(result.stdout) || '(nothing)'}` : result.reason, output: result.ok ? result.stdout : result.output };
    }
    if (!result.ok) {
      // Exit 14 and 15 are warnings about one GPU; the rows printed are good (NVIDIA/gpu-operator#285).
      this.lastError = `nvidia-smi exited ${result.code} (${warning}); its rows are read`;
      this.log.warn({ code: result.code, meaning: warning, stderr: firstLine(result.output) || null }, 'nvidia-smi exited with a warning code; reading the rows it printed');
    }
    return { ok: true, query: { fields, samples, mig: anyMigEnabled(result.stdout, fields) } };
  }

  /** On a MIG-enabled GPU: `nvidia-smi -L` once, and `-q` if the instance ids are not in the UUIDs; none where either fails. */
  private async readMigDevices(): Promise<MigDevice[]> {
    const options = { env: this.env, timeoutMs: this.probeTimeoutMs };
    const listing = await execOnce(this.binary, ['-L'], options);
    if (!listing.ok && exitWarning(listing.code) === null) return [];
    let devices = parseMigListing(listing.stdout);
    if (devices.some((device) => device.gpuInstanceId === null)) {
      const query = await execOnce(this.binary, ['-q'], options);
      if (query.ok || exitWarning(query.code) !== null) devices = withQueryDetails(devices, parseMigQuery(query.stdout));
    }
    return devices;
  }

  private parseProbe(stdout: string, fields: string[]): GpuSample[] {
    const at = this.now();
    const samples: GpuSample[] = [];
    for (const line of stdout.split('\n').filter((l) => l.trim())) {
      const sample = this.toSample(line, fields, at);
      if (sample) samples.push(sample);
    }
    return samples;
  }

  private toSample(line: string, fields: readonly string[], at: number): GpuSample | null {
    const warning = driverWarning(line);
    if (warning !== null) {
      this.lastError = `nvidia-smi: ${warning}`;
      this.warnings.warn(warning, 'nvidia-smi printed a warning among its rows; the rows are read', { line: clip(line) });
      return null;
    }
    const parsed = parseGpuLine(line, fields, at);
    if (!parsed.ok) {
      this.warnings.warn(parsed.problem, 'skipped an nvidia-smi line that is not a row of the query', { line: clip(line) });
      return null;
    }
    for (const problem of parsed.problems) {
      this.warnings.warn(problem, 'nvidia-smi printed a value that is not understood; reporting it as not available', { line: clip(line) });
    }
    return parsed.sample;
  }

  private spawnLoop(): void {
    const query = this.query!;
    const child = spawn(this.binary, [...queryArgs(query.fields), '-lms', String(this.intervalMs)], {
      env: this.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const startedAt = performance.now();
    let resolveExited!: () => void;
    const run: LoopRun = {
      child,
      rounds: new RoundGrouper(Math.max(...query.samples.map((s) => s.index))),
      startedAt,
      lastFiguresAt: startedAt,
      delivered: 0,
      lastStderr: '',
      exited: new Promise((resolve) => (resolveExited = resolve)),
    };
    this.run = run;

    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(run, line));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      if (line.trim()) run.lastStderr = line.trim();
    });
    // 'on', not 'once': a failed kill() emits 'error' too, and an unheard 'error' would crash the sidecar.
    child.on('error', (error) => {
      resolveExited();
      this.onChildGone(run, { error: error.message });
    });
    child.once('exit', (code, signal) => {
      resolveExited();
      this.onChildGone(run, { code, signal });
    });
  }

  private onLine(run: LoopRun, line: string): void {
    if (this.stopped || !line.trim()) return;
    const started = performance.now();
    const sample = this.toSample(line, this.query!.fields, this.now());
    if (sample) {
      for (const round of run.rounds.add(sample)) {
        if (round.some(hasFigures)) run.lastFiguresAt = performance.now();
        run.delivered += round.length;
        this.deliver(round);
        this.timed(this.roundMs + (performance.now() - started));
        this.roundMs = -(performance.now() - started);
      }
    }
    this.roundMs += performance.now() - started;
  }

  private deliver(round: GpuSample[]): void {
    if (this.stopped || round.length === 0) return;
    const devices = withMigInstances(round, this.migs);
    this.samples += devices.length;
    this.lastSampleAt = this.now();
    if (round.some(hasFigures)) this.state = 'ok';
    try {
      this.sink(devices);
    } catch (error) {
      this.warnings.warn('sink threw', 'the GPU sample consumer threw; samples keep coming', { err: (error as Error).message });
    }
  }

  private onChildGone(run: LoopRun, how: { code?: number | null; signal?: NodeJS.Signals | null; error?: string }): void {
    if (this.run !== run || this.stopped) return;
    this.run = null;
    const livedMs = performance.now() - run.startedAt;
    if (run.delivered > 0 && livedMs >= this.backoff.resetAfterMs) this.failuresInARow = 0;
    const delayMs = Math.min(this.backoff.initialMs * 2 ** this.failuresInARow, this.backoff.maxMs);
    this.failuresInARow++;

    const what = how.error ? `could not run: ${how.error}` : `exited (code ${how.code ?? 'none'}, signal ${how.signal ?? 'none'})`;
    this.fail(`nvidia-smi ${what}${run.lastStderr ? `: ${run.lastStderr}` : ''}`);
    this.warnings.warn(`child ${what}`, `nvidia-smi ${what}; restarting in ${delayMs} ms`, {
      code: how.code ?? null,
      signal: how.signal ?? null,
      stderr: run.lastStderr || null,
      lived_ms: Math.round(livedMs),
      restart_in_ms: delayMs,
    });
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.stopped) return;
      this.restarts++;
      this.spawnLoop();
    }, delayMs);
  }

  private checkStall(): void {
    const run = this.run;
    if (!run || this.stopped) return;
    const quietMs = performance.now() - run.lastFiguresAt;
    if (quietMs < this.stallMs) return;
    this.warnings.warn('child stalled', 'nvidia-smi has delivered no figures for a while; killing it to restart', {
      quiet_ms: Math.round(quietMs),
      stderr: run.lastStderr || null,
    });
    run.lastFiguresAt = performance.now();
    run.child.kill('SIGKILL');
  }

  private fail(message: string): void {
    this.lastError = message;
    if (!this.stopped) this.state = 'failing';
  }
}

function queryArgs(fields: readonly string[]): string[] {
  return [`--query-gpu=${fields.join(',')}`, '--format=csv,noheader,nounits'];
}

export type ExecResult = { ok: true; stdout: string } | { ok: false; reason: string; output: string; stdout: string; code: number | null };

export function execOnce(binary: string, args: string[], options: { env: NodeJS.ProcessEnv | undefined; timeoutMs: number; signal?: AbortSignal }): Promise<ExecResult> {
  return new Promise((resolve) => {
    execFile(
      binary,
      args,
      { env: options.env, timeout: options.timeoutMs, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT_BYTES, encoding: 'utf8', signal: options.signal },
      (error, stdout, stderr) => {
        if (!error) return resolve({ ok: true, stdout });
        const output = `${stdout}\n${stderr}`.trim();
        const code = typeof error.code === 'number' && !error.killed ? error.code : null;
        resolve({ ok: false, reason: execFailure(binary, error, output, options.timeoutMs), output, stdout, code });
      },
    );
  });
}

function execFailure(binary: string, error: ExecFileException, output: string, timeoutMs: number): string {
  if (error.code === 'ENOENT') return `"${binary}" not found (is the NVIDIA driver installed and nvidia-smi on PATH?)`;
  if (error.code === 'EACCES') return `"${binary}" is not executable`;
  if (error.killed) return `"${binary}" gave no answer within ${timeoutMs} ms`;
  const status = typeof error.code === 'number' ? `exit ${error.code}` : `signal ${error.signal ?? error.code ?? 'unknown'}`;
  return `"${binary}" failed (${status}): ${firstLine(output) || error.message}`;
}

async function terminate(run: LoopRun): Promise<void> {
  if (run.child.exitCode !== null || run.child.signalCode !== null) return;
  run.child.kill('SIGTERM');
  const grace = setTimeout(() => run.child.kill('SIGKILL'), STOP_GRACE_MS);
  await run.exited;
  clearTimeout(grace);
}

function firstLine(text: string): string {
  return text.split('\n').find((line) => line.trim())?.trim() ?? '';
}

function clip(line: string): string {
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}
