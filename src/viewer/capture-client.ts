import { CaptureAnswerSchema } from '../protocol/profile.js';
import { parseInput } from '../protocol/parse.js';

/**
 * The viewer's `c` key: asks each sidecar of the job for a deep capture (POST /v1/capture); the one
 * whose ranks the job has answers 202, the others that they have no such job. Resolves with one
 * line to show: what was asked for, or why not.
 */
export async function askCapture(streamUrls: readonly string[], job: string, token: string | undefined, timeoutMs = 5_000): Promise<string> {
  const reasons: string[] = [];
  for (const streamUrl of streamUrls) {
    const url = new URL(streamUrl);
    url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
    url.pathname = '/v1/capture';
    url.search = '';
    try {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify({ job }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const answer = parseInput(CaptureAnswerSchema, await response.json(), 'capture answer');
      if (answer.ok && answer.capture) return `capture asked of rank ${answer.capture.rank} (${answer.capture.steps} steps): its trace will be listed under --out/captures`;
      if (response.status !== 404) reasons.push(answer.reason ?? `HTTP ${response.status}`);
    } catch (error) {
      reasons.push((error as Error).message);
    }
  }
  return `no capture: ${reasons[0] ?? `no sidecar runs ${job}`}`;
}
