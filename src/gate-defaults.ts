/** `stepscope gate`'s defaults and exit codes, light to import: the CLI declares the command without loading the gate. */

export const GATE_DEFAULTS = { sigma: 3, minChangePct: 5, minSteps: 20 } as const;

export type GateOutcome = 'pass' | 'regression' | 'cannot-judge';
export const GATE_EXIT: Record<GateOutcome, number> = { pass: 0, regression: 1, 'cannot-judge': 2 };
