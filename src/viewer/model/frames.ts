import { InputError, parseInput } from '../../protocol/parse.js';
import { inertStrings } from '../../protocol/terminal-text.js';
import {
  RegressionFrameSchema,
  SnapshotFrameSchema,
  STREAM_VERSION,
  UpdateFrameSchema,
  VerdictFrameSchema,
  type RegressionFrame,
  type StreamFrame,
} from '../../protocol/stream.js';

/** What the viewer reads: the frames every viewer gets, and the events it asks for (`?events=regression`). */
export type ViewerFrame = StreamFrame | RegressionFrame;

/** A frame the viewer does not take. `frame` is its type where it had a known one. */
export class FrameError extends Error {
  constructor(
    message: string,
    readonly frame: ViewerFrame['type'] | null = null,
  ) {
    super(message);
    this.name = 'FrameError';
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

const SCHEMAS = { snapshot: SnapshotFrameSchema, update: UpdateFrameSchema, verdict: VerdictFrameSchema, regression: RegressionFrameSchema } as const;

function isFrameType(type: unknown): type is ViewerFrame['type'] {
  return typeof type === 'string' && Object.hasOwn(SCHEMAS, type);
}

/**
 * A stream frame from its JSON text, checked whole against the stream's schema (src/protocol/): a
 * sidecar of another version, something that is not a sidecar at all, or a frame that does not
 * hold what its type promises is refused rather than half-shown.
 */
export function parseFrame(text: string): ViewerFrame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FrameError(`not JSON: ${(error as Error).message}`);
  }
  if (!isObject(value)) throw new FrameError('not a JSON object');
  if (value.v !== STREAM_VERSION) throw new FrameError(`stream version ${String(value.v).slice(0, 16)}; this viewer reads version ${STREAM_VERSION}`);
  const type = value.type;
  if (!isFrameType(type)) throw new FrameError(`unknown frame type ${JSON.stringify(type)?.slice(0, 32) ?? 'undefined'}`);
  try {
    // A sidecar (or anything answering as one: ws:// has no TLS) names jobs, hosts and GPUs: printed inert.
    return inertStrings(parseInput(SCHEMAS[type], value, type));
  } catch (error) {
    if (error instanceof InputError) throw new FrameError(error.message, type);
    throw error;
  }
}
