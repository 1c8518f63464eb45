import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { renderSummary } from '../src/outputs/summary-render.js';
import { renderReport } from '../src/outputs/report-html.js';
import type { VerdictState } from '../src/protocol/state.js';
import { banner } from '../src/viewer/model/banner.js';
import { recordings } from './support/scenarios.js';

/**
 * What costs time and what fixing each cause would buy, as people read it: the summary's text and
 * Markdown, the HTML report and the viewer's banner, on the summaries real runs wrote
 * (test/fixtures/journals, test/accuracy-e2e.test.ts).
 */

const recorded = (slug: string): Summary => {
  const found = recordings().find((r) => r.slug.startsWith(slug));
  if (!found) throw new Error(`no recording ${slug} (npm run record:scenarios)`);
  return found.summary as Summary;
};

const moderate = recorded('10-ms-steps-losing-about-15-to-loading');
const neighbour = recorded('num-workers-0-beside-a-neighbour');

describe('a cost beside the verdict', () => {
  it('is named in the headline and the summary, with its share and level', () => {
    expect(moderate.verdict).toBe('compute-bound');
    expect(moderate.headline).toMatch(/^Compute-bound for \d+% of the job: .*\. Also costing time: loading \d+% \(moderate\)\.$/);
    for (const format of ['text', 'md'] as const) expect(renderSummary(moderate, format)).toMatch(/Limiters \(at least 5% of the time\): loading \d+% \(moderate\)\./);
  });

  it('is in the HTML report, with each cause and what fixing it buys', () => {
    const html = renderReport(neighbour, { uplotJs: '', uplotCss: '' });
    expect(html).toContain('<section id="costs"><h2>What costs time</h2>');
    expect(html).toMatch(/<td>loading<\/td><td class="num">\d+%<\/td><td>high<\/td>/);
    const fixes = html.slice(html.indexOf('What fixing each cause buys'));
    expect(fixes.indexOf('contention')).toBeLessThan(fixes.indexOf('few-workers'));
  });

  it('lists the causes in the summary by what fixing each buys, with the facts the estimate rests on', () => {
    const text = renderSummary(neighbour, 'text');
    const section = text.slice(text.indexOf('What fixing each cause buys'), text.indexOf('What to do'));
    expect(section).toMatch(/1\. contention: \d+% of step time back; .*\(PSI\)/);
    expect(section).toMatch(/2\. few-workers: 0% of step time back; .*would not shorten/);
  });

  it('is on the viewer banner beside the verdict, and absent from a sidecar that sends none', () => {
    const state: VerdictState = {
      verdict: 'compute-bound',
      cause: null,
      since: '2026-12-04T10:00:00.000Z',
      evidence: moderate.evidence!,
      recommendations: [],
      limiters: moderate.limiters!,
      causes: [],
      pending: null,
    };
    expect(banner(state, Date.parse(state.since) + 5_000, null).costs).toMatch(/^Also costing time: loading \d+% \(moderate\)\.$/);
    const { limiters: _none, ...older } = state;
    expect(banner(older as VerdictState, Date.parse(state.since), null)).toMatchObject({ costs: null, limiters: [] });
  });
});
