import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  driverWarning,
  exitWarning,
  hasFigures,
  isNotAvailable,
  parseGpuLine,
  queryFields,
  RoundGrouper,
  unknownQueryField,
  type ParsedLine,
} from '../src/counters/nvidia-smi-parse.js';
import { emptyGpuSample, ThrottleReason, throttleReasonNames, type GpuSample } from '../src/counters/types.js';
import { fieldsFromHeader } from './support/counters.js';
import { ROOT } from './support/sidecar.js';

// Every fixture is literal nvidia-smi output; SOURCES.md beside them says where each was captured.
const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'nvidia-smi');
const AT = 1_700_000_000_000;

function lines(name: string): string[] {
  return readFileSync(path.join(FIXTURES, name), 'utf8').split('\n').filter((line) => line.trim());
}

function text(name: string): string {
  return readFileSync(path.join(FIXTURES, name), 'utf8');
}

/** A `--format=csv` capture: the header names the columns of the rows under it. */
function csvCapture(name: string): { fields: string[]; rows: string[] } {
  const [header, ...rows] = lines(name);
  return { fields: fieldsFromHeader(header!), rows };
}

function sampleOf(parsed: ParsedLine): GpuSample {
  if (!parsed.ok) throw new Error(`line refused: ${parsed.problem}`);
  expect(parsed.problems).toEqual([]);
  return parsed.sample;
}

describe('queryFields', () => {
  it('asks for every figure a sample holds, with the reasons bitmask under either name', () => {
    const common = [
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
    ];
    const optional = ['power.draw.average', 'power.draw.instant', 'mig.mode.current'];
    expect(queryFields('event')).toEqual([...common, ...optional, 'clocks_event_reasons.active']);
    expect(queryFields('throttle')).toEqual([...common, ...optional, 'clocks_throttle_reasons.active']);
    // A driver that refuses the power readings is asked without them; the reasons stay last.
    expect(queryFields('event', ['power.draw.instant'])).toEqual([...common, 'power.draw.instant', 'clocks_event_reasons.active']);
    expect(queryFields('throttle', [])).toEqual([...common, 'clocks_throttle_reasons.active']);
  });
});

describe('parseGpuLine on datacenter captures (driver 590, clocks_event_reasons)', () => {
  it('reads an H100 under load, with units, 212 columns and "[Requested functionality has been deprecated]" around it', () => {
    const { fields, rows } = csvCapture('h100-80gb-hbm3_590.48.01_load.csv');
    expect(fields).toHaveLength(212);
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample).toMatchObject({
      at: AT,
      index: 0,
      uuid: 'GPU-00000000-0000-0000-0000-000000000000',
      name: 'NVIDIA H100 80GB HBM3',
      utilGpu: 100,
      utilMem: 11,
      memUsedMiB: 19818,
      memTotalMiB: 81559,
      tempC: 59,
      // power.draw.average, as the driver has it; the instant reading was 625.68 W.
      powerW: 631.95,
      powerReading: 'average',
      powerLimitW: 700,
      smClockMHz: 1980,
      smClockMaxMHz: 1980,
      memClockMHz: 2619,
      pstate: 'P0',
      throttleReasons: 0,
    });
  });

  it('gives null, not 0, for the utilization a MIG-enabled H100 does not report', () => {
    const { fields, rows } = csvCapture('h100-80gb-hbm3-mig_590.48.01_idle.csv');
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample.utilGpu).toBeNull();
    expect(sample.utilMem).toBeNull();
    expect(sample).toMatchObject({ memUsedMiB: 59, tempC: 42, powerW: 71.15, smClockMHz: 345, throttleReasons: ThrottleReason.GpuIdle });
    expect(throttleReasonNames(sample.throttleReasons)).toEqual(['GpuIdle']);
    expect(hasFigures(sample)).toBe(true);
  });

  it('leaves the DCGM-only figures null: nvidia-smi has no profiling counters', () => {
    const { fields, rows } = csvCapture('h100-80gb-hbm3_590.48.01_load.csv');
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect([sample.smActive, sample.tensorActive, sample.dramActive, sample.pcieTxBps]).toEqual([null, null, null, null]);
  });
});

describe('parseGpuLine on older drivers (clocks_throttle_reasons)', () => {
  it('reads the 0x...01FF-style bitmask and a bare "N/A" on a 465 Linux driver', () => {
    const { fields, rows } = csvCapture('rtx-2080-super_465.27_linux.csv');
    expect(fields).toContain('clocks_throttle_reasons.active');
    expect(fields).toContain('temperature.memory'); // printed as bare "N/A", and not a figure we keep
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample).toMatchObject({
      name: 'NVIDIA GeForce RTX 2080 SUPER',
      uuid: 'GPU-1937b558-347d-0f30-105b-893b98985668',
      utilGpu: 0,
      utilMem: 10,
      memUsedMiB: 344,
      memTotalMiB: 7979,
      tempC: 32,
      powerW: 30.37,
      powerLimitW: 250,
      smClockMHz: 300,
      smClockMaxMHz: 2145,
      memClockMHz: 405,
      pstate: 'P8',
      throttleReasons: 0x1,
    });
  });

  it('reads a 471 Windows (WDDM) driver the same way', () => {
    const { fields, rows } = csvCapture('rtx-2080-super_471.11_windows.csv');
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample).toMatchObject({ utilGpu: 2, memUsedMiB: 876, memTotalMiB: 8192, powerW: 32.7, smClockMHz: 111, throttleReasons: 1 });
  });

  it('reads nounits output with a name that contains spaces and no index column (attributed by position)', () => {
    const fields = [
      'power.limit',
      'power.min_limit',
      'power.max_limit',
      'memory.total',
      'vbios_version',
      'driver_version',
      'name',
      'gpu_uuid',
      'power.draw',
      'temperature.gpu',
      'temperature.memory',
      'clocks.current.graphics',
      'clocks.sm',
      'clocks.mem',
      'utilization.gpu',
      'utilization.memory',
      'fan.speed',
      'pcie.link.width.current',
      'pstate',
    ];
    const sample = sampleOf(parseGpuLine(lines('rtx-2080_440.64_nounits.txt')[0]!, fields, AT, 3));
    expect(sample).toMatchObject({
      index: 3,
      name: 'GeForce RTX 2080',
      uuid: 'GPU-22b2c6ac-2d49-4863-197c-9c469071178a',
      powerLimitW: 200,
      powerW: 176.98,
      tempC: 45,
      smClockMHz: 1965,
      memClockMHz: 7199,
      utilGpu: 86,
      utilMem: 55,
      pstate: 'P2',
    });
  });
});

describe('parseGpuLine on the power readings', () => {
  it('takes power.draw.instant where power.draw.average is [N/A] (a Turing GPU on a 595 driver)', () => {
    const { fields, rows } = csvCapture('rtx-2080-super_595.71.05_load.csv');
    expect(fields).toEqual(expect.arrayContaining(['power.draw', 'power.draw.average', 'power.draw.instant']));
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample).toMatchObject({ name: 'NVIDIA GeForce RTX 2080 SUPER', powerW: 111.5, powerReading: 'instant', powerLimitW: 250 });
  });

  it('says power.draw is all there is on a driver without the split readings (465)', () => {
    const { fields, rows } = csvCapture('rtx-2080-super_465.27_linux.csv');
    expect(sampleOf(parseGpuLine(rows[0]!, fields, AT))).toMatchObject({ powerW: 30.37, powerReading: 'draw' });
  });

  it('gives no reading, and no kind of one, where the GPU has none (GTX 770)', () => {
    const fields = ['gpu_name', 'power.draw', 'power.limit'];
    expect(sampleOf(parseGpuLine('GeForce GTX 770, [Not Supported], [Not Supported]', fields, AT))).toMatchObject({ powerW: null, powerReading: null });
  });
});

describe('exitWarning and driverWarning', () => {
  it('knows the exit codes after which the printed rows are still good', () => {
    expect(exitWarning(14)).toBe('infoROM is corrupted');
    expect(exitWarning(15)).toMatch(/fallen off the bus/);
    for (const code of [0, 2, 9, 18, 255, null]) expect(exitWarning(code), String(code)).toBeNull();
  });

  it('recognises the warning line a GPU with a corrupted infoROM adds, and nothing else', () => {
    expect(driverWarning(lines('inforom-corrupted_warning.txt')[0]!)).toBe('infoROM is corrupted at gpu 0000:00:1E.0');
    const { rows } = csvCapture('h100-80gb-hbm3_590.48.01_load.csv');
    expect(driverWarning(rows[0]!)).toBeNull();
    expect(driverWarning(lines('driver-not-loaded.txt')[0]!)).toBeNull();
  });
});

describe('parseGpuLine on "not available" spellings', () => {
  const fanQuery = ['memory.total', 'memory.free', 'memory.used', 'temperature.gpu', 'fan.speed', 'utilization.gpu', 'utilization.memory'];

  it('reads the same card before and after the driver changed "[Not Supported]" to "[N/A]"', () => {
    for (const name of ['geforce-2gb_fan-not-supported_nounits.txt', 'geforce-2gb_fan-na_nounits.txt']) {
      const sample = sampleOf(parseGpuLine(lines(name)[0]!, fanQuery, AT));
      expect(sample).toMatchObject({ memTotalMiB: 2004, memUsedMiB: 0, tempC: 44, utilGpu: 0, utilMem: 0 });
    }
  });

  it('gives null for every "[Not Supported]" figure of a GeForce GTX 770 (power.limit included)', () => {
    const fields = [
      'gpu_name',
      'utilization.gpu',
      'utilization.memory',
      'temperature.gpu',
      'power.draw',
      'power.limit',
      'fan.speed',
      'pstate',
      'clocks.current.graphics',
      'clocks.current.memory',
      'power.max_limit',
      'power.default_limit',
    ];
    const sample = sampleOf(parseGpuLine(lines('gtx-770_not-supported_windows.txt')[0]!, fields, AT));
    expect(sample).toMatchObject({ name: 'GeForce GTX 770', tempC: 52, pstate: 'P0' });
    expect([sample.utilGpu, sample.utilMem, sample.powerW, sample.powerLimitW, sample.memClockMHz]).toEqual([null, null, null, null, null]);
  });

  it('gives null for "[GPU requires reset]" and keeps the figures the GPU still has', () => {
    const { fields, rows } = csvCapture('h100_gpu-requires-reset.csv');
    const sample = sampleOf(parseGpuLine(rows[0]!, fields, AT));
    expect(sample).toMatchObject({ index: 0, tempC: null, utilGpu: null, memUsedMiB: 0 });
  });

  it('gives null for "[Unknown Error]", which some GPUs print from the second loop round on', () => {
    const fields = ['utilization.gpu', 'utilization.encoder', 'utilization.decoder'];
    const [good, ...broken] = lines('loop_unknown-error.txt').map((line) => sampleOf(parseGpuLine(line, fields, AT)));
    expect(good!.utilGpu).toBe(0);
    expect(hasFigures(good!)).toBe(true);
    for (const sample of broken) {
      expect(sample.utilGpu).toBeNull();
      expect(hasFigures(sample)).toBe(false);
    }
  });

  it('knows every spelling of "no figure"', () => {
    for (const raw of ['[N/A]', 'N/A', '', '[Not Supported]', '[Unknown Error]', '[Insufficient Permissions]', '[GPU requires reset]']) {
      expect(isNotAvailable(raw)).toBe(true);
    }
    for (const raw of ['0', '0x0000000000000000', 'P0', 'NVIDIA H100 80GB HBM3']) expect(isNotAvailable(raw)).toBe(false);
  });
});

describe('parseGpuLine on lines that are not rows of the query', () => {
  const fields = queryFields('event', []);

  it('refuses a line with the wrong number of columns instead of throwing', () => {
    for (const name of ['driver-not-loaded.txt', 'driver-library-mismatch.txt', 'unknown-field_rtx-3080.txt']) {
      const parsed = parseGpuLine(lines(name)[0]!, fields, AT);
      expect(parsed.ok).toBe(false);
      if (!parsed.ok) expect(parsed.problem).toMatch(/^expected 15 columns, got \d+$/);
    }
  });

  it('refuses a row whose index column is not an index', () => {
    const row = '[Unknown Error], GPU-x, NVIDIA A10, 1, 2, 3, 4, 5, 6.00, 7.00, 8, 9, 10, P0, 0x0';
    expect(parseGpuLine(row, fields, AT)).toEqual({ ok: false, problem: 'index column is not a GPU index' });
  });

  it('keeps a row with one unreadable figure, reporting that figure as null and naming it', () => {
    const row = '0, GPU-x, NVIDIA A10, 97, 45, lots, 23028, 71, 148.12, 150.00, 1695, 1695, 6251, P0, 0x0000000000000004';
    const parsed = parseGpuLine(row, fields, AT);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.problems).toEqual(['unreadable memory.used']);
    expect(parsed.sample).toMatchObject({ memUsedMiB: null, memTotalMiB: 23028, throttleReasons: ThrottleReason.SwPowerCap });
  });
});

describe('unknownQueryField', () => {
  it('names the field an nvidia-smi refuses', () => {
    expect(unknownQueryField(text('unknown-field_rtx-3080.txt'))).toBe('clocks_throttle_reasons.unknown');
    expect(unknownQueryField(`some banner\n${text('unknown-field_cuda-version.txt')}\n`)).toBe('cuda_version');
  });

  it('does not mistake other failures for an unknown field', () => {
    expect(unknownQueryField(text('driver-not-loaded.txt'))).toBeNull();
    expect(unknownQueryField(text('driver-library-mismatch.txt'))).toBeNull();
  });
});

describe('RoundGrouper', () => {
  const gpu = (index: number) => emptyGpuSample(AT, index);
  const indices = (rounds: GpuSample[][]) => rounds.map((round) => round.map((s) => s.index));

  it('delivers a round as soon as the last GPU known from the probe is read', () => {
    const grouper = new RoundGrouper(1);
    expect(indices(grouper.add(gpu(0)))).toEqual([]);
    expect(indices(grouper.add(gpu(1)))).toEqual([[0, 1]]);
    expect(indices(grouper.add(gpu(0)))).toEqual([]);
    expect(indices(grouper.add(gpu(1)))).toEqual([[0, 1]]);
  });

  it('groups a real single-GPU loop capture into one round per line', () => {
    const { fields, rows } = csvCapture('geforce_520.56.06_loop.csv');
    const grouper = new RoundGrouper();
    const rounds = rows.flatMap((row) => grouper.add(sampleOf(parseGpuLine(row, fields, AT))));
    // Without a known last index the first round is closed by the second line's repeated index.
    expect(rounds).toHaveLength(rows.length);
    expect(rounds.map((round) => round[0]!.smClockMHz)).toEqual([1320, 1470, 1470, 1410, 1410, 1275, 1275, 1245, 1245, 1185, 1185, 1440, 1440]);
    expect(rounds[0]![0]).toMatchObject({ tempC: 56, utilGpu: 26, utilMem: 4, pstate: 'P3', powerW: 83.92, memClockMHz: 5001 });
  });

  it('learns from a repeated index when a GPU has gone, and from a higher one when a GPU appeared', () => {
    // The probe saw GPUs 0..2; GPU 2 is gone: the first round waits for the repeat, the next is on time.
    const fewer = new RoundGrouper(2);
    expect(indices([0, 1, 0].flatMap((i) => fewer.add(gpu(i))))).toEqual([[0, 1]]);
    expect(indices(fewer.add(gpu(1)))).toEqual([[0, 1]]);

    // The probe saw GPU 0 only; GPU 1 appears: one short round, then whole ones.
    const more = new RoundGrouper(0);
    expect(indices([0, 0, 1, 0, 1].flatMap((i) => more.add(gpu(i))))).toEqual([[0], [0], [1], [0, 1]]);
  });
});
