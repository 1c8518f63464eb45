import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The test files that wait longest on real processes (sidecars, Python loops, the demo) start first,
 * so that on two workers none of them is left to run alone at the end. Vitest orders by the last
 * run's durations where it has them; a fresh clone has none, and by file size these came late.
 */
const SLOW_FIRST = [
  'verdicts-e2e',
  'demo',
  'counters-e2e',
  'viewer-plain',
  'hook-e2e',
  'straggler-e2e',
  'throttle-fill-e2e',
  'comm-e2e',
  'ingest',
  'stream',
  'viewer-tty',
  'nvidia-smi-collector',
  'watch-kube',
].map((name) => `${name}.test.ts`);

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification) => {
      const at = SLOW_FIRST.indexOf(path.basename(file.moduleId));
      return at === -1 ? SLOW_FIRST.length : at;
    };
    // Stable: the named files in the order above, then the others in vitest's own order.
    return sorted.map((file, i) => ({ file, i })).sort((a, b) => rank(a.file) - rank(b.file) || a.i - b.i).map(({ file }) => file);
  }
}
