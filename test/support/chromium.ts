import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Headless Chromium for the HTML report's tests: Debian's `chromium` (apt-get install chromium;
 * .ci/run does), or STEPSCOPE_CHROMIUM. Playwright's and Puppeteer's own downloads are not used:
 * they fetch from hosts a CI machine may not reach.
 */

const CANDIDATES = [process.env.STEPSCOPE_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].filter((c): c is string => !!c);

export const CHROMIUM = CANDIDATES.find((file) => existsSync(file)) ?? null;

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars', '--no-first-run', '--disable-extensions', '--allow-file-access-from-files'];

/** The page's DOM once it has loaded and its scripts have run. */
export function dumpDom(file: string, timeoutMs = 30_000): string {
  const result = spawnSync(CHROMIUM!, [...FLAGS, '--dump-dom', `file://${file}`], { encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
  if (result.status !== 0) throw new Error(`chromium --dump-dom: exit ${result.status ?? result.signal}: ${result.stderr.slice(-500)}`);
  return result.stdout;
}
