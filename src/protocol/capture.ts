import { Type, type Static } from '@sinclair/typebox';
import { Text, Uint } from './hook-schema.js';
import { Bool, Count, Names, Nullable, Num, NumOrNull, Str, StrOrNull } from './schema.js';

/**
 * Where a stalled rank is: the `stack` frame a hook sends when the sidecar asks (`capture`), and the
 * capture as the sidecar keeps it (journal, state, summary). Read by the hook's sender thread from
 * `sys._current_frames()`, its process's children in /proc and PyTorch's Flight Recorder
 * (python-hook/stepscope/_where.py). Every list and text is bounded.
 */

export const FRAME_KINDS = ['user', 'lib', 'hook'] as const;
export type FrameKind = (typeof FRAME_KINDS)[number];

const MAX_FRAMES = 64;
const MAX_THREADS = 33;
const TEXT = 256;

// ---------------------------------------------------------------------------------------------------
// As it arrives

const WireFrame = Type.Tuple([Text(TEXT), Uint(), Text(TEXT), Names(FRAME_KINDS)]);
const WireThread = Type.Object({
  name: Text(TEXT),
  training: Type.Boolean(),
  frames: Type.Array(WireFrame, { maxItems: MAX_FRAMES }),
  skipped: Uint(),
});
const WireGroup = Type.Object({
  id: Text(64),
  name: Text(TEXT),
  ranks: Type.Union([Text(TEXT), Type.Null()]),
  enqueued: Type.Integer({ minimum: -1 }),
  started: Type.Integer({ minimum: -1 }),
  completed: Type.Integer({ minimum: -1 }),
  pending: Type.Array(Type.Object({ seq: Uint(), op: Text(TEXT), state: Text(64) }), { maxItems: 8 }),
});
const WireWorker = Type.Object({
  pid: Uint(),
  name: Text(64),
  state: Text(4),
  wchan: Type.Union([Text(128), Type.Null()]),
  cpu_s: Type.Number({ minimum: 0 }),
  frames: Type.Optional(Type.Array(WireFrame, { maxItems: MAX_FRAMES })),
  stack_error: Type.Optional(Text(TEXT)),
});

export const StackFrameSchema = Type.Object({
  id: Uint(),
  at_ns: Uint(),
  last_seq: Uint(),
  still_ms: Type.Optional(Type.Union([Uint(), Type.Null()])),
  training_found: Type.Optional(Type.Boolean()),
  threads: Type.Array(WireThread, { maxItems: MAX_THREADS }),
  comm: Type.Optional(
    Type.Union([
      Type.Object({
        entered: Uint(),
        completed: Uint(),
        waiting: Type.Union([Type.Object({ op: Text(TEXT), index: Uint(), for_ns: Uint() }), Type.Null()]),
      }),
      Type.Null(),
    ]),
  ),
  workers: Type.Optional(Type.Union([Type.Array(WireWorker, { maxItems: 32 }), Type.Null()])),
  flight: Type.Optional(
    Type.Union([
      Type.Object({
        backend: Type.Optional(Text(64)),
        version: Type.Optional(Text(32)),
        groups: Type.Optional(Type.Array(WireGroup, { maxItems: 8 })),
        error: Type.Optional(Text(TEXT)),
      }),
      Type.Null(),
    ]),
  ),
  error: Type.Optional(Text(TEXT)),
});
export type StackFrame = Static<typeof StackFrameSchema>;

// ---------------------------------------------------------------------------------------------------
// As kept

export const CodeFrameSchema = Type.Object(
  {
    file: Str('the source file, as the interpreter names it (long paths keep their end)'),
    line: Count('the line being run'),
    function: Str('the function (`<module>` for a module body)'),
    kind: Names(FRAME_KINDS, { description: "user: the script's own code; lib: the standard library or an installed package; hook: stepscope's own" }),
  },
  { description: 'one frame of a Python stack' },
);

export const ThreadStackSchema = Type.Object(
  {
    name: Str("the thread's name"),
    training: Bool('the training thread (the one that made the scope)'),
    frames: Type.Array(CodeFrameSchema, { description: 'innermost first; for the other threads only the innermost frame, unless the capture was deep' }),
    skipped: Count('frames left out between the innermost and the outermost (stacks deeper than the bound)'),
  },
  { description: 'one thread of the process' },
);

export const FlightGroupSchema = Type.Object(
  {
    id: Str('the process group id'),
    name: Str('its name (default_pg for the default group)'),
    ranks: StrOrNull('its ranks, as the recorder lists them'),
    enqueued: Type.Integer({ minimum: -1, description: 'sequence number of the last collective this rank enqueued (-1: none)' }),
    started: Type.Integer({ minimum: -1, description: '... started (-1: none, or not tracked by the backend)' }),
    completed: Type.Integer({ minimum: -1, description: '... completed (-1: none)' }),
    pending: Type.Array(Type.Object({ seq: Count('its sequence number'), op: Str('the collective, e.g. nccl:all_reduce'), state: Str('scheduled, started') }), {
      description: 'collectives enqueued and not completed, oldest first (at most 4)',
    }),
  },
  { description: "a process group as PyTorch's Flight Recorder saw it" },
);

export const CaptureSchema = Type.Object(
  {
    id: Count('the request it answers'),
    at: Num('when it was taken, ms since the epoch on the sidecar clock'),
    last_seq: Count('the seq of the last step record the hook had made'),
    still_ms: NumOrNull("how long the training thread's stack had not moved, ms (sampled every 0.5 s once no step ended for 1 s); null where that is not known yet"),
    threads: Type.Array(ThreadStackSchema, { description: 'the training thread first, then the others' }),
    comm: Nullable(
      Type.Object({
        entered: Count('collectives the training loop entered since its last step ended'),
        completed: Count('... of which returned (or, asynchronous, completed)'),
        waiting: Nullable(Type.Object({ op: Str('the collective'), index: Count('its place among the step\'s collectives, from 1'), for_ms: Num('ms since it was entered') }), {
          description: 'the first of them still in flight; null if none',
        }),
      }),
      { description: "the rank's collectives in the current step, as the hook's wrappers saw them; null where the hook does not track them" },
    ),
    workers: Nullable(
      Type.Array(
        Type.Object({
          pid: Count('process id, in the hook\'s pid namespace'),
          name: Str('its comm'),
          state: Str('R running, S sleeping, D uninterruptible (disk, network filesystem), Z zombie, T stopped'),
          wchan: StrOrNull('the kernel function it waits in, where the kernel says'),
          cpu_s: Num('CPU seconds it used in all'),
          frames: Nullable(Type.Array(CodeFrameSchema), { description: "its main thread's Python stack, innermost first, as faulthandler dumped it on the hook's signal; null where it could not (not forked by the hooked process, SIGUSR2 handled by something else, no answer)" }),
          stack_error: StrOrNull("why it gave no stack though it was asked; null where it gave one or was not asked"),
        }),
      ),
      { description: "the training process's children (DataLoader workers) as /proc shows them; null where not read" },
    ),
    flight: Nullable(
      Type.Object({
        backend: StrOrNull('the default process group\'s backend'),
        groups: Type.Array(FlightGroupSchema),
        error: StrOrNull('why the recorder could not be read; null when it was'),
      }),
      { description: "PyTorch's Flight Recorder, where the torch in use has it and a process group exists; null otherwise" },
    ),
    error: StrOrNull('why the capture is incomplete; null when it is not'),
  },
  { description: 'where a rank was when the sidecar asked (it had stalled): its Python stacks, collectives, loader workers' },
);
export type Capture = Static<typeof CaptureSchema>;
export type CodeFrame = Static<typeof CodeFrameSchema>;

/** "wait_for_it (train.py:48)": a frame as people read it, its file by name. */
export const frameText = (frame: CodeFrame): string => `${frame.function} (${frame.file.slice(Math.max(frame.file.lastIndexOf('/'), frame.file.lastIndexOf('\\')) + 1)}:${frame.line})`;

/** "wait_for_it (train.py:48) ← main (train.py:87)": frames innermost first, at most `max`. */
export const framesText = (frames: readonly CodeFrame[], max = Infinity): string => frames.slice(0, max).map(frameText).join(' ← ');

const codeFrame = ([file, line, fn, kind]: [string, number, string, FrameKind]): CodeFrame => ({ file, line, function: fn, kind });

/** The frame as kept, its times placed on the sidecar's clock by `toSidecarMs`. */
export function captureOf(frame: StackFrame, toSidecarMs: (monoNs: number) => number): Capture {
  const flight = frame.flight ?? null;
  return {
    id: frame.id,
    at: toSidecarMs(frame.at_ns),
    last_seq: frame.last_seq,
    still_ms: frame.still_ms ?? null,
    threads: frame.threads.map((thread) => ({
      name: thread.name,
      training: thread.training,
      frames: thread.frames.map(codeFrame),
      skipped: thread.skipped,
    })),
    comm: frame.comm ? { entered: frame.comm.entered, completed: frame.comm.completed, waiting: frame.comm.waiting ? { op: frame.comm.waiting.op, index: frame.comm.waiting.index, for_ms: Math.round(frame.comm.waiting.for_ns / 1e6) } : null } : null,
    workers: frame.workers ? frame.workers.map(({ frames, stack_error, ...worker }) => ({ ...worker, frames: frames ? frames.map(codeFrame) : null, stack_error: stack_error ?? null })) : null,
    flight: flight ? { backend: flight.backend ?? null, groups: flight.groups ?? [], error: flight.error ?? null } : null,
    error: frame.error ?? null,
  };
}

/** What the sidecar read of a rank's process in /proc, where it can see it (same node, shared pid namespace). */
export const ProcReadingSchema = Type.Object(
  {
    visible: Bool("whether the rank's process could be read: its pid, on the sidecar's node and in its pid namespace, with the start time the hook gave"),
    state: StrOrNull('R running, S sleeping, D uninterruptible (disk, network filesystem), T stopped, Z zombie; null where not visible'),
    wchan: StrOrNull('the kernel function it waits in; null where the kernel does not say or it is not visible'),
    cpu_s: NumOrNull('CPU seconds it has used in all; null where not visible'),
    why: StrOrNull('why it could not be read; null when it was'),
  },
  { description: "the rank's process as /proc shows it" },
);
export type ProcReading = Static<typeof ProcReadingSchema>;
