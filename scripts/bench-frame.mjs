// Reading one hook steps frame (issue 24, target 2): readHookFrame of a 256-row frame as the bench's
// ingest sends it, 4,000 times after a warm-up, in µs a record; `--dist` another build's dist to
// compare (its messages.js). After `npm run build`:
//   node scripts/bench-frame.mjs [--dist <another build's dist>] [--rounds 3]
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({ options: { dist: { type: 'string', default: 'dist' }, rounds: { type: 'string', default: '3' } } });
const dist = pathToFileURL(path.resolve(opts.dist)).href;
const { readHookFrame } = await import(`${dist}/protocol/messages.js`);
const { encode } = await import(`${dist}/protocol/codec.js`);
const fields = ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples', 'gpu_h2d_ns', 'gpu_compute_ns', 'gpu_idle_ns'];
const rows = [];
for (let r = 0; r < 256; r++) {
  const seq = 50_000 + r;
  rows.push([seq, seq - 1, BigInt(seq) * 1_000_000n, 1_000_000, 200_000, 100_000, 600_000, 32, null, null, null]);
}
const frame = encode({ v: 1, type: 'steps', fields, rows, dropped: 0 });
const times = 4_000;
for (let i = 0; i < 300; i++) readHookFrame(frame);
const perRecord = [];
for (let round = 0; round < Number(opts.rounds); round++) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < times; i++) readHookFrame(frame);
  perRecord.push(Number(process.hrtime.bigint() - t0) / 1e3 / (times * rows.length));
}
perRecord.sort((a, b) => a - b);
console.log(JSON.stringify({ dist: opts.dist, node: process.version, us_per_record: perRecord.map((x) => Number(x.toFixed(3))), median: Number(perRecord[Math.floor(perRecord.length / 2)].toFixed(3)) }));
