import { Writable } from 'node:stream';
import { createLogger } from '../../src/log/log.js';
import type { LogLine } from './sidecar.js';

/** A debug-level logger whose JSON lines land in `lines`, for tests of in-process parts. */
export function capturedLogger() {
  const lines: LogLine[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line) as LogLine);
      done();
    },
  });
  return { log: createLogger('debug', stream), lines };
}
