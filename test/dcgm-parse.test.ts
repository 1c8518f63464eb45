import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalMetric, dcgmValue, describeNoMatch, describeSelector, describeUnreadable, hasReadableSeries, normaliseSelector, parseDcgmSeries } from '../src/counters/dcgm-parse.js';
import { CounterStore } from '../src/counters/counter-store.js';
import { ThrottleReason, throttleReasonNames } from '../src/counters/types.js';
import { ROOT } from './support/sidecar.js';
import { parseDcgmMetrics } from './support/counters.js';

const AT = 1_767_203_456_000;

function fixture(name: string): string {
  return readFileSync(path.join(ROOT, 'test/fixtures/dcgm', name), 'utf8');
}

describe('DCGM blank values', () => {
  it('reads int64 and fp64 sentinels, and the int32 ones dcgm-exporter also skips, as not available', () => {
    for (const blank of ['9223372036854775792', '9223372036854775794', '9223372036854775795', '140737488355328.000000', '140737488355331.000000', '2147483632', '2147483635']) {
      expect(dcgmValue(blank), blank).toBeNull();
    }
  });

  it('keeps ordinary values, large counters included', () => {
    expect(dcgmValue('612.883000')).toBe(612.883);
    expect(dcgmValue('1912602624')).toBe(1912602624);
    expect(dcgmValue('129931554972')).toBe(129931554972);
    expect(dcgmValue('0')).toBe(0);
  });

  it('reads what is not a number as not available', () => {
    for (const text of ['NaN', '+Inf', '', ' ']) expect(dcgmValue(text), JSON.stringify(text)).toBeNull();
  });
});

describe('parseDcgmMetrics on dcgm-exporter 2.x output', () => {
  it('reads the README shape, a space after label commas, and its blank memory temperature', () => {
    const series = parseDcgmSeries(fixture('2.x-readme-spaces.txt'));
    expect(series.find((one) => one.metric === 'DCGM_FI_DEV_MEMORY_TEMP')?.value).toBeNull();
    const [gpu] = parseDcgmMetrics(fixture('2.x-readme-spaces.txt'), {}, AT);
    expect(gpu).toMatchObject({ at: AT, index: 0, uuid: 'GPU-7c1f9a52-3e0b-6d84-1a2f-c09e5b7d3a61', name: null, smClockMHz: 135, memClockMHz: 405, tempC: 33 });
    expect(gpu!.utilGpu).toBeNull();
  });

  it('selects the GPU a pod holds and skips the one with empty pod labels', () => {
    const text = fixture('2.x-k8s-empty-pod.txt');
    const samples = parseDcgmMetrics(text, { pod: 'resnet-train-5f7c9-xk2lp', namespace: 'ml' }, AT);
    expect(samples).toHaveLength(1);
    expect(samples[0]).toMatchObject({ index: 1, utilGpu: 97, powerW: 287.402, tempC: 61, memUsedMiB: 31412, memTotalMiB: 31412 + 9124 });
    expect(parseDcgmMetrics(text, {}, AT).map((gpu) => gpu.index)).toEqual([0, 1]);
  });

  it('gathers series grouped per GPU, with profiling fields, and selects by UUID', () => {
    const text = fixture('2.x-per-gpu-dcp.txt');
    const [gpu] = parseDcgmMetrics(text, { uuids: ['GPU-4a90c3d2-7b15-e6f8-0d21-9c3e5f7a1b04'] }, AT);
    expect(gpu).toMatchObject({
      index: 0,
      grEngineActive: 0.951204,
      smActive: 0.902117,
      tensorActive: 0.431006,
      dramActive: 0.648813,
      pcieTxBps: 1843200,
      pcieRxBps: 734003200,
      powerW: 211.806,
      tempC: 52,
    });
    expect(parseDcgmMetrics(text, { uuids: ['GPU-b3d81e07-5c29-4fa6-9e10-2d7c4a6b8f53'] }, AT).map((one) => one.index)).toEqual([1]);
  });

  it('gives one sample per MIG instance, keyed by its parent and GPU instance, and picks the pod’s instance', () => {
    const text = fixture('2.x-mig-a30.txt');
    const all = parseDcgmMetrics(text, {}, AT);
    expect(all.map((gpu) => [gpu.parentUuid, gpu.gpuInstanceId, gpu.migProfile])).toEqual([
      ['GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38', 1, '2g.12gb'],
      ['GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38', 2, '2g.12gb'],
    ]);
    // Both slices carry the parent's UUID label: a store keyed by UUID alone made them one GPU.
    const store = new CounterStore();
    store.addGpuSamples(all);
    expect(store.knownGpus().map((gpu) => gpu.key)).toEqual(['GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38/gi:1', 'GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38/gi:2']);
    const samples = parseDcgmMetrics(text, { pod: 'bert-ft-6b9f7-2xv8c', namespace: 'nlp' }, AT);
    expect(samples).toHaveLength(1);
    expect(samples[0]).toMatchObject({
      index: 0,
      uuid: null,
      parentUuid: 'GPU-5e2b8c14-9d07-a3f6-41c8-e7d02b9f6a38',
      gpuInstanceId: 1,
      name: 'NVIDIA A30 MIG 2g.12gb',
      memUsedMiB: 9170,
      memTotalMiB: 9170 + 2398,
      grEngineActive: 0.959228,
      smClockMHz: 1440,
      // DCGM has no GPU_UTIL for a MIG instance: its graphics engine activity stands in.
      utilGpu: 95.92,
    });
  });
});

describe('parseDcgmMetrics on dcgm-exporter 3.x output', () => {
  it('maps what the default counters CSV gives and leaves the rest not available', () => {
    const [gpu] = parseDcgmMetrics(fixture('3.x-default-counters.txt'), { hostname: '8c2e41f7a9d3' }, AT);
    expect(gpu).toEqual({
      at: AT,
      index: 0,
      uuid: 'GPU-0f6d2e91-b4a8-37c5-d019-6a2e8b4c7f13',
      name: 'Tesla T4',
      utilGpu: 100,
      utilMem: 41,
      memUsedMiB: 13906,
      memTotalMiB: 13906 + 1203,
      parentUuid: null,
      gpuInstanceId: null,
      computeInstanceId: null,
      migProfile: null,
      tempC: 67,
      powerW: 68.412,
      powerReading: 'draw',
      powerLimitW: null,
      smClockMHz: 1590,
      smClockMaxMHz: null,
      memClockMHz: 5000,
      pstate: null,
      throttleReasons: null,
      grEngineActive: null,
      smActive: null,
      smOccupancy: null,
      tensorActive: null,
      dramActive: null,
      pcieTxBps: null,
      pcieRxBps: null,
    });
  });

  it('reads HELP lines without text, FB_TOTAL, the P-state and the old throttle field name', () => {
    const [gpu] = parseDcgmMetrics(fixture('3.x-empty-help.txt'), {}, AT);
    expect(gpu).toMatchObject({ utilGpu: 88, powerLimitW: 70, pstate: 'P0', memUsedMiB: 4821, memTotalMiB: 15360, throttleReasons: ThrottleReason.SwPowerCap });
  });

  it('selects both GPUs of a pod and maps every field', () => {
    const samples = parseDcgmMetrics(fixture('3.x-h100-pods.txt'), { pod: 'llama-ft-0', namespace: 'research' }, AT);
    expect(samples.map((gpu) => gpu.index)).toEqual([0, 1]);
    expect(samples[1]).toEqual({
      at: AT,
      index: 1,
      uuid: 'GPU-a1c5e7f9-3b2d-4e6a-8c0f-5d9b7a3e1c48',
      name: 'NVIDIA H100 80GB HBM3',
      utilGpu: 100,
      utilMem: 58,
      memUsedMiB: 71234,
      memTotalMiB: 71234 + 9785 + 540,
      parentUuid: null,
      gpuInstanceId: null,
      computeInstanceId: null,
      migProfile: null,
      tempC: 83,
      powerW: 699.214,
      powerReading: 'draw',
      powerLimitW: 700,
      smClockMHz: 1755,
      smClockMaxMHz: 1980,
      memClockMHz: 2619,
      pstate: null,
      throttleReasons: 36,
      grEngineActive: 0.979402,
      smActive: 0.933125,
      smOccupancy: null,
      tensorActive: 0.497713,
      dramActive: 0.688419,
      pcieTxBps: 175112192,
      pcieRxBps: 1887436800,
    });
    expect(throttleReasonNames(samples[1]!.throttleReasons)).toEqual(['SwPowerCap', 'SwThermalSlowdown']);
  });

  it('does not take a namespace alone for a pod', () => {
    expect(parseDcgmMetrics(fixture('3.x-h100-pods.txt'), { pod: 'llama-ft-0', namespace: 'serving' }, AT)).toEqual([]);
    expect(parseDcgmMetrics(fixture('3.x-h100-pods.txt'), { namespace: 'serving' }, AT).map((gpu) => gpu.index)).toEqual([2]);
  });
});

describe('parseDcgmMetrics on dcgm-exporter 4.x output', () => {
  it('reads pod_uid-era output with the clocks-event field name', () => {
    const [gpu] = parseDcgmMetrics(fixture('4.x-pod-uid.txt'), { pod: 'llama-ft-0' }, AT);
    expect(gpu).toMatchObject({ index: 0, throttleReasons: 0, utilGpu: 100, smClockMaxMHz: 1980 });
  });

  it('selects by hostname whichever way the exporter spells the label', () => {
    expect(parseDcgmMetrics(fixture('4.x-lowercase-hostname.txt'), { hostname: 'gpu-node-07' }, AT).map((gpu) => gpu.index)).toEqual([0, 1]);
    expect(parseDcgmMetrics(fixture('3.x-h100-pods.txt'), { hostname: 'computeinstance-e00f7k2q9x4wmz' }, AT)).toHaveLength(4);
    expect(parseDcgmMetrics(fixture('4.x-lowercase-hostname.txt'), { hostname: 'gpu-node-08' }, AT)).toEqual([]);
  });

  it('does not take NVLink per-link series for GPUs', () => {
    const series = parseDcgmSeries(fixture('4.x-lowercase-hostname.txt'));
    expect(series.some((one) => one.metric === 'DCGM_FI_PROF_NVLINK_TX_BYTES')).toBe(false);
    expect(parseDcgmMetrics(fixture('4.x-lowercase-hostname.txt'), {}, AT).map((gpu) => gpu.uuid)).toEqual([
      'GPU-6f3a9d20-84c1-2be7-95d0-1c4f8e7a3b62',
      'GPU-a1c5e7f9-3b2d-4e6a-8c0f-5d9b7a3e1c48',
    ]);
  });
});

describe('parseDcgmMetrics on the 1.x names (dcgm-exporter -o, the 1.x exporters, a 1.x counters CSV)', () => {
  it('reads lower-case names and selects by the old pod_name and pod_namespace labels', () => {
    const samples = parseDcgmMetrics(fixture('1.x-pod-gpu-metrics-exporter.txt'), { pod: 'pod1', namespace: 'default' }, AT);
    expect(samples.map((gpu) => [gpu.index, gpu.uuid, gpu.tempC, gpu.memClockMHz, gpu.utilGpu, gpu.utilMem])).toEqual([
      [0, 'GPU-2b399198-c670-a848-173b-d3400051a200', 33, 810, 0, 0],
      [1, 'GPU-9567a9e7-341e-bb7e-fcf5-788d8caa50f9', 34, 810, 0, 0],
    ]);
    expect(parseDcgmMetrics(fixture('1.x-pod-gpu-metrics-exporter.txt'), { pod: 'pod2' }, AT)).toEqual([]);
  });

  it('reads 1.x names under 2.x labels (UUID, Hostname, pod), and an empty POD_NAME selects nothing away', () => {
    const text = fixture('1.x-names-csv-k8s.txt');
    const [gpu, ...rest] = parseDcgmMetrics(text, { pod: '', namespace: '' }, AT);
    expect(rest).toEqual([]);
    expect(gpu).toMatchObject({ uuid: 'GPU-c1f38265-5e7c-0a81-14a0-240a35ea8160', smClockMHz: 585, memClockMHz: 5000, tempC: 54, powerW: 30.982, powerReading: 'draw', utilGpu: 0 });
    expect(parseDcgmMetrics(text, { pod: 'trainer-0' }, AT)).toEqual([]);
  });

  it('keeps the MIG instances of 1.x-named series apart, and takes their utilization from GR_ENGINE_ACTIVE', () => {
    const samples = parseDcgmMetrics(fixture('1.x-names-mig-a100.txt'), {}, AT);
    expect(samples.map((gpu) => [gpu.index, gpu.parentUuid, gpu.gpuInstanceId, gpu.name, gpu.utilGpu, gpu.grEngineActive])).toEqual([
      [0, 'GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167', 1, 'NVIDIA A100 80GB PCIe MIG 3g.40gb', 0, 0],
      [0, 'GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167', 2, 'NVIDIA A100 80GB PCIe MIG 4g.40gb', 0, 0],
      [1, 'GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb', 1, 'NVIDIA A100 80GB PCIe MIG 3g.40gb', 0, 0],
    ]);
    const store = new CounterStore();
    store.addGpuSamples(samples);
    expect(store.knownGpus()).toHaveLength(3);
  });
});

describe('parseDcgmMetrics on profiling fields', () => {
  it('keeps SM activity, SM occupancy and tensor activity, and leaves what was not exported null', () => {
    const text = fixture('3.3-gke-t4-profiling.txt');
    const [gpu, ...rest] = parseDcgmMetrics(text, { pod: 'triton-84d57987c9-kks4k', namespace: 'default' }, AT);
    expect(rest).toEqual([]);
    // Zeros the exporter printed are zeros; what it did not print is not.
    expect(gpu).toMatchObject({ index: 0, name: 'Tesla T4', smActive: 0, smOccupancy: 0, tensorActive: 0, dramActive: null, grEngineActive: null, utilGpu: null, powerW: null, powerReading: null });
  });
});

describe('canonicalMetric', () => {
  it('maps 1.x names, lower-case DCGM names and DCGM 4.6 names onto the names the parser reads', () => {
    expect(canonicalMetric('dcgm_gpu_utilization')).toBe('DCGM_FI_DEV_GPU_UTIL');
    expect(canonicalMetric('dcgm_fb_used')).toBe('DCGM_FI_DEV_FB_USED');
    expect(canonicalMetric('dcgm_fi_prof_gr_engine_active')).toBe('DCGM_FI_PROF_GR_ENGINE_ACTIVE');
    expect(canonicalMetric('dcgm_fi_dev_sm_clock')).toBe('DCGM_FI_DEV_SM_CLOCK');
    expect(canonicalMetric('DCGM_FI_DEV_BOARD_POWER_WATTS')).toBe('DCGM_FI_DEV_POWER_USAGE');
    expect(canonicalMetric('DCGM_FI_PROF_SM_OCCUPANCY_RATIO')).toBe('DCGM_FI_PROF_SM_OCCUPANCY');
    expect(canonicalMetric('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS')).toBe('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS');
  });

  it('does not guess the scale of DCGM_FI_DEV_GPU_UTIL_RATIO, and ignores other families', () => {
    expect(canonicalMetric('DCGM_FI_DEV_GPU_UTIL_RATIO')).toBe('DCGM_FI_DEV_GPU_UTIL_RATIO');
    expect(canonicalMetric('go_goroutines')).toBeNull();
    expect(canonicalMetric('dcgm_exporter_build_info')).toBeNull();
  });
});

describe('normaliseSelector', () => {
  it('drops empty criteria: POD_NAME="" must not mean pod=""', () => {
    expect(normaliseSelector({ pod: '', namespace: ' ml ', uuids: [], hostname: '  ' })).toEqual({ namespace: 'ml' });
    expect(describeSelector({ pod: '', namespace: '' })).toBe('any labels');
  });
});

describe('parseDcgmMetrics on series relabelled by Prometheus', () => {
  it('selects by exported_pod and exported_namespace, ignoring the exporter’s own pod label', () => {
    const text = fixture('prometheus-federate.txt');
    const [gpu, ...rest] = parseDcgmMetrics(text, { pod: 'gpt-pretrain-worker-0', namespace: 'ml' }, AT);
    expect(rest).toEqual([]);
    expect(gpu).toMatchObject({ index: 0, utilGpu: 87, smClockMHz: 1410, memUsedMiB: 64520, memTotalMiB: 64520 + 16467 });
    expect(parseDcgmMetrics(text, { pod: 'gpt-pretrain-worker-0', namespace: 'gpu-operator' }, AT)).toEqual([]);
  });
});

describe('parseDcgmSeries', () => {
  it('keeps the last sample of a text without a final newline', () => {
    const text = fixture('3.x-empty-help.txt').trimEnd();
    expect(parseDcgmMetrics(text, {}, AT)[0]!.utilGpu).toBe(88);
  });

  it('reads text with CRLF line ends', () => {
    const text = fixture('3.x-default-counters.txt').replaceAll('\n', '\r\n');
    expect(parseDcgmMetrics(text, {}, AT)[0]!.utilGpu).toBe(100);
  });

  it('throws on a line that is not the Prometheus format', () => {
    expect(() => parseDcgmSeries('DCGM_FI_DEV_GPU_UTIL{gpu=0} 12\n')).toThrow(/invalid line/);
  });

  it('finds no GPU in a page that is not metrics at all', () => {
    expect(parseDcgmSeries('<html><body>502 Bad Gateway</body></html>')).toEqual([]);
  });

  it('finds nothing in an empty page or in metrics of another exporter', () => {
    expect(parseDcgmSeries('')).toEqual([]);
    expect(parseDcgmSeries('# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 12\n')).toEqual([]);
  });
});

describe('describeNoMatch', () => {
  it('names the selector and the pods the exporter does map GPUs to', () => {
    const series = parseDcgmSeries(fixture('3.x-h100-pods.txt'));
    expect(describeNoMatch(series, { pod: 'llama-ft-1', namespace: 'research' })).toBe(
      'the exporter reports 4 GPU(s), none with namespace=research pod=llama-ft-1 (pods it maps GPUs to: research/llama-ft-0, serving/vllm-7c9d8-qx2mz)',
    );
  });

  it('says when the exporter maps no GPU to a pod, and when it reports no GPU at all', () => {
    expect(describeNoMatch(parseDcgmSeries(fixture('3.x-default-counters.txt')), { pod: 'x' })).toBe(
      'the exporter reports 1 GPU(s), none with pod=x (it maps no GPU to a pod)',
    );
    expect(describeNoMatch([], { pod: 'x' })).toBe('the exporter reports no GPU metrics');
  });
});

/** The lines of `text` that belong to the families named (HELP, TYPE and samples), in order. */
function onlyFamilies(text: string, names: string[]): string {
  return text
    .split('\n')
    .filter((line) => names.some((name) => line.startsWith(`${name}{`) || line.startsWith(`${name} `) || new RegExp(`^# (HELP|TYPE) ${name} `).test(line)))
    .join('\n');
}

describe('describeUnreadable: what a page with nothing readable holds instead', () => {
  it('says when the page is another exporter, not Prometheus text, or empty', () => {
    const node = fixture('not-dcgm-node-exporter.txt');
    expect(hasReadableSeries(parseDcgmSeries(node))).toBe(false);
    expect(describeUnreadable(node)).toBe("5 metric families, none of them DCGM's (go_gc_duration_seconds, go_goroutines, node_cpu_seconds_total, …): another exporter at this address?");
    expect(describeUnreadable('<!DOCTYPE html>\n<html><head><title>Grafana</title>')).toBe('not Prometheus text (it begins "<!DOCTYPE html> <html><head><title>Grafa")');
    expect(describeUnreadable('')).toBe('no metrics at all (an empty page)');
  });

  it('names 1.x exporter names and DCGM fields it does not read', () => {
    // From the literal 1.x capture, only the family the parser has no mapping for.
    const old = onlyFamilies(fixture('1.x-pod-gpu-metrics-exporter.txt'), ['dcgm_low_util_violation']);
    expect(hasReadableSeries(parseDcgmSeries(old))).toBe(false);
    expect(describeUnreadable(old)).toMatch(/^1\.x exporter names stepscope does not read \(dcgm_low_util_violation\); it reads dcgm_sm_clock, dcgm_memory_clock, dcgm_gpu_temp, … and the DCGM_FI_\* names$/);
    const fields = onlyFamilies(fixture('3.x-default-counters.txt'), ['DCGM_FI_DEV_XID_ERRORS', 'DCGM_FI_DEV_VGPU_LICENSE_STATUS']);
    expect(hasReadableSeries(parseDcgmSeries(fields))).toBe(false);
    expect(describeUnreadable(fields)).toMatch(/^only DCGM fields stepscope does not read \(DCGM_FI_DEV_XID_ERRORS, DCGM_FI_DEV_VGPU_LICENSE_STATUS\)/);
  });

  it('says when the series are not per GPU, or all blank', () => {
    const noGpu = fixture('3.x-default-counters.txt').replace(/gpu="\d+",/g, '');
    expect(hasReadableSeries(parseDcgmSeries(noGpu))).toBe(false);
    expect(describeUnreadable(noGpu)).toMatch(/^DCGM series without a per-GPU "gpu" label \(DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_MEM_CLOCK, DCGM_FI_DEV_GPU_TEMP, …; labels: UUID, device, modelName/);
    const blank = fixture('3.x-default-counters.txt').replace(/^(DCGM_FI_\S+\{[^}]*\}) \S+$/gm, '$1 9223372036854775794');
    expect(hasReadableSeries(parseDcgmSeries(blank))).toBe(false);
    expect(describeUnreadable(blank)).toMatch(/^DCGM series whose values are all blank/);
  });

  it('has nothing to say of a readable page, whatever its generation', () => {
    for (const name of ['1.x-pod-gpu-metrics-exporter.txt', '2.x-readme-spaces.txt', '3.x-default-counters.txt', '4.x-pod-uid.txt']) {
      expect(hasReadableSeries(parseDcgmSeries(fixture(name))), name).toBe(true);
    }
  });
});
