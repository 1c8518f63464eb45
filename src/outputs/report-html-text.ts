/** Text for the HTML report: escaping, figures, tables. Pure. */

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
export const h = escapeHtml;
/** JSON inside <script>: nothing in it can close the element. */
export const scriptJson = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
/** Script text inlined as is (uPlot's): refused if it could close its element. */
export const scriptText = (text: string) => {
  if (/<\/script/i.test(text)) throw new Error('script text holds </script');
  return text;
};

export { num, pct, withCause } from './summary-text.js';

export function duration(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export const table = (header: string[], rows: string[][], numeric: number[] = [], rowClass: (i: number) => string = () => '') =>
  `<table><thead><tr>${header.map((c, i) => `<th${numeric.includes(i) ? ' class="num"' : ''}>${h(c)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((row, r) => `<tr${rowClass(r) ? ` class="${rowClass(r)}"` : ''}>${row.map((c, i) => `<td${numeric.includes(i) ? ' class="num"' : ''}>${c}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
