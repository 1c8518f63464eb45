import { pino, type Logger } from 'pino';
import type { LogLevel } from './levels.js';

export type { Logger };

export type { LogLevel };

export function createLogger(level: LogLevel, destination: NodeJS.WritableStream = process.stdout): Logger {
  // A token must never reach a log, wherever a careless line might put it.
  const redact = { paths: ['token', '*.token', 'authorization', '*.authorization', 'headers.authorization', '*.headers.authorization'], censor: '[redacted]' };
  return pino({ level, base: { name: 'stepscope' }, redact }, destination);
}
