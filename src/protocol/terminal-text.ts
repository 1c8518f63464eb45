/**
 * Text from elsewhere (a sidecar, a journal, kubectl) made inert for a terminal: every control
 * character (C0, DEL, C1, the ESC that starts a colour, title or clear-screen sequence, and the
 * C1 CSI some terminals take as one) is shown escaped, `\x1b`, `\x9b`, so that the sequence is
 * seen rather than obeyed. The one sanitizer for everything the CLI prints that it did not write.
 */

const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/g;
/** The same but for tab and newline, which a multi-line text (a summary, a comparison) keeps. */
const CONTROLS_BUT_LAYOUT = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

const escaped = (char: string) => `\\x${char.charCodeAt(0).toString(16).padStart(2, '0')}`;

/** One line of it: every control character escaped, newlines and tabs too. */
export function inertLine(text: string): string {
  return text.replace(CONTROLS, escaped);
}

/** Text of several lines: control characters escaped, newlines and tabs kept. */
export function inertText(text: string): string {
  return text.replace(CONTROLS_BUT_LAYOUT, escaped);
}

/** A copy of a parsed value (a frame, a response) whose every string, keys included, is inertText. */
export function inertStrings<T>(value: T): T {
  return inertValue(value) as T;
}

function inertValue(value: unknown): unknown {
  if (typeof value === 'string') return inertText(value);
  if (Array.isArray(value)) return value.map(inertValue);
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[inertText(key)] = inertValue(item);
  return out;
}

/** JSON text for a terminal: JSON.stringify escapes C0 but leaves DEL and C1 raw; they are escaped here too (still valid JSON). */
export function inertJson(json: string): string {
  return json.replace(/[\u007f-\u009f]/g, (char) => `\\u00${char.charCodeAt(0).toString(16)}`);
}
