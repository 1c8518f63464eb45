import { Type, type Static } from '@sinclair/typebox';
import { THROTTLE_REASON_NAMES } from '../model/gpu.js';
import { Held, Keys, Names, Nullable, OptionalKeys } from '../protocol/schema.js';
import type { FillSource } from './coverage.js';
import type { HostSample } from './host.js';
import type { GpuSample } from './types.js';

/**
 * The counter store's part of a checkpoint (src/engine/checkpoint.ts): every GPU known, its recent
 * samples and sums, the host's samples, the compute-apps listings and the fillers. The schema is the
 * type: `CounterStore.dump` writes it, `CounterStore.load` reads it once the whole checkpoint is checked.
 */

const Int = Type.Integer({ minimum: 0 });
const NumOrNull = Nullable(Type.Number());
const GpuSampleHeld = Held<GpuSample>(['at', 'index'], 'a GPU sample as its source read it');
const Sum = Keys(['total', 'n'] as const, Type.Number());

const GpuAggregateCheckpoint = Type.Object({
  samples: Int,
  util: Sum,
  clockFrac: Sum,
  powerFrac: Sum,
  reasonSamples: Int,
  reasonActive: OptionalKeys(THROTTLE_REASON_NAMES, Type.Number()),
  tempMaxC: NumOrNull,
  memPeakMiB: NumOrNull,
  memTotalMiB: NumOrNull,
  smClockMaxMHz: NumOrNull,
  powerLimitW: NumOrNull,
  processes: Type.Optional(Type.Record(Type.String(), Type.Object({ pid: Type.Integer(), name: Type.String(), used_mib_max: NumOrNull }))),
});
/** [slice number, the sums of the samples in it]. */
const Slices = Type.Array(Type.Tuple([Type.Integer(), GpuAggregateCheckpoint]));

export const CountersCheckpointSchema = Type.Object({
  gpus: Type.Array(
    Type.Object({
      known: Type.Object({
        key: Type.String(),
        index: Type.Integer(),
        uuid: Nullable(Type.String()),
        name: Nullable(Type.String()),
        parentUuid: Nullable(Type.String()),
        gpuInstanceId: Nullable(Type.Integer()),
        latest: GpuSampleHeld,
      }),
      history: Type.Array(GpuSampleHeld),
      slices: Slices,
      coarse: Slices,
    }),
  ),
  host: Type.Array(Held<HostSample>(['at'], "a sample of the sidecar's host")),
  apps: Type.Array(
    Type.Object({
      at: Type.Number(),
      apps: Type.Array(Type.Object({ gpuUuid: Type.String(), pid: Type.Integer(), name: Type.String(), usedMiB: NumOrNull })),
    }),
  ),
  /** Per GPU uuid, the latest reading of a second source that fills the signals the GPU source lacks. */
  fillers: Type.Array(Type.Tuple([Type.String(), Type.Object({ sample: GpuSampleHeld, source: Names(['nvidia-smi', 'hook'] as const satisfies readonly FillSource[]) })])),
});
export type CountersCheckpoint = Static<typeof CountersCheckpointSchema>;
