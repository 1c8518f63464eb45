import { describe, expect, it } from 'vitest';
import { closeReason } from '../src/ingest/connection.js';

describe('close reasons', () => {
  it('fit the 123 bytes a websocket close frame allows, cut at a character, however the garbage they quote is encoded', () => {
    for (const text of ['frame: not valid msgpack (' + '\u00ff'.repeat(200) + ')', 'é'.repeat(100), '😀'.repeat(60), 'a'.repeat(122) + 'é', 'x'.repeat(123)]) {
      const reason = closeReason(text);
      expect(Buffer.byteLength(reason)).toBeLessThanOrEqual(123);
      expect(reason).not.toContain('\ufffd');
      expect(text.startsWith(reason.endsWith('...') ? reason.slice(0, -3) : reason)).toBe(true);
    }
    expect(closeReason('short')).toBe('short');
  });
});
