import { pino, type Logger } from 'pino';

export type { Logger };

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function createLogger(level: LogLevel, destination: NodeJS.WritableStream = process.stdout): Logger {
  // A token must never reach a log, wherever a careless line might put it.
  const redact = { paths: ['token', '*.token', 'authorization', '*.authorization', 'headers.authorization', '*.headers.authorization'], censor: '[redacted]' };
  return pino({ level, base: { name: 'stepscope' }, redact }, destination);
}
