import type { ChildProcess } from 'node:child_process';

export function signalRun(child: ChildProcess, signal: NodeJS.Signals): void;
export function inTurns<T>(children: [ChildProcess, ChildProcess], settled: Promise<T>, turnMs?: number): Promise<T>;
