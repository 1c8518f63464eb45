import { InvalidArgumentError } from 'commander';

/** How far back a duration goes: 90s, 30m, 6h, 2d, 1w. */
const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 };

/**
 * A time for --from and --to, as Unix seconds: `now`, a duration back from now (`6h`, `now-6h`),
 * an RFC 3339 time (`2026-12-05T06:00:00Z`) or Unix seconds.
 */
export function parseTime(text: string, now = Date.now() / 1000): number {
  const trimmed = text.trim();
  if (trimmed === 'now') return now;
  const back = /^(?:now-)?(\d+(?:\.\d+)?)([smhdw])$/.exec(trimmed);
  if (back) return now - Number(back[1]) * UNITS[back[2]!]!;
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed);
  const parsed = Date.parse(trimmed);
  if (/^\d{4}-\d{2}-\d{2}/.test(trimmed) && !Number.isNaN(parsed)) return parsed / 1000;
  throw new InvalidArgumentError('must be now, a duration back from now (30m, 6h, 2d), an RFC 3339 time or Unix seconds');
}
