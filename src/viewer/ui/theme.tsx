import { Text } from 'ink';
import { createContext, useContext, type ReactNode } from 'react';
import type { Verdict } from '../../model/verdict.js';
import type { Part } from '../format.js';

/** Whether to colour at all: off where the terminal has no colour or NO_COLOR is set. */
export const ColourContext = createContext(true);
export const useColour = () => useContext(ColourContext);

export const VERDICT_COLOUR: Record<Verdict, string> = {
  'compute-bound': 'green',
  'input-bound': 'yellow',
  'transfer-bound': 'magenta',
  'host-bound': 'cyan',
  throttled: 'red',
  'communication-bound': 'blueBright',
  'memory-bound': 'redBright',
  'warming-up': 'blue',
  idle: 'gray',
  stalled: 'redBright',
  hung: 'red',
  gone: 'red',
};

/** A part has the colour of the verdict it leads to: data is yellow like input-bound, and so on. */
export const PART_COLOUR: Record<Part, string> = { data: 'yellow', h2d: 'magenta', compute: 'green', other: 'cyan' };

export const HARMFUL_REASONS = new Set(['HwThermalSlowdown', 'SwThermalSlowdown', 'SwPowerCap', 'HwPowerBrakeSlowdown', 'HwSlowdown']);

/** Text in a colour when colour is on; plain otherwise. */
export function Paint({ colour, bold, dim, children }: { colour?: string | null; bold?: boolean; dim?: boolean; children: ReactNode }) {
  const on = useColour();
  return (
    <Text color={on && colour ? colour : undefined} bold={bold} dimColor={on && dim}>
      {children}
    </Text>
  );
}

/** A level's colour: green under `warn`, yellow from it, red from `alarm`. */
export function levelColour(value: number | null, warn: number, alarm: number): string | null {
  if (value === null) return null;
  return value >= alarm ? 'red' : value >= warn ? 'yellow' : 'green';
}
