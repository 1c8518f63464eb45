import { timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';

/** Addresses only this machine (or this pod's containers) can reach. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (bare === 'localhost' || bare === '::1') return true;
  return isIP(bare) === 4 && bare.startsWith('127.');
}

/** Whether an Authorization header carries exactly `Bearer <token>`, compared in constant time. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  if (!header) return false;
  const given = Buffer.from(header);
  const wanted = Buffer.from(`Bearer ${token}`);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}
