import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { CLI, ROOT, startSidecar, tempDir, waitFor } from './support/sidecar.js';

/**
 * `stepscope watch` full-screen in a real terminal: tmux gives it a pseudo-terminal of a known size,
 * takes keys and shows what is on screen, against the real sidecar and a loop through the real hook.
 */

const plain = findPython();
const TMUX = spawnSync('tmux', ['-V'], { encoding: 'utf8' });
const tmuxVersion = TMUX.status === 0 ? TMUX.stdout.trim() : null;
const skipWhy = !tmuxVersion ? ' (skipped: tmux not found on PATH; CI needs apt-get install tmux)' : !plain.python ? ` (skipped: ${plain.why})` : '';

/** One tmux server of our own (its own socket, no user configuration), for one test. */
class Tmux {
  private readonly socket = `stepscope-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

  run(...args: string[]): string {
    const result = spawnSync('tmux', ['-L', this.socket, '-f', '/dev/null', ...args], { encoding: 'utf8', timeout: 10_000 });
    if (result.status !== 0) throw new Error(`tmux ${args.join(' ')}: ${result.stderr}`);
    return result.stdout;
  }

  /** A detached session of `columns` x `rows` running `command`, which says how it exited (see `exitStatus`). */
  start(name: string, columns: number, rows: number, command: string, env: Record<string, string> = {}): void {
    const vars = Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ');
    // tmux's own record of a dead pane's exit status is not reliable (it can lose the race with the pty closing).
    this.run('new-session', '-d', '-x', String(columns), '-y', String(rows), '-s', name, '-c', ROOT, `${vars ? `env ${vars} ` : ''}${command}; echo "[exited $?]"; sleep 120`);
  }

  /** The command's exit status, once it has exited. */
  async exitStatus(name: string, timeoutMs = 5_000): Promise<number> {
    const match = await waitFor(() => /\[exited (\d+)\]/.exec(this.screen(name)), timeoutMs, 100);
    return Number(match[1]);
  }

  screen(name: string, escapes = false): string {
    return this.run('capture-pane', '-p', ...(escapes ? ['-e'] : []), '-t', name);
  }

  async waitForScreen(name: string, predicate: (screen: string) => boolean, timeoutMs = 20_000): Promise<string> {
    let last = '';
    return waitFor(() => {
      last = this.screen(name);
      return predicate(last) ? last : null;
    }, timeoutMs, 200).catch((error: Error) => Promise.reject(new Error(`${error.message}; screen:\n${last}`)));
  }

  kill(): void {
    spawnSync('tmux', ['-L', this.socket, 'kill-server'], { stdio: 'ignore' });
  }
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The sidecar with simulated GPU counters, and an input-bound loop reporting to it until the test ends. */
async function sidecarWithJob(job: string) {
  const sidecar = await startSidecar(['--gpu-source', 'sim']);
  cleanups.push(() => sidecar.stop('SIGKILL'));
  const pidFile = path.join(tempDir(), 'loop.pid');
  const loop = runPython(plain.python!, fixture('verdict_loop.py'), ['--seconds', '50', '--data-ms', '9', '--compute-ms', '1', '--pid-file', pidFile], {
    STEPSCOPE_URL: sidecar.ingestUrl,
    STEPSCOPE_JOB: job,
    RANK: '0',
    WORLD_SIZE: '1',
  });
  cleanups.push(async () => {
    try {
      if (existsSync(pidFile)) process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    } catch {
      // already gone
    }
    await loop.catch(() => undefined);
  });
  return sidecar;
}

// A colour SGR sequence: 30-37, 90-97 (foreground), 38;... (256/true colour).
const COLOUR = /\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])(?:;[0-9;]*)?m/;
const RANK_ROW = /^\s+0 \S+\s+\d+\s+\d+\.\d+\s+\d+\.\d+\s+[\d.]+k?\s+.*input-bound/m;
const GPU_ROW = /^\s+0 NVIDIA A10 \(simulated\)\s+[█·]{10}\s+95% 1695\/1695 MHz 100%\s+–\s+62 °C\s+138\/150 W 92%\s+14000\/23028 MiB 61%\s+0$/m;
const LIVE = /ws:\/\/127\.0\.0\.1:\d+ ● live 20\/s · GPU counters: sim/;
const NARROW_RANK_ROW = /^\s+0\s+\d+\s+\d+\.\d+\s+\d+\.\d+\s+.*input-bound \(/m;

describe.skipIf(skipWhy !== '')(`stepscope watch in a terminal${skipWhy}`, () => {
  it('shows the verdict, a row per rank and per GPU, follows a resize, says when the sidecar is gone, and quits on q', async () => {
    const sidecar = await sidecarWithJob('tty');
    const tmux = new Tmux();
    cleanups.push(() => tmux.kill());
    tmux.start('viewer', 160, 48, `node ${CLI} watch ws://127.0.0.1:${sidecar.port}`);

    // The sparklines fill once the first one-second slice has closed: wait for them too.
    const sparkline = /^step ms\s+rank 0\s+[▁▂▃▄▅▆▇█ ]+\s+\d+\.\d+$/m;
    // Live too: on a loaded machine a frame can come late enough for the header to read stale for a moment.
    const screen = await tmux.waitForScreen('viewer', (s) => s.includes('INPUT-BOUND') && RANK_ROW.test(s) && GPU_ROW.test(s) && sparkline.test(s) && LIVE.test(s));
    expect(screen).toMatch(/^stepscope job tty · 1\/1 ranks · 1 node · \d+ steps/m);
    expect(screen).toMatch(/\d+% of step time waiting for data \(≥ 20%[,)]/);
    // The advice reads this machine's real CPU: more workers when a core is free, none (no-free-core) or
    // contention under the test suite's own load.
    expect(screen).toMatch(/→ .*num_workers|→ Cache decoded samples|→ Something other than this job|→ No core is free for more loader workers/);
    expect(screen).toMatch(/^GPU util\s+gpu 0\s+[▁▂▃▄▅▆▇█ ]+\s+95%$/m);
    expect(screen).toMatch(/^Timeline\s+.*input-bound/m);
    expect(screen).toMatch(LIVE);
    // Never the last line: ink would redraw the whole screen on every update.
    expect(screen.split('\n').at(-2)).toBe('');
    expect(tmux.screen('viewer', true)).toMatch(COLOUR);

    tmux.run('resize-window', '-t', 'viewer', '-x', '110', '-y', '30');
    // Narrower: the columns that matter most stay (the verdict, SM clock, throttle reasons), the others go.
    const narrow = await tmux.waitForScreen('viewer', (s) => /^stepscope job tty/m.test(s) && NARROW_RANK_ROW.test(s) && s.includes('╰' + '─'.repeat(108) + '╯'));
    expect(narrow).toMatch(/^\s+0\s+[█·]{10}\s+95% 1695\/1695 MHz 100%\s+–\s+62 °C/m);
    expect(narrow.split('\n').every((line) => [...line].length <= 110)).toBe(true);
    expect(narrow).toMatch(/ q {2}quit/);

    await sidecar.stop('SIGKILL');
    await tmux.waitForScreen('viewer', (s) => s.includes('stale: reconnecting…') && /reconnecting… \(attempt \d+/.test(s));

    tmux.run('send-keys', '-t', 'viewer', 'q');
    expect(await tmux.exitStatus('viewer')).toBe(0);
  });

  it('draws without colour where NO_COLOR is set, telling the parts apart by their glyphs', async () => {
    const sidecar = await sidecarWithJob('nocolour');
    const tmux = new Tmux();
    cleanups.push(() => tmux.kill());
    tmux.start('viewer', 160, 48, `node ${CLI} watch ws://127.0.0.1:${sidecar.port}`, { NO_COLOR: '1' });
    const screen = await tmux.waitForScreen('viewer', (s) => RANK_ROW.test(s) && GPU_ROW.test(s) && /^verdict\s+.*I+$/m.test(s));
    expect(tmux.screen('viewer', true)).not.toMatch(COLOUR);
    expect(screen).toMatch(/▓{10,}/);
    tmux.run('send-keys', '-t', 'viewer', 'q');
    expect(await tmux.exitStatus('viewer')).toBe(0);
  });
});
