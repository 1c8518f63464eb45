import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { closeReason } from '../src/ingest/connection.js';
import { ProtocolError } from '../src/protocol/messages.js';
import {
  anyValue,
  BASE_HELLO,
  brief,
  controlProblem,
  deepValue,
  encodeFrame,
  hugeText,
  hookSidecar,
  jsonProblem,
  lightMutation,
  MAX_REASON_BYTES,
  mutate,
  mutation,
  oddEnvFrame,
  rawDeep,
  rawMutate,
  rawMutation,
  rawValue,
  readFrame,
  REFUSAL_CODES,
  SEED,
  TRICKY_KEYS,
  validFrame,
  type Outcome,
} from './support/arbitraries.js';

/**
 * Property tests of the frame path (decode + parseHookMessage, as src/ingest/connection.ts runs it):
 * nothing a client sends can make it throw anything but a ProtocolError, and whatever it accepts is
 * plain data the sidecar can serialise. Seeded (SEED): a failure report names `seed` and `path`, and
 * `fc.assert(..., { seed, path })` replays it.
 */

const RUNS = 150;

/** Maps with `v` and a known `type`, and otherwise anything: the likeliest way past the first checks. */
const frameLike = fc
  .record({
    v: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, anyValue, hugeText),
    type: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('hello', 'steps', 'env', 'end', 'counters') }, anyValue, hugeText),
    rest: fc.dictionary(fc.oneof(fc.constantFrom(...TRICKY_KEYS), fc.string({ maxLength: 8 })), anyValue, { maxKeys: 10 }),
  })
  .map(({ v, type, rest }) => {
    const frame: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(rest)) Object.defineProperty(frame, key, { value, enumerable: true, writable: true, configurable: true });
    return Object.assign(frame, { v, type });
  });

/** Valid frames of every type with one value replaced, removed or added (JavaScript values, encoded by the codec). */
const mutatedFrame = fc.tuple(validFrame, mutation).map(([frame, m]) => mutate(frame, m).frame);

/** Every kind of JavaScript value a client could encode, each weighted towards what reaches deep code. */
const anyFrameValue = fc.oneof(anyValue, deepValue, frameLike, { weight: 3, arbitrary: mutatedFrame }, validFrame);

/** Raw bytes: noise, msgpack no encoder writes, valid frames with raw values spliced in. */
const anyFrameBytes = fc.oneof(
  fc.uint8Array({ maxLength: 64 }),
  rawValue,
  rawDeep,
  { weight: 3, arbitrary: fc.tuple(validFrame, rawMutation).map(([frame, m]) => rawMutate(frame, m)) },
);

/** The outcome of a frame, checked: a message, or a ProtocolError with a code and a reason ws can send. */
function checkedOutcome(bytes: Uint8Array): Outcome {
  const outcome = readFrame(bytes);
  if (!outcome.ok) {
    const { error } = outcome;
    expect(error).toBeInstanceOf(ProtocolError);
    expect(REFUSAL_CODES).toContain(error.code);
    const reason = closeReason(error.message);
    expect(Buffer.byteLength(reason), reason).toBeLessThanOrEqual(MAX_REASON_BYTES);
    // Cut at a character boundary: a prefix of the message, no replacement character made up.
    expect(error.message.startsWith(reason.endsWith('...') ? reason.slice(0, -3) : reason)).toBe(true);
  }
  return outcome;
}

describe('frames: decode + parseHookMessage never fail but with a ProtocolError', () => {
  it('for any value the codec encodes (bigints past 2^53 and 2^63, NaN, Infinity, bytes, dates, deep maps, huge strings, __proto__ keys, control characters) and for mutated valid frames', () => {
    fc.assert(
      fc.property(anyFrameValue, (value) => {
        checkedOutcome(encodeFrame(value));
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });

  it('for any bytes: noise, extension types, non-string and duplicate keys, bad UTF-8, absurd headers, valid frames with raw values spliced in', () => {
    fc.assert(
      fc.property(anyFrameBytes, (bytes) => {
        checkedOutcome(bytes);
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });

  it('a refusal says what was wrong in a bounded message, whatever the frame held (its log line cannot be inflated)', () => {
    // The close reason is cut to 123 bytes, but the same message goes to the log in full for every refused frame.
    fc.assert(
      fc.property(fc.oneof(anyFrameValue.map(encodeFrame), anyFrameBytes), (bytes) => {
        const outcome = readFrame(bytes);
        if (!outcome.ok) expect(outcome.error.message.length, brief(outcome.error.message)).toBeLessThanOrEqual(1024);
      }),
      { seed: SEED, numRuns: 60 },
    );
  });
});

// ---------------------------------------------------------------------------------------------------

/** Messages parseHookMessage accepts, from mutated valid frames (JavaScript values and raw bytes). */
const accepted = fc
  .oneof(
    { weight: 3, arbitrary: fc.tuple(validFrame, lightMutation).map(([frame, m]) => encodeFrame(mutate(frame, m).frame)) },
    { weight: 2, arbitrary: oddEnvFrame.map(encodeFrame) },
    fc.tuple(validFrame, rawMutation).map(([frame, m]) => rawMutate(frame, m)),
    validFrame.map(encodeFrame),
  )
  .map((bytes) => {
    try {
      return { bytes, outcome: readFrame(bytes) };
    } catch {
      // A frame the parser fails on with another exception: the properties above report those.
      return { bytes, outcome: { ok: false } as const };
    }
  })
  .filter((frame): frame is { bytes: Uint8Array; outcome: Extract<Outcome, { ok: true }> } => frame.outcome.ok);

describe('frames: whatever parseHookMessage accepts is representable', () => {
  it('the message is plain JSON data (no bigint, NaN, Infinity, bytes, dates or class instances)', () => {
    fc.assert(
      fc.property(accepted, ({ bytes, outcome }) => {
        // A steps message may also carry the frame's own bytes (for the journal): not data it holds.
        let message: { type: string } = outcome.message;
        if (outcome.message.type === 'steps') {
          const { bytes: carried, ...rest } = outcome.message;
          expect(carried === undefined || carried === bytes).toBe(true);
          message = rest;
        }
        expect(() => JSON.stringify(message)).not.toThrow();
        expect(jsonProblem(message, message.type), brief(message)).toBeNull();
      }),
      { seed: SEED, numRuns: 100 },
    );
  });

  it('the engine state after the message is applied (the /v1/state body) is plain JSON data, with no control character a client sent', async () => {
    await fc.assert(
      fc.asyncProperty(accepted, async ({ bytes, outcome }) => {
        // Through the real connection path: a hello first (the base one, unless the message is a hello).
        const sidecar = await hookSidecar();
        const socket = sidecar.connect();
        if (outcome.message.type !== 'hello') {
          sidecar.send(socket, encodeFrame(BASE_HELLO));
          await sidecar.flush();
        }
        sidecar.send(socket, bytes);
        const body = await sidecar.state();
        await sidecar.close();
        expect(sidecar.crashes).toEqual([]);
        expect(() => JSON.stringify(body)).not.toThrow();
        expect(jsonProblem(body, 'state')).toBeNull();
        // What a client sends is shown in terminals (stepscope watch), log lines and metric labels: no
        // control character of its own may get there (hook-schema.ts keeps them out of text and keys).
        expect(controlProblem(body, 'state')).toBeNull();
      }),
      { seed: SEED, numRuns: 60 },
    );
  });
});
