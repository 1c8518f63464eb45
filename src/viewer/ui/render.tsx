import { render } from 'ink';
import type { WatchStore } from '../model/watch-store.js';
import { App } from './App.js';

const ALT_SCREEN_ON = '\x1b[?1049h\x1b[H';
const ALT_SCREEN_OFF = '\x1b[?1049l';

/** The full-screen viewer on the terminal's alternate screen; resolves once the user quits. */
export async function runFullScreen(store: WatchStore, colour: boolean, stop: Promise<void>, onCapture?: (job: string) => Promise<string>): Promise<void> {
  const stdout = process.stdout;
  stdout.write(ALT_SCREEN_ON);
  const instance = render(<App store={store} colour={colour} onCapture={onCapture} />, { exitOnCtrlC: true, patchConsole: true });
  try {
    await Promise.race([instance.waitUntilExit(), stop]);
  } finally {
    instance.unmount();
    instance.cleanup();
    stdout.write(ALT_SCREEN_OFF);
  }
}
