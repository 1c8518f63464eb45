/**
 * Names and text from elsewhere (a job, a host, a GPU, a process, an env value) placed in Markdown
 * inert, wherever it is rendered (GitHub, GitLab, notebooks render raw HTML): HTML's `<`, `>` and
 * `&` as entities, the punctuation that opens Markdown inline backslash-escaped (`*`, `_`, `~`
 * emphasis, `[` `]` links and images, `` ` `` code, `|` a table cell, `\` itself), line breaks and
 * control characters as spaces (a name never starts a line, so `#`, `>` and list marks are inert). The one escaper for the
 * summary's Markdown.
 */

const ENTITIES: Record<string, string> = { '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' };

/** Plain text, inert in Markdown, on one line. */
export function mdText(text: string): string {
  return text
    .replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ')
    .replace(/[<>&"]/g, (char) => ENTITIES[char]!)
    .replace(/[\\`*_[\]|~]/g, (char) => `\\${char}`);
}

/**
 * Text the summary wrote that quotes names (a recommendation, a comparison): its code spans
 * (`…`, which it uses for settings) are kept as code, where nothing is live; the rest is mdText.
 * An odd backtick out is escaped like any other.
 */
export function mdProse(text: string): string {
  return text.split('\n').map(proseLine).join('\n');
}

function proseLine(line: string): string {
  const parts = line.split('`');
  if (parts.length % 2 === 0) return mdText(line);
  const code = (part: string) => (part.trim() === '' ? mdText(`\`${part}\``) : `\`${part.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').replace(/\|/g, '\\|')}\``);
  return parts.map((part, i) => (i % 2 === 0 ? mdText(part) : code(part))).join('');
}
