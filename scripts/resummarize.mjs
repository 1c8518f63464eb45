#!/usr/bin/env node
// Rewrites the summary.json of recorded scenarios (test/fixtures/journals, hangs, fix-checks) from
// their journals, replayed by the current engine (npm run build first). For a change to the analysis
// that legitimately changes what a summary says: the journals (what the real jobs did) stay as they
// were recorded; look at the diff of the summaries before committing it, and say why in the commit.
//   node scripts/resummarize.mjs [folder...]     (default: the three fixture folders)
// A recording without a meta.json (fix-checks: not a scenario test's) must end exactly one run.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const { replayJournal } = await import(path.join(ROOT, 'dist', 'journal', 'replay.js'));
const { summaryJson } = await import(path.join(ROOT, 'dist', 'outputs', 'summary-files.js'));
const SEGMENT = /^wal-\d{8}\.log$/;
const CHECKPOINT = /^checkpoint-\d{8}\.json$/;

const roots = process.argv.slice(2).length ? process.argv.slice(2) : ['test/fixtures/journals', 'test/fixtures/hangs', 'test/fixtures/fix-checks'].map((p) => path.join(ROOT, p));
let changed = 0;
for (const root of roots) {
  for (const slug of readdirSync(root).sort()) {
    const fixture = path.join(root, slug);
    if (!existsSync(path.join(fixture, 'summary.json'))) continue;
    const meta = existsSync(path.join(fixture, 'meta.json')) ? JSON.parse(readFileSync(path.join(fixture, 'meta.json'), 'utf8')) : null;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'stepscope-resummarize-'));
    try {
      for (const name of readdirSync(fixture)) {
        const from = path.join(fixture, name);
        if (name.endsWith('.log.gz') && SEGMENT.test(name.slice(0, -3))) writeFileSync(path.join(dir, name.slice(0, -3)), gunzipSync(readFileSync(from)));
        else if (CHECKPOINT.test(name)) copyFileSync(from, path.join(dir, name));
      }
      const ended = [];
      const { report } = await replayJournal(dir, { publishTicks: true, onEntry: (entry, engine) => entry.t === 'tick' && ended.push(...engine.snapshot().ended) });
      if (report.problems || report.skipped) throw new Error(`${slug}: the journal does not replay whole`);
      const run = meta ? ended.find((r) => r.job === meta.job) : ended.length === 1 ? ended[0] : undefined;
      if (!run) throw new Error(`${slug}: no ended run of job ${meta?.job ?? '(the only one)'}`);
      const text = summaryJson(JSON.parse(JSON.stringify(run.summary)));
      const file = path.join(fixture, 'summary.json');
      if (readFileSync(file, 'utf8') !== text) {
        writeFileSync(file, text);
        changed++;
        console.log(`rewrote ${path.relative(ROOT, file)}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
console.log(`${changed} summaries rewritten`);
