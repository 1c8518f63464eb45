import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';

/**
 * `stepscope run [--url URL] [--job NAME] -- python train.py …`: runs a training command with the
 * Python hook's zero-code path on, without a line of the script changed. It sets STEPSCOPE_AUTO=1
 * and puts the hook's start-up folder (python-hook/stepscope/_boot, whose sitecustomize.py waits for
 * torch to be imported) and the hook in front of PYTHONPATH, so every Python process the command
 * starts — `python`, `torchrun` and each rank it starts — has its training loop timed. It then runs
 * the command, forwards the signals a supervisor sends (SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT;
 * SIGINT too where no terminal sent it to the whole group already) and exits as the command did.
 */

/** python-hook/ beside dist/ (as the npm package and the image lay it out), or $STEPSCOPE_HOOK_PATH. */
export function hookPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.STEPSCOPE_HOOK_PATH || path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'python-hook');
}

/** The start-up folder that makes STEPSCOPE_AUTO=1 work in any Python process. */
export function bootPath(hook: string): string {
  return path.join(hook, 'stepscope', '_boot');
}

export interface RunCommandOptions {
  url?: string;
  job?: string;
  env?: NodeJS.ProcessEnv;
  err?: NodeJS.WritableStream;
}

/** The environment `command` runs with: the caller's, with the zero-code path switched on. */
export function runEnvironment(options: RunCommandOptions = {}): NodeJS.ProcessEnv {
  const base = options.env ?? process.env;
  const hook = hookPath(base);
  const entries = [bootPath(hook), hook, ...(base.PYTHONPATH ?? '').split(path.delimiter)].filter((p, i, all) => p && all.indexOf(p) === i);
  const env: NodeJS.ProcessEnv = { ...base, STEPSCOPE_AUTO: '1', PYTHONPATH: entries.join(path.delimiter) };
  if (options.url) env.STEPSCOPE_URL = options.url;
  if (options.job) env.STEPSCOPE_JOB = options.job;
  return env;
}

const FORWARDED: NodeJS.Signals[] = ['SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGINT'];

/** Runs `command` with the zero-code path on; resolves with the exit status this process should have. */
export function runCommand(command: string[], options: RunCommandOptions = {}): Promise<number> {
  const err = options.err ?? process.stderr;
  const [file, ...args] = command;
  if (!file) {
    err.write('stepscope run: no command given: stepscope run [--url URL] [--job NAME] -- python train.py ...\n');
    return Promise.resolve(2);
  }
  const env = runEnvironment(options);
  const boot = path.join(bootPath(hookPath(env)), 'sitecustomize.py');
  if (!existsSync(boot)) {
    err.write(`stepscope run: the Python hook is not at ${hookPath(env)} (no ${boot}); set STEPSCOPE_HOOK_PATH to the python-hook folder\n`);
    return Promise.resolve(2);
  }
  return new Promise((resolve) => {
    const child = spawn(file, args, { stdio: 'inherit', env });
    // A terminal sends SIGINT (Ctrl-C) to the whole foreground group, the command included: passing
    // it on again would interrupt the command's own clean-up. Elsewhere (kill, a supervisor) it is
    // only ours, and the command gets it from us.
    const interactive = process.stdin.isTTY === true;
    const handlers = new Map<NodeJS.Signals, () => void>();
    for (const signal of FORWARDED) {
      const handler = () => {
        if (signal === 'SIGINT' && interactive) return;
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      };
      handlers.set(signal, handler);
      process.on(signal, handler);
    }
    const release = () => {
      for (const [signal, handler] of handlers) process.off(signal, handler);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      release();
      err.write(`stepscope run: cannot run ${file}: ${error.message}\n`);
      resolve(error.code === 'ENOENT' ? 127 : 126);
    });
    child.once('exit', (code, signal) => {
      release();
      if (signal) {
        // Exit as the command did: by the same signal where it ends this process, else 128 + its number.
        resolve(128 + (constants.signals[signal] ?? 0));
        return;
      }
      resolve(code ?? 1);
    });
  });
}

/** Adds `run` to the CLI (src/cli.ts): `registerRunCommand(program)`. */
export function registerRunCommand(program: Command): Command {
  // The command's own options come after it (stepscope run python train.py --lr 0.1): they are its,
  // not run's nor the program's. Commander allows that once options are positional.
  program.enablePositionalOptions();
  return program
    .command('run')
    .description('run a training command with its loop timed by the Python hook, unmodified (zero-code): stepscope run -- python train.py')
    .usage('[--url <ws-url>] [--job <name>] -- <command> [args...]')
    .option('--url <ws-url>', 'the sidecar the hooks send to (sets STEPSCOPE_URL; default: $STEPSCOPE_URL, else ws://127.0.0.1:9477/v1/ingest)')
    .option('--job <name>', 'the job the ranks report (sets STEPSCOPE_JOB; default: $STEPSCOPE_JOB, else one id per launch)')
    .argument('<command...>', 'the command: python train.py …, torchrun …, accelerate launch …')
    .passThroughOptions()
    .action(async (command: string[], options: { url?: string; job?: string }) => {
      process.exitCode = await runCommand(command, options);
    });
}
