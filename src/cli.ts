#!/usr/bin/env node
import { Command, InvalidArgumentError, Option } from 'commander';
import { LOG_LEVELS, type LogLevel } from './log.js';
import { serve } from './serve.js';
import { VERSION } from './server.js';

function integer(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || n < min || n > max) {
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    }
    return n;
  };
}

function positiveNumber(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a number of seconds >= 0');
  return n;
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
      .argParser(positiveNumber)
      .env('STEPSCOPE_END_GRACE'),
  )
  .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info').env('STEPSCOPE_LOG_LEVEL'))
  .addOption(
    new Option('--max-frame-bytes <n>', 'largest websocket frame accepted from a hook')
      .default(1024 * 1024)
      .argParser(integer(1024, 64 * 1024 * 1024))
      .env('STEPSCOPE_MAX_FRAME_BYTES'),
  )
  .action(async (options: { host: string; port: number; out?: string; exitOnEnd: boolean; endGrace: number; logLevel: LogLevel; maxFrameBytes: number }) => {
    const sidecar = await serve({
      host: options.host,
      port: options.port,
      out: options.out,
      exitOnEnd: options.exitOnEnd,
      endGraceS: options.endGrace,
      logLevel: options.logLevel,
      maxFrameBytes: options.maxFrameBytes,
    });
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.once(signal, () => void sidecar.stop(signal));
    }
    process.exitCode = await sidecar.stopped;
  });

program.parseAsync().catch((error: Error) => {
  process.stderr.write(`stepscope: ${error.message}\n`);
  process.exit(1);
});
