/**
 * Peak dense FLOP/s of a GPU model by the dtype its math runs in, for MFU: each row from the
 * vendor's datasheet. Datasheets of Hopper and Ampere state tensor-core figures "with sparsity";
 * the dense peak, which training runs at, is half of that (the datasheets' own footnote). A model
 * or dtype not here is "not measured": a made-up peak would make a made-up MFU.
 */

export const PEAK_DTYPES = ['bf16', 'fp16', 'tf32', 'fp32'] as const;
export type PeakDtype = (typeof PEAK_DTYPES)[number];

export interface PeakRow {
  /** The model as people say it. */
  model: string;
  /** Matches nvidia-smi's product name (`name`). */
  match: RegExp;
  /** Dense TFLOP/s by dtype; absent where the GPU has no such path (V100 and T4: no bf16 or tf32 tensor cores). */
  tflops: Partial<Record<PeakDtype, number>>;
  source: string;
}

const HOPPER = 'https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet';

/** Most specific first: "H100 NVL" before "H100". */
export const PEAKS: readonly PeakRow[] = [
  { model: 'H200 NVL', match: /\bH200 NVL\b/i, tflops: { bf16: 835, fp16: 835, tf32: 417, fp32: 60 }, source: 'https://www.nvidia.com/en-us/data-center/h200/ (H200 NVL: BF16/FP16 1,671 TFLOPS with sparsity, TF32 835, FP32 60)' },
  { model: 'H200 SXM', match: /\bH200\b/i, tflops: { bf16: 989, fp16: 989, tf32: 494, fp32: 67 }, source: 'https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: BF16/FP16 1,979 TFLOPS with sparsity, TF32 989, FP32 67)' },
  { model: 'H100 NVL', match: /\bH100 NVL\b/i, tflops: { bf16: 835, fp16: 835, tf32: 417, fp32: 60 }, source: `${HOPPER} (H100 NVL: BF16/FP16 1,671 TFLOPS with sparsity, TF32 835, FP32 60)` },
  { model: 'H100 PCIe', match: /\bH100\b.*\bPCIe\b/i, tflops: { bf16: 756, fp16: 756, tf32: 378, fp32: 51 }, source: `${HOPPER} (H100 PCIe: BF16/FP16 1,513 TFLOPS with sparsity, TF32 756, FP32 51)` },
  { model: 'H100 SXM', match: /\bH100\b/i, tflops: { bf16: 989, fp16: 989, tf32: 494, fp32: 67 }, source: `${HOPPER} (H100 SXM: BF16/FP16 1,979 TFLOPS with sparsity, TF32 989, FP32 67)` },
  {
    model: 'A100',
    match: /\bA100\b/i,
    tflops: { bf16: 312, fp16: 312, tf32: 156, fp32: 19.5 },
    source: 'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (BF16/FP16 312 TFLOPS, TF32 156, FP32 19.5; SXM and PCIe alike)',
  },
  { model: 'L40S', match: /\bL40S\b/i, tflops: { bf16: 362, fp16: 362, tf32: 183, fp32: 91.6 }, source: 'https://www.nvidia.com/en-us/data-center/l40s/ (BF16/FP16 362.05 TFLOPS, 733 with sparsity; TF32 183; FP32 91.6)' },
  { model: 'L4', match: /\bL4\b/i, tflops: { bf16: 121, fp16: 121, tf32: 60, fp32: 30.3 }, source: 'https://www.nvidia.com/en-us/data-center/l4/ (BF16/FP16 242 TFLOPS with sparsity, TF32 120 with sparsity, FP32 30.3)' },
  // "NVIDIA A10", not the A10G of cloud instances (its clocks and figures differ; not in the A10's datasheet).
  { model: 'A10', match: /\bA10$/i, tflops: { bf16: 125, fp16: 125, tf32: 62.5, fp32: 31.2 }, source: 'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf (BF16/FP16 125 TFLOPS, 250 with sparsity; TF32 62.5; FP32 31.2)' },
  { model: 'V100 SXM2', match: /\bV100\b.*\bSXM2\b/i, tflops: { fp16: 125, fp32: 15.7 }, source: 'https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf (SXM2: tensor 125 TFLOPS, FP32 15.7)' },
  { model: 'V100 PCIe', match: /\bV100\b/i, tflops: { fp16: 112, fp32: 14 }, source: 'https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf (PCIe: tensor 112 TFLOPS, FP32 14)' },
  { model: 'T4', match: /\bT4\b/i, tflops: { fp16: 65, fp32: 8.1 }, source: 'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf (FP16 mixed precision 65 TFLOPS, FP32 8.1)' },
];

export function peakRow(gpuName: string | null): PeakRow | null {
  if (!gpuName) return null;
  return PEAKS.find((row) => row.match.test(gpuName.trim())) ?? null;
}
