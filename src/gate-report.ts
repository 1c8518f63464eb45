import type { GateResult } from './gate.js';

/**
 * The gate's result for CI systems: JUnit XML (one test case a job; a regression is a failure, a run
 * that cannot be judged is skipped, so that the pipeline's exit code, not the report, decides) and
 * a Markdown summary (GitHub's $GITHUB_STEP_SUMMARY, a merge request note).
 */

// XML 1.0 allows no control characters but tab, newline and carriage return, even escaped.
// eslint-disable-next-line no-control-regex
const INVALID_XML = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g;

export function xmlText(text: string): string {
  return text.replace(INVALID_XML, '\ufffd').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

export function junitXml(results: readonly GateResult[], seconds = 0): string {
  const failures = results.filter((r) => r.outcome === 'regression').length;
  const skipped = results.filter((r) => r.outcome === 'cannot-judge').length;
  const cases = results.map((r) => {
    const name = xmlText(`${r.job}: steady-state time per ${r.per}`);
    const head = r.text.split('\n')[0]!;
    const body =
      r.outcome === 'regression'
        ? `\n      <failure message="${xmlText(head)}" type="regression">${xmlText(r.text)}</failure>`
        : r.outcome === 'cannot-judge'
          ? `\n      <skipped message="${xmlText(r.reason ?? head)}"/>`
          : '';
    return `    <testcase classname="stepscope.gate" name="${name}" time="0">${body}\n      <system-out>${xmlText(r.text)}</system-out>\n    </testcase>`;
  });
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="stepscope gate" tests="${results.length}" failures="${failures}" errors="0" skipped="${skipped}" time="${seconds}">`,
    `  <testsuite name="stepscope gate" tests="${results.length}" failures="${failures}" errors="0" skipped="${skipped}" time="${seconds}">`,
    ...cases,
    '  </testsuite>',
    '</testsuites>',
    '',
  ].join('\n');
}

/** Markdown text: table cells keep no pipe or newline, and nothing renders as HTML. */
const cell = (text: string) => text.replace(/[\r\n]+/g, ' ').replace(/[|\\`*_<>[\]]/g, (c) => `\\${c}`);
const pct = (x: number | null) => (x === null ? 'n/a' : `${x >= 0 ? '+' : ''}${x.toFixed(1)}%`);
const ms = (x: number | null) => (x === null ? 'n/a' : `${x.toPrecision(4)} ms`);
const ICON = { pass: '✅ pass', regression: '❌ regression', 'cannot-judge': '⚠️ cannot judge' } as const;

export function gateMarkdown(results: readonly GateResult[]): string {
  const lines = ['## stepscope gate', '', '| job | result | steady time | reference | change | bound | cause | phase grown | environment drift |', '|---|---|---|---|---|---|---|---|---|'];
  for (const r of results) {
    lines.push(
      `| ${cell(r.job)} | ${ICON[r.outcome]} | ${ms(r.current.ms)} a ${r.per} | ${r.reference ? `${ms(r.reference.ms)} (${cell(r.reference.label)})` : 'none'} | ${pct(r.change_pct)} | ${r.limit_pct === null ? 'n/a' : `${r.limit_pct.toFixed(1)}%`} | ${cell(r.verdict + (r.cause ? ` (${r.cause})` : ''))} | ${r.phase ? `${cell(r.phase.name)} +${r.phase.delta_ms.toFixed(1)} ms` : '–'} | ${r.drift.length ? cell(r.drift.join('; ')) : '–'} |`,
    );
  }
  lines.push('');
  for (const r of results) lines.push('```', r.text.replace(/```/g, "'''"), '```', '');
  return lines.join('\n');
}
