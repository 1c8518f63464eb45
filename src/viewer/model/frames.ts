import { STREAM_VERSION, type StreamFrame } from '../../outputs/stream-frames.js';

export class FrameError extends Error {}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A stream frame from its JSON text, checked as far as the viewer relies on it: a sidecar of another
 * version, or something that is not a sidecar at all, is refused rather than half-shown.
 */
export function parseFrame(text: string): StreamFrame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FrameError(`not JSON: ${(error as Error).message}`);
  }
  if (!isObject(value)) throw new FrameError('not a JSON object');
  if (value.v !== STREAM_VERSION) throw new FrameError(`stream version ${String(value.v)}; this viewer reads version ${STREAM_VERSION}`);
  switch (value.type) {
    case 'snapshot':
    case 'update': {
      if (typeof value.seq !== 'number' || typeof value.at !== 'string') throw new FrameError(`${value.type}: missing seq or at`);
      if (!isObject(value.state) || !Array.isArray(value.state.jobs) || !isObject(value.state.counters)) throw new FrameError(`${value.type}: missing state`);
      const history = value.history;
      if (!isObject(history) || typeof history.from !== 'string' || typeof history.slice_s !== 'number' || !Array.isArray(history.ranks) || !Array.isArray(history.gpus)) {
        throw new FrameError(`${value.type}: missing history`);
      }
      return value as unknown as StreamFrame;
    }
    case 'verdict':
      if (typeof value.job !== 'string' || typeof value.to !== 'string' || typeof value.at !== 'string') throw new FrameError('verdict: missing job, to or at');
      return value as unknown as StreamFrame;
    default:
      throw new FrameError(`unknown frame type ${JSON.stringify(value.type)}`);
  }
}
