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

/** Metrics that map one to one onto a GpuSample field, by the names dcgm-exporter's counters CSV uses. */
const FIELD_BY_METRIC: Readonly<Record<string, NullableNumberField>> = {
  DCGM_FI_DEV_GPU_UTIL: 'utilGpu',
  DCGM_FI_DEV_MEM_COPY_UTIL: 'utilMem',
  DCGM_FI_DEV_SM_CLOCK: 'smClockMHz',
  DCGM_FI_DEV_MAX_SM_CLOCK: 'smClockMaxMHz',
  DCGM_FI_DEV_MEM_CLOCK: 'memClockMHz',
  DCGM_FI_DEV_GPU_TEMP: 'tempC',
  DCGM_FI_DEV_FB_USED: 'memUsedMiB',
  DCGM_FI_PROF_GR_ENGINE_ACTIVE: 'grEngineActive',
  DCGM_FI_PROF_SM_ACTIVE: 'smActive',
  DCGM_FI_PROF_SM_OCCUPANCY: 'smOccupancy',
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: 'tensorActive',
  DCGM_FI_PROF_DRAM_ACTIVE: 'dramActive',
  DCGM_FI_PROF_PCIE_TX_BYTES: 'pcieTxBps',
  DCGM_FI_PROF_PCIE_RX_BYTES: 'pcieRxBps',
};

/** DCGM 3.3 renamed the field; older exporters still send the old name. */
const THROTTLE_METRICS = ['DCGM_FI_DEV_CLOCKS_EVENT_REASONS', 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS'];
const PSTATE_METRIC = 'DCGM_FI_DEV_PSTATE';
const MEMORY_METRICS = ['DCGM_FI_DEV_FB_TOTAL', 'DCGM_FI_DEV_FB_FREE', 'DCGM_FI_DEV_FB_RESERVED'];
/** Power usage is NVML's (a 1 s average from Ampere on); the instant reading only where that is missing. */
const POWER_METRICS = { draw: 'DCGM_FI_DEV_POWER_USAGE', instant: 'DCGM_FI_DEV_POWER_USAGE_INSTANT' } as const;
/** The enforced limit is what the driver holds the board to; the requested one where it is not exported. */
const POWER_LIMIT_METRICS = ['DCGM_FI_DEV_ENFORCED_POWER_LIMIT', 'DCGM_FI_DEV_POWER_MGMT_LIMIT'];

/** Every metric this parser reads. */
export const DCGM_METRICS: readonly string[] = [
  ...Object.keys(FIELD_BY_METRIC),
  ...THROTTLE_METRICS,
  PSTATE_METRIC,
  ...MEMORY_METRICS,
  ...Object.values(POWER_METRICS),
  ...POWER_LIMIT_METRICS,
];

/**
 * DCGM 4.6's names for the same field ids (NVIDIA/go-dcgm const_fields.go lists them as the targets
 * of the deprecated ones), for a counters CSV written with them. DCGM_FI_DEV_GPU_UTIL_RATIO is left
 * out: sources disagree whether it is still a percent or now 0..1, and a misread would be 100x off.
 */
const RENAMED: Readonly<Record<string, string>> = {
  DCGM_FI_DEV_GPU_TEMP_CELSIUS: 'DCGM_FI_DEV_GPU_TEMP',
  DCGM_FI_DEV_BOARD_POWER_WATTS: 'DCGM_FI_DEV_POWER_USAGE',
  DCGM_FI_DEV_BOARD_POWER_RAW_WATTS: 'DCGM_FI_DEV_POWER_USAGE_INSTANT',
  DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS: 'DCGM_FI_DEV_POWER_MGMT_LIMIT',
  DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS: 'DCGM_FI_DEV_ENFORCED_POWER_LIMIT',
  DCGM_FI_DEV_GPU_PSTATE: 'DCGM_FI_DEV_PSTATE',
  DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
  DCGM_FI_PROF_SM_UTIL_RATIO: 'DCGM_FI_PROF_SM_ACTIVE',
  DCGM_FI_PROF_SM_OCCUPANCY_RATIO: 'DCGM_FI_PROF_SM_OCCUPANCY',
  DCGM_FI_PROF_TENSOR_UTIL_RATIO: 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE',
  DCGM_FI_PROF_DRAM_UTIL_RATIO: 'DCGM_FI_PROF_DRAM_ACTIVE',
};

/**
 * The 1.x names (`dcgm-exporter -o`, etc/1.x-compatibility-metrics.csv, and the 1.x exporter
 * itself), from NVIDIA/go-dcgm's legacy_fields.csv; `dcgm_fi_prof_*` are upper-cased instead.
 */
const LEGACY: Readonly<Record<string, string>> = {
  dcgm_sm_clock: 'DCGM_FI_DEV_SM_CLOCK',
  dcgm_memory_clock: 'DCGM_FI_DEV_MEM_CLOCK',
  dcgm_gpu_temp: 'DCGM_FI_DEV_GPU_TEMP',
  dcgm_memory_temp: 'DCGM_FI_DEV_MEMORY_TEMP',
  dcgm_power_usage: 'DCGM_FI_DEV_POWER_USAGE',
  dcgm_gpu_utilization: 'DCGM_FI_DEV_GPU_UTIL',
  dcgm_mem_copy_utilization: 'DCGM_FI_DEV_MEM_COPY_UTIL',
  dcgm_fb_free: 'DCGM_FI_DEV_FB_FREE',
  dcgm_fb_used: 'DCGM_FI_DEV_FB_USED',
};

/** The DCGM_FI_* name a family stands for, whichever generation named it; null for other families. */
export function canonicalMetric(family: string): string | null {
  const legacy = LEGACY[family.toLowerCase()];
  if (legacy) return legacy;
  const upper = family.toUpperCase();
  if (!upper.startsWith('DCGM_FI_')) return null;
  return RENAMED[upper] ?? upper;
}

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

/**
 * The GPU-level DCGM series in an exporter's text, each under its DCGM_FI_* name (see
 * canonicalMetric); throws on text that is not the Prometheus format.
 */
export function parseDcgmSeries(text: string): DcgmSeries[] {
  return parsePrometheusTextFormat(forParser(text)).flatMap((family) => {
    const metric = canonicalMetric(family.name);
    if (metric === null) return [];
    return family.metrics.flatMap(({ labels = {}, value = '' }) => (isGpuEntity(labels) ? [{ metric, labels, value: dcgmValue(value) }] : []));
  });
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
 * Pod labels come straight from the exporter's Kubernetes mapping (`pod_name`/`pod_namespace` with
 * `-o`, its 1.x names), or as exported_* when a Prometheus in between kept its own target's pod and
 * namespace in `pod` and `namespace`.
 */
function podOf(labels: Readonly<Record<string, string>>): { pod?: string; namespace?: string } {
  return { pod: labels.exported_pod ?? labels.pod_name ?? labels.pod, namespace: labels.exported_namespace ?? labels.pod_namespace ?? labels.namespace };
}

function uuidOf(labels: Readonly<Record<string, string>>): string | undefined {
  // The label is `uuid` when the exporter runs with its 1.x-compatible names.
  return labels.UUID ?? labels.uuid;
}

/**
 * The selector as meant: an empty or blank criterion (POD_NAME set to "" by a manifest) is no
 * criterion, else `pod=""` would pick only the GPUs no pod holds, or none.
 */
export function normaliseSelector(select: DcgmSelector): DcgmSelector {
  const given = (value: string | undefined) => (value === undefined || value.trim() === '' ? undefined : value.trim());
  const uuids = select.uuids?.map((uuid) => uuid.trim()).filter((uuid) => uuid !== '');
  const out: DcgmSelector = {};
  if (given(select.pod) !== undefined) out.pod = given(select.pod)!;
  if (given(select.namespace) !== undefined) out.namespace = given(select.namespace)!;
  if (given(select.hostname) !== undefined) out.hostname = given(select.hostname)!;
  if (uuids && uuids.length > 0) out.uuids = uuids;
  return out;
}

export function matchesSelector(labels: Readonly<Record<string, string>>, selector: DcgmSelector): boolean {
  const select = normaliseSelector(selector);
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

/** The samples of the GPUs the selector picks: what one scrape of the exporter gives. */
export function selectedSamples(series: readonly DcgmSeries[], select: DcgmSelector, at: number): GpuSample[] {
  return toGpuSamples(
    series.filter((one) => matchesSelector(one.labels, select)),
    at,
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

function byIndexThenInstance(a: GpuSeries, b: GpuSeries): number {
  return Number(a.labels.gpu) - Number(b.labels.gpu) || Number(a.labels.GPU_I_ID ?? -1) - Number(b.labels.GPU_I_ID ?? -1);
}

function toGpuSample({ labels, values }: GpuSeries, at: number): GpuSample {
  const sample = emptyGpuSample(at, Number(labels.gpu));
  Object.assign(sample, identity(labels));
  sample.name = deviceName(labels);
  for (const [metric, field] of Object.entries(FIELD_BY_METRIC)) sample[field] = values.get(metric) ?? null;
  // DCGM gives no GPU_UTIL for a MIG instance; GR_ENGINE_ACTIVE is its utilization (NVIDIA/dcgm-exporter#50).
  if (sample.utilGpu === null && sample.grEngineActive !== null) sample.utilGpu = Math.round(sample.grEngineActive * 10_000) / 100;
  const draw = values.get(POWER_METRICS.draw) ?? null;
  const instant = values.get(POWER_METRICS.instant) ?? null;
  sample.powerW = draw ?? instant;
  sample.powerReading = draw !== null ? 'draw' : instant !== null ? 'instant' : null;
  sample.powerLimitW = firstValue(values, POWER_LIMIT_METRICS);
  sample.throttleReasons = firstValue(values, THROTTLE_METRICS);
  sample.memTotalMiB = memoryTotalMiB(values);
  sample.pstate = pstateName(values.get(PSTATE_METRIC) ?? null);
  return sample;
}

/**
 * A MIG instance is labelled with its parent's UUID and its GPU instance (`GPU_I_ID`,
 * `GPU_I_PROFILE`); only the DRA mapping names the instance's own UUID.
 */
function identity(labels: Readonly<Record<string, string>>): Pick<GpuSample, 'uuid' | 'parentUuid' | 'gpuInstanceId' | 'migProfile'> {
  const uuid = uuidOf(labels) ?? null;
  const gi = labels.GPU_I_ID;
  if (gi === undefined || !/^\d+$/.test(gi)) return { uuid, parentUuid: null, gpuInstanceId: null, migProfile: null };
  return { uuid: labels.dra_mig_device_uuid || null, parentUuid: uuid, gpuInstanceId: Number(gi), migProfile: labels.GPU_I_PROFILE || null };
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

const KNOWN = new Set(DCGM_METRICS);
/** The Prometheus exposition format's metric names. */
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** Whether any series is a per-GPU field this parser reads, with a value: the page can give samples. */
export function hasReadableSeries(series: readonly DcgmSeries[]): boolean {
  return series.some((one) => one.value !== null && KNOWN.has(one.metric));
}

const some = (names: readonly string[], limit = 3) => `${names.slice(0, limit).join(', ')}${names.length > limit ? ', …' : ''}`;

/**
 * What an exporter's page holds when no per-GPU series of it can be read, in words: for the error a
 * --dcgm-url pointing at the wrong exporter, port or exporter version gets (said in the log, the
 * state's counter health and /readyz). Pure.
 */
export function describeUnreadable(text: string): string {
  let families: ReturnType<typeof parsePrometheusTextFormat> | null;
  try {
    families = parsePrometheusTextFormat(forParser(text));
  } catch {
    families = null;
  }
  // The parser takes "<!DOCTYPE html>" for a sample; a metric name never looks so.
  if (families === null || families.some((family) => !METRIC_NAME.test(family.name))) {
    return `not Prometheus text (it begins ${JSON.stringify(text.trim().slice(0, 40).replace(/\s+/g, ' '))})`;
  }
  if (families.length === 0) return 'no metrics at all (an empty page)';
  const names = families.map((family) => family.name);
  const dcgm = names.filter((name) => canonicalMetric(name) !== null || /^dcgm_/i.test(name));
  if (dcgm.length === 0) return `${names.length} metric families, none of them DCGM's (${some(names)}): another exporter at this address?`;
  const readable = dcgm.filter((name) => KNOWN.has(canonicalMetric(name) ?? ''));
  if (readable.length === 0) {
    const old = dcgm.filter((name) => !name.toUpperCase().startsWith('DCGM_FI_'));
    return old.length === dcgm.length
      ? `1.x exporter names stepscope does not read (${some(old)}); it reads ${some(Object.keys(LEGACY))} and the DCGM_FI_* names`
      : `only DCGM fields stepscope does not read (${some(dcgm)}); add DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_SM_CLOCK and the others of deploy/kubernetes/dcgm-exporter-counters.yaml to the exporter's counters`;
  }
  const series = families.filter((family) => readable.includes(family.name)).flatMap((family) => family.metrics);
  const perGpu = series.filter(({ labels = {} }) => isGpuEntity(labels));
  if (perGpu.length === 0) {
    const labels = [...new Set(series.flatMap(({ labels = {} }) => Object.keys(labels)))];
    return `DCGM series without a per-GPU "gpu" label (${some(readable)}; labels: ${labels.length > 0 ? some(labels, 6) : 'none'})`;
  }
  return `DCGM series whose values are all blank (${some(readable)}): DCGM's "no value" sentinels, or fields this GPU does not support`;
}

/** Why nothing was selected, for the error a misconfigured pod or namespace gets. */
export function describeNoMatch(series: readonly DcgmSeries[], selector: DcgmSelector): string {
  const select = normaliseSelector(selector);
  const gpuCount = toGpuSamples(series, 0).length;
  if (gpuCount === 0) return 'the exporter reports no GPU metrics';
  const pods = [...new Set(series.map(({ labels }) => podOf(labels)).filter(({ pod }) => pod).map(({ pod, namespace }) => `${namespace ?? '?'}/${pod}`))];
  const mapped = pods.length > 0 ? `pods it maps GPUs to: ${pods.slice(0, 5).join(', ')}${pods.length > 5 ? ', …' : ''}` : 'it maps no GPU to a pod';
  return `the exporter reports ${gpuCount} GPU(s), none with ${describeSelector(select)} (${mapped})`;
}

export function describeSelector(selector: DcgmSelector): string {
  const select = normaliseSelector(selector);
  const criteria = [
    select.namespace !== undefined && `namespace=${select.namespace}`,
    select.pod !== undefined && `pod=${select.pod}`,
    select.uuids !== undefined && `UUID in [${select.uuids.join(', ')}]`,
    select.hostname !== undefined && `hostname=${select.hostname}`,
  ].filter((criterion): criterion is string => criterion !== false);
  return criteria.length > 0 ? criteria.join(' ') : 'any labels';
}
