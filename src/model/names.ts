import { createHash } from 'node:crypto';

const KEPT = /[A-Za-z0-9_-]/;
const MAX_ENCODED = 120;

/**
 * A job name as one file-name component that no other name maps to: letters, digits, `_` and `-`
 * stay, every other byte of its UTF-8 (`.` and `%` included, so `a.2` cannot pass for run 2 of `a`,
 * and `a/b` stays apart from `a_b`) becomes `%XX`. A long result keeps its first part and a hash of
 * the whole name after `~`, which encoding never makes, so it stays under file-name limits.
 */
export function fileSafeName(name: string): string {
  let encoded = '';
  for (const char of name) {
    encoded += KEPT.test(char) ? char : [...Buffer.from(char)].map((byte) => `%${byte.toString(16).toUpperCase().padStart(2, '0')}`).join('');
  }
  if (encoded.length <= MAX_ENCODED) return encoded;
  const head = encoded.slice(0, MAX_ENCODED - 17).replace(/%[0-9A-F]?$/, '');
  return `${head}~${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
}
