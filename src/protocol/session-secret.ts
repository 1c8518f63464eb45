import { randomBytes, timingSafeEqual } from 'node:crypto';

/** A session's resume secret: 128 random bits as 32 hex digits, handed out in `welcome`. */
export function mintSecret(): string {
  return randomBytes(16).toString('hex');
}

/** Whether `presented` is `secret`, compared in constant time. */
export function secretMatches(secret: string, presented: string | null): boolean {
  if (presented === null) return false;
  const a = Buffer.from(secret);
  const b = Buffer.from(presented);
  return a.length === b.length && timingSafeEqual(a, b);
}
