/**
 * dcgm-exporter's Prometheus text → GpuSample[]. Pure: the collector in dcgm.ts does the HTTP.
 * Covers the label sets of dcgm-exporter 2.x to 4.x (test/fixtures/dcgm/SOURCES.md lists them).
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { emptyGpuSample, type GpuSample } from './types.js';

/** Which of the node's GPUs are this job's. Every given criterion must hold; none given means all. */
export interface DcgmSelector {
  pod?: string;
  namespace?: string;
  uuids?: readonly string[];
  hostname?: string;
}

/** One GPU-level series of a DCGM_FI_* metric; `value` is null where DCGM reported a blank. */
export interface DcgmSeries {
  metric: string;
  labels: Readonly<Record<string, string>>;
  value: number | null;
}

type NullableNumberField = {
  [K in keyof GpuSample]: null extends GpuSample[K] ? (GpuSample[K] extends number | null ? K : never) : never;
}[keyof GpuSample];

/** Metrics that map one to one onto a GpuSample field. */
const FIELD_BY_METRIC: Readonly<Record<string, NullableNumberField>> = {
  DCGM_FI_DEV_GPU_UTIL: 'utilGpu',
  DCGM_FI_DEV_MEM_COPY_UTIL: 'utilMem',
  DCGM_FI_DEV_SM_CLOCK: 'smClockMHz',
  DCGM_FI_DEV_MAX_SM_CLOCK: 'smClockMaxMHz',
  DCGM_FI_DEV_MEM_CLOCK: 'memClockMHz',
  DCGM_FI_DEV_GPU_TEMP: 'tempC',
  DCGM_FI_DEV_POWER_USAGE: 'powerW',
  DCGM_FI_DEV_POWER_MGMT_LIMIT: 'powerLimitW',
  DCGM_FI_DEV_FB_USED: 'memUsedMiB',
  DCGM_FI_PROF_GR_ENGINE_ACTIVE: 'grEngineActive',
  DCGM_FI_PROF_SM_ACTIVE: 'smActive',
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: 'tensorActive',
  DCGM_FI_PROF_DRAM_ACTIVE: 'dramActive',
  DCGM_FI_PROF_PCIE_TX_BYTES: 'pcieTxBps',
  DCGM_FI_PROF_PCIE_RX_BYTES: 'pcieRxBps',
};

/** DCGM 3.3 renamed the field; older exporters still send the old name. */
const THROTTLE_METRICS = ['DCGM_FI_DEV_CLOCKS_EVENT_REASONS', 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS'];
const PSTATE_METRIC = 'DCGM_FI_DEV_PSTATE';
const MEMORY_METRICS = ['DCGM_FI_DEV_FB_TOTAL', 'DCGM_FI_DEV_FB_FREE', 'DCGM_FI_DEV_FB_RESERVED'];

/** Every metric this parser reads. */
export const DCGM_METRICS: readonly string[] = [...Object.keys(FIELD_BY_METRIC), ...THROTTLE_METRICS, PSTATE_METRIC, ...MEMORY_METRICS];

/**
 * DCGM's "no value" sentinels. DCGM_FT_FP64_BLANK (2^47) and the three after it (not found, not
 * supported, not permissioned) are the floating-point ones; DCGM_FT_INT64_BLANK (2^63 - 16) and its
 * three lie above, so one comparison catches both. Exporters before 3.x print them as values.
 */
const FP64_BLANK = 140737488355328;
/** DCGM_FT_INT32_BLANK to DCGM_FT_INT32_NOT_PERMISSIONED, which dcgm-exporter also treats as blanks. */
const INT32_BLANKS = new Set([2147483632, 2147483633, 2147483634, 2147483635]);
/** NVML_PSTATE_UNKNOWN. */
const PSTATE_UNKNOWN = 32;

export function dcgmValue(text: string): number | null {
  if (text.trim() === '') return null;
  const value = Number(text);
  if (!Number.isFinite(value) || value >= FP64_BLANK || INT32_BLANKS.has(value)) return null;
  return value;
}

/** The GPU-level DCGM_FI_* series in an exporter's text; throws on text that is not the Prometheus format. */
export function parseDcgmSeries(text: string): DcgmSeries[] {
  return parsePrometheusTextFormat(forParser(text)).flatMap((family) =>
    family.name.startsWith('DCGM_FI_')
      ? family.metrics.flatMap(({ labels = {}, value = '' }) => (isGpuEntity(labels) ? [{ metric: family.name, labels, value: dcgmValue(value) }] : []))
      : [],
  );
}

/**
 * parse-prometheus-text-format 1.1.1 rejects two things dcgm-exporter really sends, a HELP line
 * without text (the counters CSV may leave the help column empty) and a space after a label's comma
 * (2.x, as its README shows), and drops the last sample when the text does not end in a newline.
 * Help texts are never used, so those lines go.
 */
function forParser(text: string): string {
  return `${text.replace(/^[ \t]*#[ \t]*HELP\b.*$/gm, '').replace(/(?<!\\)",[ \t]+/g, '",')}\n`;
}

/** NVLink and NVSwitch series carry a `gpu` label too, but describe a link or a switch. */
function isGpuEntity(labels: Record<string, string>): boolean {
  return labels.gpu !== undefined && /^\d+$/.test(labels.gpu) && labels.nvlink === undefined && labels.nvswitch === undefined;
}

/**
 * Pod labels come straight from the exporter's Kubernetes mapping, or as exported_* when a
 * Prometheus in between kept its own target's pod and namespace in `pod` and `namespace`.
 */
function podOf(labels: Readonly<Record<string, string>>): { pod?: string; namespace?: string } {
  return { pod: labels.exported_pod ?? labels.pod, namespace: labels.exported_namespace ?? labels.namespace };
}

function uuidOf(labels: Readonly<Record<string, string>>): string | undefined {
  // The label is `uuid` when the exporter runs with its 1.x-compatible names.
  return labels.UUID ?? labels.uuid;
}

export function matchesSelector(labels: Readonly<Record<string, string>>, select: DcgmSelector): boolean {
  const { pod, namespace } = podOf(labels);
  const uuid = uuidOf(labels);
  const hostname = labels.hostname ?? labels.Hostname;
  return (
    (select.pod === undefined || pod === select.pod) &&
    (select.namespace === undefined || namespace === select.namespace) &&
    (select.uuids === undefined || (uuid !== undefined && select.uuids.includes(uuid))) &&
    (select.hostname === undefined || hostname === select.hostname)
  );
}

interface GpuSeries {
  labels: Readonly<Record<string, string>>;
  values: Map<string, number | null>;
}

/** One sample per GPU, or per MIG instance, in index order. */
export function toGpuSamples(series: readonly DcgmSeries[], at: number): GpuSample[] {
  const gpus = new Map<string, GpuSeries>();
  for (const { metric, labels, value } of series) {
    const key = `${labels.gpu}/${uuidOf(labels) ?? ''}/${labels.GPU_I_ID ?? ''}`;
    let gpu = gpus.get(key);
    if (!gpu) gpus.set(key, (gpu = { labels, values: new Map() }));
    gpu.values.set(metric, value);
  }
  return [...gpus.values()].sort(byIndexThenInstance).map((gpu) => toGpuSample(gpu, at));
}

export function parseDcgmMetrics(text: string, select: DcgmSelector, at: number): GpuSample[] {
  return toGpuSamples(
    parseDcgmSeries(text).filter((series) => matchesSelector(series.labels, select)),
    at,
  );
}

function byIndexThenInstance(a: GpuSeries, b: GpuSeries): number {
  return Number(a.labels.gpu) - Number(b.labels.gpu) || Number(a.labels.GPU_I_ID ?? -1) - Number(b.labels.GPU_I_ID ?? -1);
}

function toGpuSample({ labels, values }: GpuSeries, at: number): GpuSample {
  const sample = emptyGpuSample(at, Number(labels.gpu));
  sample.uuid = uuidOf(labels) ?? null;
  sample.name = deviceName(labels);
  for (const [metric, field] of Object.entries(FIELD_BY_METRIC)) sample[field] = values.get(metric) ?? null;
  sample.throttleReasons = firstValue(values, THROTTLE_METRICS);
  sample.memTotalMiB = memoryTotalMiB(values);
  sample.pstate = pstateName(values.get(PSTATE_METRIC) ?? null);
  return sample;
}

/** NVML names a MIG device after its parent and profile ("NVIDIA A30 MIG 2g.12gb"); so do we. */
function deviceName(labels: Readonly<Record<string, string>>): string | null {
  const model = labels.modelName;
  if (model === undefined) return null;
  return labels.GPU_I_PROFILE ? `${model} MIG ${labels.GPU_I_PROFILE}` : model;
}

/** NVML's total is used + free + reserved; the exporter sends FB_TOTAL only when asked for it. */
function memoryTotalMiB(values: Map<string, number | null>): number | null {
  const total = values.get('DCGM_FI_DEV_FB_TOTAL') ?? null;
  if (total !== null) return total;
  const used = values.get('DCGM_FI_DEV_FB_USED') ?? null;
  const free = values.get('DCGM_FI_DEV_FB_FREE') ?? null;
  if (used === null || free === null) return null;
  return used + free + (values.get('DCGM_FI_DEV_FB_RESERVED') ?? 0);
}

function pstateName(value: number | null): string | null {
  return value === null || value === PSTATE_UNKNOWN ? null : `P${value}`;
}

function firstValue(values: Map<string, number | null>, metrics: readonly string[]): number | null {
  for (const metric of metrics) {
    const value = values.get(metric);
    if (value !== undefined && value !== null) return value;
  }
  return null;
}

/** Why nothing was selected, for the error a misconfigured pod or namespace gets. */
export function describeNoMatch(series: readonly DcgmSeries[], select: DcgmSelector): string {
  const gpuCount = toGpuSamples(series, 0).length;
  if (gpuCount === 0) return 'the exporter reports no GPU metrics';
  const pods = [...new Set(series.map(({ labels }) => podOf(labels)).filter(({ pod }) => pod).map(({ pod, namespace }) => `${namespace ?? '?'}/${pod}`))];
  const mapped = pods.length > 0 ? `pods it maps GPUs to: ${pods.slice(0, 5).join(', ')}${pods.length > 5 ? ', …' : ''}` : 'it maps no GPU to a pod';
  return `the exporter reports ${gpuCount} GPU(s), none with ${describeSelector(select)} (${mapped})`;
}

export function describeSelector(select: DcgmSelector): string {
  const criteria = [
    select.namespace !== undefined && `namespace=${select.namespace}`,
    select.pod !== undefined && `pod=${select.pod}`,
    select.uuids !== undefined && `UUID in [${select.uuids.join(', ')}]`,
    select.hostname !== undefined && `hostname=${select.hostname}`,
  ].filter((criterion): criterion is string => criterion !== false);
  return criteria.length > 0 ? criteria.join(' ') : 'any labels';
}
