import { useStdout } from 'ink';
import { useEffect, useState } from 'react';

/** The terminal's size, following resizes. */
export function useTerminalSize(): { columns: number; rows: number } {
  const { stdout } = useStdout();
  const read = () => ({ columns: stdout.columns || 80, rows: stdout.rows || 24 });
  const [size, setSize] = useState(read);
  useEffect(() => {
    const onResize = () => {
      // What was drawn for the old size may have been reflowed by the terminal: start from a clean screen.
      stdout.write('\x1b[2J\x1b[H');
      setSize(read());
    };
    stdout.on('resize', onResize);
    return () => {
      stdout.off('resize', onResize);
    };
  }, [stdout]);
  return size;
}
