import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { htmlReport } from '../src/outputs/report-html-file.js';
import { renderSummary } from '../src/outputs/summary-render.js';
import { hangScript } from './support/hang-script.js';

/** The summary of the scripted job that hung, as a person reads it: text, Markdown and the HTML report lead with the hang. */

function hungSummary() {
  const engine = new Engine();
  for (const entry of hangScript([0, 1])) engine.apply(entry);
  return engine.snapshot().ended[0]!.summary;
}

describe('the summary of a job that hung', () => {
  const summary = hungSummary();

  it('leads its text with the hang, then says where it stopped and what it cost', () => {
    const text = renderSummary(summary, 'text');
    const lines = text.split('\n');
    expect(lines[2]).toMatch(/^Hung at step 299 for 37\.\d s \(9\d% of the wall time\): rank 1 stopped in wait_for_it \(train\.py:48\)/);
    expect(text).toContain('Where it stopped\n----------------\nHung at step 299');
    expect(text).toContain("Rank 1's own code, innermost first: wait_for_it (train.py:48) ← main (train.py:87) (/job/train.py:48).");
    expect(text).toMatch(/GPU time held idle: 7\d GPU-seconds\./);
    expect(text).toContain('1. Look at what rank 1 does at /job/train.py:48 (wait_for_it)');
    expect(renderSummary(summary, 'md')).toContain('## Where it stopped');
    // What it was bound by while it stepped follows, its share over the stepping time alone.
    expect(summary.headline).toMatch(/\. Before it, compute-bound for 100% of its stepping time: /);
    expect(summary.verdict_share).toBe(1);
  });

  it('puts the hang first in the HTML report', async () => {
    const html = await htmlReport(summary);
    const stops = html.indexOf('<section id="stops" class="stops"><h2>Where it stopped</h2>');
    expect(stops).toBeGreaterThan(0);
    expect(stops).toBeLessThan(html.indexOf('id="timeline"'));
    expect(html).toContain('wait_for_it (train.py:48) ← main (train.py:87)');
  });
});
