import { rmSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mathDtype, mfuOf } from '../src/analysis/mfu.js';
import type { EndedRun, SnapshotJob } from '../src/engine/snapshot.js';
import { replayJournal } from '../src/journal/replay.js';
import { PEAKS, peakRow } from '../src/model/gpu-peaks.js';
import { recordings, unpackJournal } from './support/scenarios.js';

/**
 * MFU on a recorded job (test/verdicts-e2e.test.ts recorded it: the real hook in a loop that gave
 * scope.set_flops_per_step(1e13) and ran its compute under real CPU autocast in bf16, the stand-in
 * nvidia-smi's H100, a real sidecar). Nothing here ran on a real GPU: the GPU is the stand-in's,
 * the FLOPs are the script's; what is proven is the arithmetic, the peak and dtype chosen, and where
 * it shows (the live rank state and the summary).
 */

const SLUG = 'compute-bound-with-a-known-flop-count-1e13-flops-a-step-under';

describe('MFU', () => {
  it('is the FLOPs of a step over its median time, as a share of the bf16 peak of the H100 (989 TFLOP/s): in the summary and its headline', async () => {
    const recording = recordings().find((r) => r.slug === SLUG)!;
    expect(recording, `the recording ${SLUG}`).toBeDefined();
    const dir = unpackJournal(recording);
    const live: SnapshotJob[] = [];
    const ended: EndedRun[] = [];
    try {
      await replayJournal(dir, {
        publishTicks: true,
        onEntry: (entry, replaying) => {
          if (entry.t !== 'tick' && entry.t !== 'stop') return;
          const snapshot = replaying.snapshot();
          if (snapshot.at !== entry.at) return;
          ended.push(...snapshot.ended);
          const job = snapshot.jobs.find((j) => j.job === recording.meta.job);
          if (job) live.push(job);
        },
      });
      const summary = ended.find((run) => run.job === recording.meta.job)!.summary;
      const rank = summary.ranks[0]!;
      const expected = 1e13 / (rank.step_ms.p50! / 1000) / 989e12;
      expect(summary.mfu!.mfu).toBeCloseTo(expected, 4);
      // A 30 ms scripted step: about 31% of the peak.
      expect(summary.mfu!.mfu).toBeGreaterThan(0.25);
      expect(summary.mfu!.ranks[0]).toMatchObject({ rank: 0, flops_per_step: 1e13, flops_from: 'user', dtype: 'bf16', peak_tflops: 989, gpu: 'H100 SXM' });
      expect(summary.headline).toMatch(/^Compute-bound at \d+% MFU \(bf16 peak 989 TFLOP\/s, H100 SXM\) for /);
      // Live: each rank's MFU over its window, in the state (/v1/state, the viewer).
      const states = live.flatMap((job) => job.ranks.map((r) => ({ ended: job.ended, mfu: r.mfu })));
      // Before the hook's first stack update after autocast ran (it sends one every 10 s), the dtype is not known.
      expect(states.filter((s) => s.mfu?.mfu == null).every((s) => /dtype .* not known/.test(s.mfu?.text ?? 'dtype is not known'))).toBe(true);
      const measured = states.filter((s) => !s.ended).map((s) => s.mfu).filter((m) => m?.mfu != null);
      expect(measured.length).toBeGreaterThan(0);
      for (const m of measured) expect(m!.mfu!).toBeCloseTo(1e13 / (m!.step_ms! / 1000) / 989e12, 4);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says "not measured", and why, on CPU, on a GPU without a datasheet row, without a dtype or a peak for it; nothing without a FLOP count', () => {
    const env = { model: { flops_per_step: 1e12, flops_from: 'flop_counter' }, stack: { amp: 'bfloat16' } };
    expect(mfuOf({}, 'NVIDIA H100 80GB HBM3', 30)).toBeNull();
    expect(mfuOf(env, null, 30)!.text).toBe('MFU not measured: no GPU matched to the rank (on CPU, or its counters not read)');
    expect(mfuOf(env, 'NVIDIA GeForce RTX 9090', 30)!).toMatchObject({ mfu: null, text: 'MFU not measured: no datasheet peak for NVIDIA GeForce RTX 9090' });
    expect(mfuOf({ model: env.model }, 'NVIDIA A100-SXM4-80GB', 30)!.text).toMatch(/dtype .* not known/);
    expect(mfuOf(env, 'Tesla V100-SXM2-32GB', 30)!.text).toBe('MFU not measured: the V100 SXM2 has no bf16 peak on its datasheet');
    // The hook's own GPU name wins over the matched one; fp32 at "highest", TF32 at "high".
    const a100 = mfuOf({ ...env, gpu_name: 'NVIDIA A100-SXM4-80GB' }, 'NVIDIA H100 80GB HBM3', 10)!;
    expect(a100).toMatchObject({ gpu: 'A100', peak_tflops: 312, mfu: Math.round((1e12 / 0.01 / 312e12) * 1e4) / 1e4 });
    expect(mathDtype({ stack: { amp: 'off', matmul_precision: 'highest' } })).toBe('fp32');
    expect(mathDtype({ stack: { amp: 'off', matmul_precision: 'high' } })).toBe('tf32');
    expect(mathDtype({ stack: { amp: 'float16' } })).toBe('fp16');
    expect(mathDtype({ model: { flops_per_step: 'lots' } })).toBeNull();
    expect(mfuOf({ model: { flops_per_step: -1 } }, 'NVIDIA H100 80GB HBM3', 10)).toBeNull();
  });

  it('has a datasheet source for every peak, and names nvidia-smi reports map to the right row', () => {
    for (const row of PEAKS) expect(row.source, row.model).toMatch(/^https:\/\/\S+nvidia\.com\S* \(/);
    const model = (name: string) => peakRow(name)?.model ?? null;
    expect(model('NVIDIA H100 80GB HBM3')).toBe('H100 SXM');
    expect(model('NVIDIA H100 PCIe')).toBe('H100 PCIe');
    expect(model('NVIDIA H100 NVL')).toBe('H100 NVL');
    expect(model('NVIDIA H200')).toBe('H200 SXM');
    expect(model('NVIDIA A100-PCIE-40GB')).toBe('A100');
    expect(model('NVIDIA A10')).toBe('A10');
    expect(model('NVIDIA A10G')).toBeNull();
    expect(model('NVIDIA L4')).toBe('L4');
    expect(model('NVIDIA L40S')).toBe('L40S');
    expect(model('Tesla T4')).toBe('T4');
    expect(model('NVIDIA H200')).not.toBe('H100 SXM');
    expect(path.basename(SLUG)).toBe(SLUG);
  });
});
