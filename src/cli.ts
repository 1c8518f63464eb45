#!/usr/bin/env node
import { stat } from 'node:fs/promises';
import module from 'node:module';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { STALL_DEFAULTS } from './analysis/stall-config.js';
import { GPU_SOURCES } from './counters/gpu-source-names.js';
import { DEFAULT_LIMITS } from './ingest/limits.js';
import { LOG_LEVELS } from './log/levels.js';
import { DEFAULT_REGRESSION_THRESHOLD_PCT } from './engine/runs-defaults.js';
import { DEFAULT_HISTORY_KEEP } from './outputs/past-runs-defaults.js';
import { DEFAULT_STREAM_RATE_HZ } from './outputs/stream-defaults.js';
import { registerGateCommand } from './gate-command.js';
import { registerMergeCommand } from './merge-command.js';
import { registerRunCommand } from './run-command.js';
import { registerTopCommand } from './top-command.js';
import { parseTime } from './prometheus/time-arg.js';
import { inertJson, inertText } from './protocol/terminal-text.js';
import type { ServeOptions } from './serve-command.js';
import { DEFAULT_JOURNAL_MAX_BYTES } from './serve-defaults.js';
import { VERSION } from './version.js';

/*
 * Every command starts in well under a second: what is imported above is only what declares the
 * commands (their options and defaults); each command's own code is imported when it runs. Node
 * 22.1+ also keeps the compiled code of the modules imported from here on disk (its module compile
 * cache, in the temporary folder; a folder it cannot write just goes without), so later starts skip
 * compiling them. Node 20 has no such cache: there it is a no-op.
 */
(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();

function integer(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || n < min || n > max) {
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    }
    return n;
  };
}

function seconds(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
      throw new InvalidArgumentError(`must be a number of seconds from ${min} to ${max}`);
    }
    return n;
  };
}

function price(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1e6) throw new InvalidArgumentError('must be a price from 0 to 1000000 (per GPU-hour, in your currency)');
  return n;
}

function rate(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0.2 || n > 50) throw new InvalidArgumentError('must be a number of updates a second from 0.2 to 50');
  return n;
}

function percent(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 1000) throw new InvalidArgumentError('must be a percentage above 0, such as 10');
  return n;
}

function envBoolean(name: string): boolean {
  const value = (process.env[name] ?? '').trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(value)) return true;
  if (['', '0', 'false', 'no', 'off'].includes(value)) return false;
  throw new InvalidArgumentError(`${name}=${process.env[name]} is invalid: use true or false`);
}

function httpUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be an http(s) URL such as http://HOST:9400/metrics');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidArgumentError('must be an http(s) URL such as http://HOST:9400/metrics');
  return value;
}

/** A summary file, or the summary.json of the folder given. */
async function summaryFile(target: string): Promise<string> {
  const info = await stat(target).catch((error: Error) => {
    throw new Error(`${target}: ${error.message}`);
  });
  return info.isDirectory() ? path.join(target, 'summary.json') : target;
}

const program = new Command('stepscope')
  .description('Live per-step bottleneck diagnosis for GPU training jobs')
  .version(VERSION);

program
  .command('serve')
  .description('run the sidecar: receive step timing from the hooks of a training job')
  .addOption(new Option('--host <address>', 'address to listen on').default('127.0.0.1').env('STEPSCOPE_HOST'))
  .addOption(new Option('--port <n>', 'port to listen on (0 picks a free one)').default(9477).argParser(integer(0, 65535)).env('STEPSCOPE_PORT'))
  .addOption(new Option('--out <dir>', 'directory for the journal of accepted records (resumed on restart)').env('STEPSCOPE_OUT'))
  .addOption(new Option('--exit-on-end', 'exit 0 once every job has ended').default(false).env('STEPSCOPE_EXIT_ON_END'))
  .addOption(
    new Option('--end-grace <seconds>', 'a job whose hooks have all been disconnected this long has ended')
      .default(10)
      .argParser(seconds(0, 86_400))
      .env('STEPSCOPE_END_GRACE'),
  )
  .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info').env('STEPSCOPE_LOG_LEVEL'))
  .addOption(
    new Option('--max-frame-bytes <n>', 'largest websocket frame accepted from a hook')
      .default(1024 * 1024)
      .argParser(integer(1024, 64 * 1024 * 1024))
      .env('STEPSCOPE_MAX_FRAME_BYTES'),
  )
  .addOption(new Option('--token <token>', 'require Authorization: Bearer <token> on every request and websocket (needed to listen beyond loopback)').env('STEPSCOPE_TOKEN'))
  .addOption(new Option('--insecure', 'allow listening beyond loopback without a token').default(false).env('STEPSCOPE_INSECURE'))
  .addOption(new Option('--max-connections <n>', 'hook connections accepted at once').default(DEFAULT_LIMITS.maxConnections).argParser(integer(1, 100_000)).env('STEPSCOPE_MAX_CONNECTIONS'))
  .addOption(new Option('--max-frame-rate <n>', 'frames a second one hook connection may send (bursts of twice that)').default(DEFAULT_LIMITS.framesPerSecond).argParser(integer(1, 100_000)).env('STEPSCOPE_MAX_FRAME_RATE'))
  // No commander default: unset, they are sized to the memory the sidecar has (and logged at start).
  .addOption(new Option('--max-jobs <n>', `jobs one sidecar keeps (default: ${DEFAULT_LIMITS.maxJobs}, fewer where its memory holds fewer)`).argParser(integer(1, 10_000)).env('STEPSCOPE_MAX_JOBS'))
  .addOption(new Option('--max-ranks <n>', `ranks one job may have (default: ${DEFAULT_LIMITS.maxRanksPerJob}, fewer where its memory holds fewer)`).argParser(integer(1, 65_536)).env('STEPSCOPE_MAX_RANKS'))
  .addOption(new Option('--gpu-source <source>', 'where GPU counters come from; auto tries nvidia-smi, then DCGM, then the hooks').choices(GPU_SOURCES).default('auto').env('STEPSCOPE_GPU_SOURCE'))
  .addOption(new Option('--nvidia-smi <path>', 'the nvidia-smi executable').default('nvidia-smi').env('STEPSCOPE_NVIDIA_SMI'))
  .addOption(new Option('--gpu-interval <ms>', 'GPU sampling interval').default(500).argParser(integer(100, 60_000)).env('STEPSCOPE_GPU_INTERVAL'))
  .addOption(new Option('--dcgm-url <url>', "the node's dcgm-exporter, e.g. http://HOST:9400/metrics").argParser(httpUrl).env('STEPSCOPE_DCGM_URL'))
  .addOption(new Option('--dcgm-pod <name>', "this pod's name, to pick its GPUs from DCGM (default: $POD_NAME)").env('STEPSCOPE_DCGM_POD'))
  .addOption(new Option('--dcgm-namespace <name>', "this pod's namespace (default: $POD_NAMESPACE)").env('STEPSCOPE_DCGM_NAMESPACE'))
  .addOption(new Option('--host-interval <ms>', 'host CPU/memory/disk/network sampling interval while a job is live (every 5 s, or this if longer, while none is)').default(1000).argParser(integer(250, 60_000)).env('STEPSCOPE_HOST_INTERVAL'))
  .addOption(new Option('--proc-root <dir>', "where the host's procfs is mounted (e.g. /host/proc from a hostPath volume)").default('/proc').env('STEPSCOPE_PROC_ROOT'))
  .addOption(new Option('--sim-scenario <file>', 'JSON scenario for --gpu-source sim').env('STEPSCOPE_SIM_SCENARIO'))
  .addOption(new Option('--window <seconds>', 'length of the window that matches steps with counters and decides verdicts').default(4).argParser(seconds(1, 600)).env('STEPSCOPE_WINDOW'))
  .addOption(new Option('--hold <seconds>', 'a new verdict takes over once it has held this long').default(2).argParser(seconds(0, 600)).env('STEPSCOPE_HOLD'))
  .addOption(new Option('--gpu-hour-price <price>', 'what a GPU-hour costs, to price the GPU time lost (waste ledger)').argParser(price).env('STEPSCOPE_GPU_HOUR_PRICE'))
  .addOption(new Option('--baseline <summary.json>', "a good run's summary: compare every run with it, live and in the summary, instead of with the job's own history").env('STEPSCOPE_BASELINE'))
  .addOption(new Option('--history <dir>', "where each finished run's summary is kept, to compare the job's next runs with (default: <out>/history)").env('STEPSCOPE_HISTORY'))
  .addOption(new Option('--history-keep <n>', 'runs kept per job in the history').default(DEFAULT_HISTORY_KEEP).argParser(integer(1, 10_000)).env('STEPSCOPE_HISTORY_KEEP'))
  .addOption(
    new Option('--regression-threshold <pct>', 'a run this many percent slower per sample than its reference (the median of its recent runs, or --baseline) is a regression')
      .default(DEFAULT_REGRESSION_THRESHOLD_PCT)
      .argParser(percent)
      .env('STEPSCOPE_REGRESSION_THRESHOLD'),
  )
  .addOption(
    new Option('--journal-max-bytes <n>', 'hard cap on the journal under --out (checkpoint + segments); counter samples are given up first, steps wait')
      .default(DEFAULT_JOURNAL_MAX_BYTES)
      .argParser(integer(16 * 1024 * 1024, 1024 ** 4))
      .env('STEPSCOPE_JOURNAL_MAX_BYTES'),
  )
  .addOption(new Option('--stream-rate <n>', 'state updates a second sent to each viewer on ws /v1/stream, at most one per engine tick (every 250 ms; while a viewer watches, also as steps come in, at most this often)').default(DEFAULT_STREAM_RATE_HZ).argParser(rate).env('STEPSCOPE_STREAM_RATE'))
  .addOption(
    new Option('--stall-steps <k>', 'a rank that is alive but has not ended a step for k of its median steps (and --stall-floor) is stalled')
      .default(STALL_DEFAULTS.steps)
      .argParser(integer(1, 1000))
      .env('STEPSCOPE_STALL_STEPS'),
  )
  .addOption(new Option('--stall-floor <seconds>', 'a rank is never stalled before this long without a step, whatever its step time').default(STALL_DEFAULTS.floorMs / 1000).argParser(seconds(1, 3600)).env('STEPSCOPE_STALL_FLOOR'))
  .addOption(
    new Option('--stack-dumps', "when a job hangs, write every rank's stacks (every thread's, whole) under --out/hang-<job>[.<run>]/, one file a rank (stepscope.stack-dump/v1)")
      .default(false)
      .env('STEPSCOPE_STACK_DUMPS'),
  )
  .option('--no-capture', 'never ask a hook for a deep capture (a torch.profiler window) on a verdict or on demand')
  .addOption(new Option('--capture-after <seconds>', 'a non-healthy verdict held this long asks one rank for a deep capture').default(60).argParser(seconds(1, 86_400)).env('STEPSCOPE_CAPTURE_AFTER'))
  .addOption(new Option('--capture-every <seconds>', 'at most one deep capture a job this often').default(600).argParser(seconds(1, 86_400)).env('STEPSCOPE_CAPTURE_EVERY'))
  .addOption(new Option('--capture-steps <k>', 'steps a deep capture holds').default(20).argParser(integer(1, 1000)).env('STEPSCOPE_CAPTURE_STEPS'))
  .action(async (options, command: Command) => {
    // commander turns a boolean flag on for any value of its variable, "false" included.
    for (const [key, name] of [['exitOnEnd', 'STEPSCOPE_EXIT_ON_END'], ['insecure', 'STEPSCOPE_INSECURE'], ['stackDumps', 'STEPSCOPE_STACK_DUMPS']] as const) {
      if (command.getOptionValueSource(key) === 'env') options[key] = envBoolean(name);
    }
    // The process's own V8 flags, set here rather than in serve(): tests run serve() in their process.
    const { setSidecarV8Flags } = await import('./ingest/node-flags.js');
    setSidecarV8Flags();
    const { serve } = await import('./serve-command.js');
    const { sidecar } = await serve({
      host: options.host,
      port: options.port,
      out: options.out,
      exitOnEnd: options.exitOnEnd,
      endGraceS: options.endGrace,
      logLevel: options.logLevel,
      maxFrameBytes: options.maxFrameBytes,
      gpuSource: options.gpuSource,
      nvidiaSmi: options.nvidiaSmi,
      gpuIntervalMs: options.gpuInterval,
      dcgmUrl: options.dcgmUrl,
      dcgmPod: options.dcgmPod ?? process.env.POD_NAME,
      dcgmNamespace: options.dcgmNamespace ?? process.env.POD_NAMESPACE,
      hostIntervalMs: options.hostInterval,
      procRoot: options.procRoot,
      simScenario: options.simScenario,
      windowS: options.window,
      holdS: options.hold,
      gpuHourPrice: options.gpuHourPrice ?? null,
      baseline: options.baseline,
      historyDir: options.history,
      historyKeep: options.historyKeep,
      regressionThresholdPct: options.regressionThreshold,
      streamRateHz: options.streamRate,
      stallSteps: options.stallSteps,
      stallFloorS: options.stallFloor,
      stackDumps: options.stackDumps,
      capture: options.capture,
      captureAfterS: options.captureAfter,
      captureEveryS: options.captureEvery,
      captureSteps: options.captureSteps,
      journalMaxBytes: options.journalMaxBytes,
      handleSignals: true,
      token: options.token,
      insecure: options.insecure,
      limits: {
        maxConnections: options.maxConnections,
        framesPerSecond: options.maxFrameRate,
        burst: 2 * options.maxFrameRate,
        maxJobs: options.maxJobs,
        maxRanksPerJob: options.maxRanks,
      },
    } satisfies ServeOptions);
    process.exitCode = await sidecar.stopped;
  });

program
  .command('report')
  .description("render an end-of-job summary again, as text, Markdown, JSON or a self-contained HTML page; or, with --prometheus, make a job's across all its pods")
  .argument('[summary]', 'a summary.json written by the sidecar, or the --out folder it is in')
  .addOption(new Option('--format <format>', 'output format').choices(['text', 'md', 'json']).default('text'))
  .option('--html', 'write the HTML report: charts over the run, the verdict timeline, ranks, GPUs, the comparison and the advice, in one file that opens offline')
  .option('-o, --output <file>', 'where --html writes (default: report.html beside the summary, or report-<job>.html here; - for stdout)')
  .option('--prometheus <url>', "make the job's summary across all its pods from this Prometheus (or Thanos, Mimir) by range queries, with --job")
  .option('--job <job>', 'the training_job to report on (with --prometheus)')
  .option('--from <time>', 'start of the range: now, a duration back (6h), RFC 3339 or Unix seconds (with --prometheus)', (v: string) => parseTime(v), undefined)
  .option('--to <time>', 'end of the range (default now)', (v: string) => parseTime(v), undefined)
  .option('--step <seconds>', "the timeline's resolution (default: the range in about 300 steps)", seconds(1, 86_400))
  .option('--window <seconds>', 'the window each step is judged over, as a sidecar\'s --window (default 60; at least two scrapes)', seconds(1, 86_400))
  .option('--gpu-hour-price <price>', 'what a GPU-hour costs, to price the GPU time lost', price)
  .option('--write <dir>', 'with --prometheus: also write summary.json, summary.md and report.html there, as a sidecar would')
  .action(async (target: string | undefined, options: { format: 'text' | 'md' | 'json'; html?: boolean; output?: string; prometheus?: string; job?: string; from?: number; to?: number; step?: number; window?: number; gpuHourPrice?: number; write?: string }) => {
    if (options.prometheus !== undefined) {
      if (target !== undefined) throw new InvalidArgumentError('give a summary file or --prometheus, not both');
      if (options.job === undefined) throw new InvalidArgumentError('--prometheus needs --job: the training_job to report on');
      const to = options.to ?? Date.now() / 1000;
      const { reportFromPrometheus } = await import('./report-prometheus.js');
      await reportFromPrometheus({ ...options, prometheus: options.prometheus, job: options.job, to, from: options.from ?? to - 86_400 });
      return;
    }
    if (target === undefined) throw new InvalidArgumentError('give a summary.json (or its folder), or --prometheus URL --job J');
    const file = await summaryFile(target);
    const { readSummary, writeAtomically } = await import('./outputs/summary-files.js');
    const summary = await readSummary(file);
    if (!options.html) {
      const { renderSummary } = await import('./outputs/summary-render.js');
      process.stdout.write(options.format === 'json' ? inertJson(JSON.stringify(summary, null, 2)) + '\n' : inertText(renderSummary(summary, options.format)));
      return;
    }
    const { htmlReport } = await import('./outputs/report-html-file.js');
    const html = await htmlReport(summary);
    if (options.output === '-') {
      process.stdout.write(html);
      return;
    }
    const out = options.output ?? path.join(path.dirname(file), path.basename(file).replace(/^summary/, 'report').replace(/\.json$/, '') + '.html');
    await writeAtomically(out, html);
    process.stdout.write(`${out}\n`);
  });

program
  .command('compare')
  .description('is it really slower? compare a run against a baseline run')
  .argument('<baseline>', "the good run's summary.json")
  .argument('<current>', "this run's summary.json")
  .option('--json', 'print the comparison as JSON')
  .action(async (baselineFile: string, currentFile: string, options: { json?: boolean }) => {
    const [{ compare }, { readSummary }] = await Promise.all([import('./analysis/compare.js'), import('./outputs/summary-files.js')]);
    const comparison = compare(await readSummary(baselineFile), await readSummary(currentFile));
    process.stdout.write(options.json ? inertJson(JSON.stringify(comparison, null, 2)) + '\n' : inertText(comparison.text) + '\n');
  });

program
  .command('replay')
  .description("recompute a recording's verdicts, timeline and summary from its journal (an --out folder)")
  .argument('<out-dir>', 'the --out folder of a sidecar (its journal), or a journal file in one')
  .option('--speed <x>', 'replay paced at this many times real time, printing verdict changes as they happen (default: at once)', (value: string) => {
    const n = Number(value);
    if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number');
    return n;
  })
  .addOption(new Option('--format <format>', 'how to print each summary').choices(['text', 'md', 'json']).default('text'))
  .option('--write <dir>', 'also write the summaries there, as the sidecar would')
  .addOption(new Option('--max-jobs <n>', "the recording sidecar's --max-jobs (bounds the checkpoint it could write)").default(DEFAULT_LIMITS.maxJobs).argParser(integer(1, 10_000)))
  .addOption(new Option('--max-ranks <n>', "the recording sidecar's --max-ranks").default(DEFAULT_LIMITS.maxRanksPerJob).argParser(integer(1, 65_536)))
  .action(async (dir: string, options: { speed?: number; format: 'text' | 'md' | 'json'; write?: string; maxJobs: number; maxRanks: number }) => {
    const { runReplay } = await import('./replay-command.js');
    process.exitCode = await runReplay(dir, { ...options, limits: { maxJobs: options.maxJobs, maxRanksPerJob: options.maxRanks } });
  });

program
  .command('watch')
  .description('the live viewer: verdicts, ranks, GPUs and history of the jobs the sidecars see')
  .argument('[sidecars...]', 'sidecar addresses, one per node of the job (ws://HOST:PORT; default ws://127.0.0.1:9477 without --selector)')
  .option('--plain', 'one plain line per update instead of the full-screen view (the default when stdout is not a terminal)')
  .addOption(new Option('--token <token>', 'sent as Authorization: Bearer <token>').env('STEPSCOPE_TOKEN'))
  .option('-l, --selector <labels>', "the job's pods by Kubernetes label selector (e.g. job-name=train): each one's sidecar through kubectl port-forward")
  .option('-n, --namespace <namespace>', 'their namespace (default: kubectl\'s)')
  .option('--context <context>', 'the kubectl context (default: the current one)')
  .option('--kubectl <path>', 'the kubectl to run', 'kubectl')
  .option('--sidecar-port <n>', "the sidecar's port in each pod", integer(1, 65535), 9477)
  .action(async (given: string[], options: { plain?: boolean; token?: string; selector?: string; namespace?: string; context?: string; kubectl: string; sidecarPort: number }) => {
    const stopping = new AbortController();
    const stop = new Promise<void>((resolve) => stopping.signal.addEventListener('abort', () => resolve(), { once: true }));
    // The first signal stops the viewer in order; a second exits at once (the port-forwards still stopped, on 'exit').
    let signals = 0;
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => (++signals > 1 ? process.exit(130) : stopping.abort()));
    // Loaded here, not at start: the sidecar never needs the viewer's React and ink.
    const { startWatch } = await import('./viewer/watch.js');
    const { kubeTargets } = await import('./viewer/kube.js');
    const kube = options.selector
      ? await kubeTargets({ selector: options.selector, namespace: options.namespace, context: options.context, kubectl: options.kubectl, port: options.sidecarPort, signal: stopping.signal })
      : null;
    // Every way out stops the port-forwards: an error, a signal, the viewer quitting.
    try {
      const targets = [...given, ...(kube?.targets ?? [])];
      const { done } = startWatch({ targets: targets.length ? targets : ['ws://127.0.0.1:9477'], token: options.token, plain: options.plain, stop });
      await done;
    } finally {
      kube?.close();
    }
    process.exit(0);
  });

program
  .command('demo')
  .description('see stepscope at work without a GPU: a training loop through three bottlenecks, live, then its summary')
  .option('--fast', 'regimes of 8 s instead of 20 (about 30 s in all)')
  .option('--real', 'train a real model on the GPU with its real counters (needs PyTorch with CUDA)')
  .option('--out <dir>', 'where the summary and logs go (default ./stepscope-demo-<time>)')
  .option('--plain', 'plain lines instead of the full-screen viewer')
  .action(async (options: { fast?: boolean; real?: boolean; out?: string; plain?: boolean }) => {
    const { DemoError } = await import('./demo/children.js');
    const { runDemo } = await import('./demo/demo.js');
    try {
      await runDemo(options);
      process.exit(0);
    } catch (error) {
      if (!(error instanceof DemoError)) throw error;
      process.stderr.write(`stepscope demo: ${inertText(error.message)}\n`);
      process.exit(1);
    }
  });

registerRunCommand(program);
registerMergeCommand(program);
registerTopCommand(program);
registerGateCommand(program);

program
  .command('capture')
  .description("ask a running job's hook for a deep capture: a torch.profiler window of K steps, stored by the sidecar under its --out")
  .requiredOption('--job <name>', 'the job')
  .option('--rank <r>', 'the rank (default: the straggler, else the lowest connected rank)', integer(0, 65535))
  .option('--steps <k>', 'steps in the window (default: the sidecar\'s --capture-steps, 20)', integer(1, 1000))
  .addOption(new Option('--url <url>', "the sidecar's HTTP address").default('http://127.0.0.1:9477').argParser(httpUrl).env('STEPSCOPE_SIDECAR'))
  .addOption(new Option('--token <token>', 'sent as Authorization: Bearer <token>').env('STEPSCOPE_TOKEN'))
  .action(async (options: { job: string; rank?: number; steps?: number; url: string; token?: string }) => {
    const response = await fetch(new URL('/v1/capture', options.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(options.token ? { authorization: `Bearer ${options.token}` } : {}) },
      body: JSON.stringify({ job: options.job, ...(options.rank !== undefined ? { rank: options.rank } : {}), ...(options.steps !== undefined ? { steps: options.steps } : {}) }),
    });
    const answer = (await response.json().catch(() => null)) as { ok?: boolean; reason?: string | null; capture?: { id: number; rank: number; steps: number } | null } | null;
    if (response.status === 202 && answer?.capture) {
      process.stdout.write(`asked rank ${answer.capture.rank} of ${options.job} for ${answer.capture.steps} steps (capture ${answer.capture.id}): the trace appears under the sidecar's --out/captures/ and in its state\n`);
      return;
    }
    process.stderr.write(`stepscope capture: ${inertText(answer?.reason ?? `the sidecar answered ${response.status}`)}\n`);
    process.exitCode = 1;
  });

program.parseAsync().catch((error: Error) => {
  // A message may quote what kubectl, a sidecar or a file said.
  process.stderr.write(`stepscope: ${inertText(error.message)}\n`);
  process.exit(1);
});
