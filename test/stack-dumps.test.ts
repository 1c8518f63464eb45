import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { EngineSnapshot } from '../src/engine/snapshot.js';
import { StackDumps } from '../src/outputs/stack-dumps.js';
import { parseInput } from '../src/protocol/parse.js';
import { StackDumpSchema } from '../src/protocol/stall-state.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { T0 } from './support/entries.js';
import { HANG_CONFIG, hangScript } from './support/hang-script.js';
import { tempDir } from './support/sidecar.js';

/**
 * --stack-dumps: when the scripted job is declared hung, every rank's stacks of that moment are written
 * under --out, one file a rank, each a stepscope.stack-dump/v1 that reads back through its schema, and
 * the summary lists them; a run without the flag names none.
 */

const out = tempDir('stepscope-dumps-');
afterAll(() => rmSync(out, { recursive: true, force: true }));

async function run(stackDumps: boolean): Promise<{ files: string[]; last: EngineSnapshot }> {
  const engine = new Engine();
  const dumps = new StackDumps(out);
  const files: string[] = [];
  let last = engine.snapshot();
  for (const entry of hangScript([0, 1], { ...HANG_CONFIG, stackDumps })) {
    const published = engine.apply(entry);
    if (published) {
      last = published;
      files.push(...(await dumps.onSnapshot(published)));
    }
  }
  return { files, last };
}

describe('--stack-dumps', () => {
  it("writes every rank's stacks once, when the job is declared hung, and lists them in the summary", async () => {
    const { files, last } = await run(true);
    expect(files.map((f) => path.relative(out, f))).toEqual(['stacks-train-1/rank-0.json', 'stacks-train-1/rank-1.json']);
    expect(readdirSync(path.join(out, 'stacks-train-1'))).toEqual(['rank-0.json', 'rank-1.json']);
    const dumps = files.map((file) => parseInput(StackDumpSchema, JSON.parse(readFileSync(file, 'utf8')), 'dump'));
    expect(dumps.map((d) => [d.rank, d.state, d.capture?.threads[0]?.frames[1]?.function ?? null])).toEqual([
      [0, 'stalled', 'main'],
      [1, 'stalled', 'wait_for_it'],
    ]);
    expect(dumps[1]).toMatchObject({ job: 'train', run: 1, hung_since: new Date(T0 + 3_000).toISOString(), why_no_capture: null });
    const summary = parseInput(SummarySchema, JSON.parse(JSON.stringify(last.ended[0]!.summary)), 'summary');
    expect(summary.stops![0]!.dumps).toEqual(['stacks-train-1/rank-0.json', 'stacks-train-1/rank-1.json']);
  });

  it('names none without the flag', async () => {
    const { files, last } = await run(false);
    expect(files).toEqual([]);
    expect(last.ended[0]!.summary.stops![0]!).not.toHaveProperty('dumps');
  });
});
