import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { EngineSnapshot } from '../engine/snapshot.js';
import { STACK_DUMP_SCHEMA, type StackDump } from '../protocol/stall-state.js';
import { writeAtomically } from './summary-files.js';

/**
 * --stack-dumps: when a job is declared hung, every rank's stacks of that moment (every thread's,
 * whole: the hooks send them so under this flag) are written under --out, one file a rank, in the
 * files the job's stop names (`stops[].dumps` of its summary). Written once per hang.
 */
export class StackDumps {
  private readonly written = new Set<string>();

  constructor(private readonly out: string) {}

  /** Writes the dumps a snapshot's jobs name and that are not written yet; returns the files written. */
  async onSnapshot(snapshot: EngineSnapshot): Promise<string[]> {
    const files: string[] = [];
    for (const job of snapshot.jobs) {
      const stop = job.stop;
      if (!stop?.dumps?.length || this.written.has(stop.dumps[0]!)) continue;
      for (const name of stop.dumps) this.written.add(name);
      for (const rank of job.ranks) {
        const name = stop.dumps.find((file) => file.endsWith(`/rank-${rank.rank}.json`));
        if (!name) continue;
        const stall = rank.stall;
        const dump: StackDump = {
          schema: STACK_DUMP_SCHEMA,
          job: job.job,
          run: job.run,
          rank: rank.rank,
          declared_at: new Date(snapshot.at).toISOString(),
          hung_since: new Date(stop.since).toISOString(),
          job_rule: job.verdict?.evidence.rule ?? stop.text,
          state: stall?.state ?? 'stepping',
          rule: rank.verdict?.evidence.rule ?? null,
          capture: stall?.capture ?? null,
          proc: stall?.proc ?? null,
          why_no_capture: stall?.capture ? null : stall?.unresponsive ? 'unresponsive: its hook could not run to take it' : stall?.state === 'gone' ? 'gone' : 'its hook sent none (an older hook, or it had not come yet)',
        };
        const file = path.join(this.out, name);
        await mkdir(path.dirname(file), { recursive: true });
        await writeAtomically(file, JSON.stringify(dump, null, 2) + '\n');
        files.push(file);
      }
    }
    return files;
  }
}
