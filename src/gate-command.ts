import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { Summary } from './protocol/summary.js';
import type { GateReference, GateResult } from './gate.js';
import { GATE_DEFAULTS, GATE_EXIT } from './gate-defaults.js';
import { inertJson, inertText } from './protocol/terminal-text.js';

/**
 * `stepscope gate RUN [--baseline B | --history DIR]`: a CI step after a short canary training run.
 * Exit 0 within bounds, 1 on a regression (its cause, phase and environment drift said), 2 when it
 * cannot judge (too few steady steps, no reference, an unreadable or incomparable file, bad usage).
 */

export interface GateCommandOptions {
  baseline?: string;
  history?: string;
  sigma: number;
  minChange: number;
  minSteps: number;
  junit?: string;
  markdown?: string;
  json?: boolean;
}

/** A summary file, or the summary.json of the --out folder given. */
async function summaryPath(target: string): Promise<string> {
  const info = await stat(target).catch((error: Error) => {
    throw new Error(`${target}: ${error.message}`);
  });
  return info.isDirectory() ? path.join(target, 'summary.json') : target;
}

/** The job's earlier comparable runs from its history (the run itself left out), oldest first. */
async function historyReference(dir: string, current: Summary): Promise<GateReference | null> {
  const [{ medianReference }, { fingerprintOf, REFERENCE_RUNS }, { PastRunsStore }] = await Promise.all([import('./analysis/compare.js'), import('./engine/runs.js'), import('./outputs/runs-store.js')]);
  const skipped: string[] = [];
  const store = new PastRunsStore(dir, 10_000, (s) => skipped.push(`${s.file}: ${s.reason}`));
  const entries = await store.load(current.job);
  const key = fingerprintOf(current).key;
  const runs = entries
    .filter((e) => e.record.fingerprint === key && e.summary.steps > 0 && !(e.record.started_at === current.started_at && e.record.ended_at === current.ended_at))
    .slice(-REFERENCE_RUNS)
    .map((e) => e.summary);
  const reference = medianReference(runs);
  return reference ? { label: reference.label, runs, reference } : null;
}

export async function runGate(target: string, options: GateCommandOptions, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr): Promise<number> {
  // Imported here, not at start: the CLI declares `gate` without loading it.
  const [{ referenceOf }, { gate }, { gateMarkdown, junitXml }, { readSummary, writeAtomically }] = await Promise.all([
    import('./analysis/compare.js'),
    import('./gate.js'),
    import('./gate-report.js'),
    import('./outputs/summary-files.js'),
  ]);
  let result: GateResult;
  try {
    const file = await summaryPath(target);
    const current = await readSummary(file);
    let reference: GateReference | null = null;
    if (options.baseline) {
      const baseline = await readSummary(await summaryPath(options.baseline));
      reference = { label: `baseline (run of ${baseline.ended_at.slice(0, 10)})`, runs: [baseline], reference: referenceOf(baseline) };
    } else {
      const dir = options.history ?? path.join(path.dirname(file), 'history');
      if (options.history || existsSync(dir)) reference = await historyReference(dir, current);
    }
    result = gate(current, reference, { sigma: options.sigma, minChangePct: options.minChange, minSteps: options.minSteps });
  } catch (error) {
    err.write(`stepscope gate: cannot judge: ${inertText((error as Error).message)}\n`);
    return GATE_EXIT['cannot-judge'];
  }
  const { comparison: _comparison, ...shown } = result;
  try {
    if (options.junit) await writeAtomically(options.junit, junitXml([result]));
    if (options.markdown) await writeAtomically(options.markdown, gateMarkdown([result]));
  } catch (error) {
    // Not a regression: a pipeline must not read a full disk or a bad path as "slower".
    out.write(options.json ? inertJson(JSON.stringify(shown, null, 2)) + '\n' : inertText(result.text) + '\n');
    err.write(`stepscope gate: cannot write its report: ${inertText((error as Error).message)}\n`);
    return GATE_EXIT['cannot-judge'];
  }
  out.write(options.json ? inertJson(JSON.stringify(shown, null, 2)) + '\n' : inertText(result.text) + '\n');
  return GATE_EXIT[result.outcome];
}

function positive(max: number, what: string) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > max) throw new InvalidArgumentError(`must be ${what} from 0 to ${max}`);
    return n;
  };
}

export function registerGateCommand(program: Command): void {
  program
    .command('gate')
    .description('CI gate: fail (exit 1) when a finished run is slower per sample than its baseline or history beyond the noise; 2 when it cannot judge')
    .argument('<run>', "the run's summary.json, or the sidecar's --out folder")
    .option('--baseline <summary>', "a good run's summary.json (or --out folder) to judge against")
    .option('--history <dir>', "the job's run history (default: the history folder beside the summary, as the sidecar keeps it)")
    .addOption(new Option('--sigma <k>', "the bound, in multiples of the reference's spread").default(GATE_DEFAULTS.sigma).argParser(positive(100, 'a number')))
    .addOption(new Option('--min-change <pct>', 'the bound is never tighter than this, percent').default(GATE_DEFAULTS.minChangePct).argParser(positive(1000, 'a percentage')))
    .addOption(
      new Option('--min-steps <n>', 'steady steps (after warm-up) a run needs to be judged')
        .default(GATE_DEFAULTS.minSteps)
        .argParser((value: string) => {
          const n = positive(1e9, 'a whole number of steps')(value);
          if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number of steps from 1');
          return n;
        }),
    )
    .option('--junit <file>', 'write the result as JUnit XML')
    .option('--markdown <file>', 'write the result as Markdown (e.g. for $GITHUB_STEP_SUMMARY)')
    .option('--json', 'print the result as JSON')
    // Usage errors are "cannot judge" (2), not a regression (1): a CI job must tell them apart.
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : GATE_EXIT['cannot-judge']))
    .action(async (target: string, options: GateCommandOptions) => {
      process.exitCode = await runGate(target, options);
    });
}
