import { emptyGpuSample, type GpuSample, type PowerReading } from './types.js';

/**
 * Pure reading of `nvidia-smi --query-gpu=... --format=csv` output: no I/O here, so every shape a
 * driver has been seen to print can be pinned down by a literal fixture
 * (test/fixtures/nvidia-smi, with SOURCES.md saying where each came from).
 */

/** Drivers from 535 on call the clock limiters "clocks_event_reasons"; older ones only know "clocks_throttle_reasons". */
export type ReasonNaming = 'event' | 'throttle';

const REASONS_FIELD: Record<ReasonNaming, string> = {
  event: 'clocks_event_reasons.active',
  throttle: 'clocks_throttle_reasons.active',
};

const SAMPLE_FIELDS = [
  'index',
  'uuid',
  'name',
  'utilization.gpu',
  'utilization.memory',
  'memory.used',
  'memory.total',
  'temperature.gpu',
  'power.draw',
  'power.limit',
  'clocks.sm',
  'clocks.max.sm',
  'clocks.mem',
  'pstate',
] as const;

/**
 * Asked for where the driver knows them, in groups a driver knows or refuses together. power.draw
 * is a 1 s average on Ampere and newer and an instant reading before; the split readings (recent
 * drivers) say which. mig.mode.current (R450 on) tells whether to look for MIG instances.
 */
export const OPTIONAL_GROUPS: readonly (readonly string[])[] = [['power.draw.average', 'power.draw.instant'], ['mig.mode.current']];
export const OPTIONAL_FIELDS: readonly string[] = OPTIONAL_GROUPS.flat();

/**
 * The `--query-gpu` field list, in output column order, for either naming of the reasons bitmask
 * (always last) and the optional fields the driver accepts.
 */
export function queryFields(naming: ReasonNaming, optional: readonly string[] = OPTIONAL_FIELDS): string[] {
  return [...SAMPLE_FIELDS, ...optional, REASONS_FIELD[naming]];
}

type Reader = 'integer' | 'number' | 'text' | 'pstate' | 'bitmask';
type SampleKey = Exclude<keyof GpuSample, 'at' | 'index' | 'powerW' | 'powerReading'>;

interface Column {
  key: SampleKey;
  read: Reader;
}

/** Query field (and the names nvidia-smi accepts or echoes for it) to the sample figure it fills. */
const COLUMNS: Readonly<Record<string, Column>> = {
  uuid: { key: 'uuid', read: 'text' },
  gpu_uuid: { key: 'uuid', read: 'text' },
  name: { key: 'name', read: 'text' },
  gpu_name: { key: 'name', read: 'text' },
  'utilization.gpu': { key: 'utilGpu', read: 'number' },
  'utilization.memory': { key: 'utilMem', read: 'number' },
  'memory.used': { key: 'memUsedMiB', read: 'number' },
  'memory.total': { key: 'memTotalMiB', read: 'number' },
  'temperature.gpu': { key: 'tempC', read: 'number' },
  'power.limit': { key: 'powerLimitW', read: 'number' },
  'clocks.sm': { key: 'smClockMHz', read: 'number' },
  'clocks.current.sm': { key: 'smClockMHz', read: 'number' },
  'clocks.max.sm': { key: 'smClockMaxMHz', read: 'number' },
  'clocks.mem': { key: 'memClockMHz', read: 'number' },
  'clocks.current.memory': { key: 'memClockMHz', read: 'number' },
  pstate: { key: 'pstate', read: 'pstate' },
  'clocks_event_reasons.active': { key: 'throttleReasons', read: 'bitmask' },
  'clocks_throttle_reasons.active': { key: 'throttleReasons', read: 'bitmask' },
};

/** The power readings, by field name; the aliases are the ones `--help-query-gpu` lists. */
const POWER_COLUMNS: Readonly<Record<string, PowerReading>> = {
  'power.draw': 'draw',
  'power.draw.average': 'average',
  'gpu.power.draw.average': 'average',
  'power.draw.instant': 'instant',
  'gpu.power.draw.instant': 'instant',
};
const POWER_PREFERENCE: readonly PowerReading[] = ['average', 'instant', 'draw'];

/**
 * "[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU requires reset]", "[Insufficient Permissions]",
 * "[Requested functionality has been deprecated]"..., a bare "N/A" (some fields on every driver) and
 * an empty column all mean the driver has no figure to give.
 */
export function isNotAvailable(raw: string): boolean {
  return raw === '' || raw === 'N/A' || (raw.startsWith('[') && raw.endsWith(']'));
}

/** A plain number, or one with the unit a query without `nounits` appends ("71.15 W", "100 %"). */
const NUMBER = /^(-?\d+(?:\.\d+)?)(?: ?(?:%|MiB|W|MHz))?$/;
const HEX_MASK = /^0x[0-9a-f]{1,16}$/i;
const PSTATE = /^P\d{1,2}$/;

const UNREADABLE = Symbol('unreadable');
type Value = number | string | null | typeof UNREADABLE;

function readValue(raw: string, reader: Reader): Value {
  if (isNotAvailable(raw)) return null;
  switch (reader) {
    case 'text':
      return raw;
    case 'pstate':
      return PSTATE.test(raw) ? raw : UNREADABLE;
    case 'integer':
      return /^\d+$/.test(raw) ? Number(raw) : UNREADABLE;
    case 'number': {
      const match = NUMBER.exec(raw);
      return match ? Number(match[1]) : UNREADABLE;
    }
    case 'bitmask':
      // Only the low bits are defined; a 64-bit mask above 2^53 would lose precision, not fail.
      if (HEX_MASK.test(raw)) return Number.parseInt(raw.slice(2), 16);
      return /^\d+$/.test(raw) ? Number(raw) : UNREADABLE;
  }
}

function splitColumns(line: string): string[] {
  return line.split(',').map((column) => column.trim());
}

export type ParsedLine =
  | { ok: true; sample: GpuSample; /** Figures that were present but not understood, reported as null. */ problems: string[] }
  | { ok: false; problem: string };

/**
 * One CSV line, whose columns are `fields` in order, as a sample. Fields this module does not know are
 * ignored. A query without `index` is attributed by `position`: nvidia-smi prints GPUs in index order.
 * A line that cannot be a row of this query (wrong column count, no readable index) is refused, never thrown.
 */
export function parseGpuLine(line: string, fields: readonly string[], at: number, position = 0): ParsedLine {
  const columns = splitColumns(line.replace(/\r$/, ''));
  if (columns.length !== fields.length) {
    return { ok: false, problem: `expected ${fields.length} columns, got ${columns.length}` };
  }
  const indexAt = fields.indexOf('index');
  const index = indexAt < 0 ? position : readValue(columns[indexAt]!, 'integer');
  if (typeof index !== 'number') return { ok: false, problem: 'index column is not a GPU index' };

  const sample = emptyGpuSample(at, index);
  const problems: string[] = [];
  const power: Partial<Record<PowerReading, number>> = {};
  fields.forEach((field, i) => {
    const column = POWER_COLUMNS[field] ? ({ read: 'number' } as const) : COLUMNS[field];
    if (!column) return;
    const value = readValue(columns[i]!, column.read);
    if (value === UNREADABLE) problems.push(`unreadable ${field}`);
    else if ('key' in column) (sample as unknown as Record<SampleKey, number | string | null>)[column.key] = value;
    else if (typeof value === 'number') power[POWER_COLUMNS[field]!] = value;
  });
  // A GA100 or pre-Ampere GPU answers power.draw.average with [N/A]: the next reading stands in.
  const reading = POWER_PREFERENCE.find((kind) => power[kind] !== undefined) ?? null;
  sample.powerW = reading === null ? null : power[reading]!;
  sample.powerReading = reading;
  return { ok: true, sample, problems };
}

/** What nvidia-smi's exit codes 14 and 15 mean (NVML_ERROR_CORRUPTED_INFOROM, NVML_ERROR_GPU_IS_LOST): it still prints the rows it could read. */
const EXIT_WARNINGS: Readonly<Record<number, string>> = {
  14: 'infoROM is corrupted',
  15: 'a GPU has fallen off the bus or is otherwise inaccessible',
};

/** The meaning of an exit code after which nvidia-smi's rows are still good, or null. */
export function exitWarning(code: number | null): string | null {
  return code === null ? null : (EXIT_WARNINGS[code] ?? null);
}

/** nvidia-smi's own warning lines ("WARNING: infoROM is corrupted at gpu 0000:00:1E.0") among the rows. */
export function driverWarning(line: string): string | null {
  const match = /^WARNING: (.+)$/.exec(line.trim());
  return match ? match[1]! : null;
}

const UNKNOWN_FIELD = /Field "([^"]+)" is not a valid field to (?:query|be queried)/;

/** The field an nvidia-smi that does not know it names, in "Field "x" is not a valid field to query.", if any. */
export function unknownQueryField(output: string): string | null {
  return UNKNOWN_FIELD.exec(output)?.[1] ?? null;
}

/**
 * True when a sample carries a live figure. Totals and limits are left out: a GPU that reports
 * only those (every reading "[Unknown Error]" or "[GPU requires reset]") is not being read.
 */
export function hasFigures(sample: GpuSample): boolean {
  return (
    [sample.utilGpu, sample.utilMem, sample.memUsedMiB, sample.tempC, sample.powerW, sample.smClockMHz, sample.memClockMHz].some(
      (figure) => figure !== null,
    ) || sample.pstate !== null
  );
}

/**
 * Groups the per-GPU lines of a looping nvidia-smi into rounds. A round ends at the highest index
 * known (so it is delivered without waiting for the next interval) or, when the set of GPUs changed,
 * at the first repeated index, which also teaches it the new last index.
 */
export class RoundGrouper {
  private pending: GpuSample[] = [];

  constructor(private lastIndex: number | null = null) {}

  add(sample: GpuSample): GpuSample[][] {
    const rounds: GpuSample[][] = [];
    if (this.pending.some((seen) => seen.index === sample.index)) {
      this.lastIndex = this.pending[this.pending.length - 1]!.index;
      rounds.push(this.take());
    }
    this.pending.push(sample);
    if (this.lastIndex !== null && sample.index >= this.lastIndex) {
      this.lastIndex = sample.index;
      rounds.push(this.take());
    }
    return rounds;
  }

  private take(): GpuSample[] {
    const round = this.pending;
    this.pending = [];
    return round;
  }
}
