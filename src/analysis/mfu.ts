import { peakRow, type PeakDtype } from '../model/gpu-peaks.js';
import { round } from '../model/round.js';
import type { Mfu } from '../protocol/state.js';
import { envGroup, num } from './stack.js';

/**
 * Model FLOPs utilization: the FLOPs of one training step (the hook's `model.flops_per_step`,
 * counted once by torch.utils.flop_counter or given by the user) over the step's time, as a share
 * of the GPU's dense peak for the dtype its math runs in (src/model/gpu-peaks.ts, from the stack
 * fingerprint: autocast's dtype, else TF32 or FP32 by the float32 matmul precision). Pure. Where
 * the GPU, its peak or the dtype is unknown it is "not measured", with why — never a guessed peak.
 */

/** The step's FLOPs from the rank's env; null where the hook sent none. */
export function flopsOf(env: Readonly<Record<string, unknown>>): { flops: number; from: string | null } | null {
  const model = envGroup(env, 'model');
  const flops = num(model.flops_per_step);
  if (flops === null || flops <= 0) return null;
  return { flops, from: typeof model.flops_from === 'string' ? model.flops_from : null };
}

/** The dtype the step's math runs in, from the stack fingerprint; null while unknown. */
export function mathDtype(env: Readonly<Record<string, unknown>>): PeakDtype | null {
  const stack = envGroup(env, 'stack');
  const amp = typeof stack.amp === 'string' ? stack.amp : null;
  if (amp === null) return null;
  if (amp.includes('bfloat16')) return 'bf16';
  if (amp.includes('float16')) return 'fp16';
  if (amp !== 'off') return null;
  const precision = stack.matmul_precision;
  if (precision === 'high' || precision === 'medium') return 'tf32';
  return precision === 'highest' ? 'fp32' : null;
}

export const pctText = (x: number) => `${x >= 0.1 ? Math.round(x * 100) : (x * 100).toPrecision(2)}%`;

/** The rank's MFU over a step of `stepMs` on `gpuName`; null where the hook gave no FLOP count. */
export function mfuOf(env: Readonly<Record<string, unknown>>, gpuName: string | null, stepMs: number | null): Mfu | null {
  const flops = flopsOf(env);
  if (flops === null) return null;
  const named = typeof env.gpu_name === 'string' && env.gpu_name ? env.gpu_name : gpuName;
  const row = peakRow(named);
  const dtype = mathDtype(env);
  const base = { mfu: null, flops_per_step: flops.flops, flops_from: flops.from, step_ms: stepMs, gpu: row?.model ?? named, dtype, peak_tflops: null };
  const not = (why: string): Mfu => ({ ...base, text: `MFU not measured: ${why}` });
  if (named === null) return not('no GPU matched to the rank (on CPU, or its counters not read)');
  if (row === null) return not(`no datasheet peak for ${named}`);
  if (dtype === null) return not("the dtype of the step's math is not known yet (autocast not seen)");
  const peak = row.tflops[dtype] ?? null;
  if (peak === null) return not(`the ${row.model} has no ${dtype} peak on its datasheet`);
  if (stepMs === null || stepMs <= 0) return { ...base, peak_tflops: peak, text: 'MFU not measured: no step time yet' };
  const mfu = round(flops.flops / (stepMs / 1000) / (peak * 1e12), 4);
  return { ...base, mfu, peak_tflops: peak, text: `${pctText(mfu)} MFU (${dtype} peak ${peak} TFLOP/s, ${row.model})` };
}
