#!/usr/bin/env node
// msgpackr's native string extractor (msgpackr-extract) against its plain JavaScript decoder, on the
// frames the sidecar decodes (issue 24, target 9): a hook's step frame of 256 rows and a hello with an
// environment of 60 variables; and the codec's own decode (the plain decoder after its nesting bound,
// which walks each frame's headers first). Each mode in a child Node of its own, interleaved, 3
// rounds; in each child the median of 7 timings of 3,000 decodes. Run after `npm run build`.
//
//   node scripts/bench-codec.mjs
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MODES = { native: 'msgpackr', plain: 'msgpackr/pack', codec: 'msgpackr/pack' };

if (process.argv[2] === '--child') {
  const { Packr } = await import(MODES[process.argv[3]]);
  const { isNativeAccelerationEnabled } = await import(MODES[process.argv[3]]);
  const { decode, encode } = await import('../dist/protocol/codec.js');
  const { GPU_COLUMNS, REQUIRED_COLUMNS } = await import('../dist/protocol/step-records.js');
  const STEP_FIELDS = [...REQUIRED_COLUMNS, ...GPU_COLUMNS];
  // The sidecar's decoder options (src/protocol/codec.ts), on the chosen entry.
  const packr = new Packr({ useRecords: false, encodeUndefinedAsNil: true, int64AsType: 'auto', mapsAsObjects: true, variableMapSize: true, moreTypes: false });
  const rows = Array.from({ length: 256 }, (_, r) => [r + 1, r, (r + 1) * 1_000_000, 1_000_000, 200_000, 100_000, 600_000, 32, null, null, null]);
  const steps = encode({ v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped: 0 });
  const env = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`SOME_ENV_VARIABLE_${i}`, `a value of a typical length ${i}`]));
  const hello = encode({ v: 1, type: 'hello', job: 'bench', rank: 0, local_rank: 0, world_size: 1, session: 'abc', pid: 1, host: 'bench', clock: { wall_ns: 0, mono_ns: 0 }, env });
  const time = (bytes, n = 3000) => {
    const t0 = process.hrtime.bigint();
    if (process.argv[3] === 'codec') for (let i = 0; i < n; i++) decode(bytes);
    else for (let i = 0; i < n; i++) packr.unpack(bytes);
    return Number(process.hrtime.bigint() - t0) / n / 1000;
  };
  time(steps);
  time(hello);
  const s = [];
  const h = [];
  for (let k = 0; k < 7; k++) (s.push(time(steps)), h.push(time(hello)));
  const median = (values) => values.sort((a, b) => a - b)[3];
  console.log(JSON.stringify({ native: isNativeAccelerationEnabled, steps_us: median(s), hello_us: median(h) }));
} else {
  const runs = { native: [], plain: [], codec: [] };
  for (let round = 0; round < 3; round++) {
    for (const mode of Object.keys(MODES)) {
      const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', mode], { encoding: 'utf8' });
      if (child.status !== 0) throw new Error(child.stderr);
      runs[mode].push(JSON.parse(child.stdout));
    }
  }
  if (!runs.native.every((r) => r.native)) console.log('msgpackr-extract is not installed here: "native" ran the plain decoder too');
  const median = (values) => values.sort((a, b) => a - b)[1];
  const figure = (mode, key) => median(runs[mode].map((r) => r[key]));
  for (const key of ['steps_us', 'hello_us']) {
    const [native, plain, codec] = ['native', 'plain', 'codec'].map((mode) => figure(mode, key));
    console.log(`${key.padEnd(9)} native ${native.toFixed(1)} us, plain ${plain.toFixed(1)} us: native/plain ${(native / plain).toFixed(2)}x; the codec (plain + nesting bound) ${codec.toFixed(1)} us: codec/plain ${(codec / plain).toFixed(2)}x`);
  }
}
