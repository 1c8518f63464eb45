/**
 * The counters' shared shapes. Every figure is `null` when the source does not report it
 * (a MIG instance has no utilization, DCGM may lack profiling fields): "not available",
 * never a crash and never a made-up zero.
 */

export { emptyGpuSample, ThrottleReason, throttleReasonNames, type GpuSample, type PowerReading, type ThrottleReasonName } from '../model/gpu.js';

import type { CollectorHealth } from '../protocol/state.js';

/** How a source fares: the schema /v1/state serves it by is its type. */
export type { CollectorHealth };
export type CollectorState = CollectorHealth['state'];
