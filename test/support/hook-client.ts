import WebSocket from 'ws';
import { decode, encode } from '../../src/protocol/codec.js';
import { GPU_COLUMNS, REQUIRED_COLUMNS } from '../../src/protocol/step-records.js';

/** The columns every hook sends. */
export const STEP_FIELDS = [...REQUIRED_COLUMNS, ...GPU_COLUMNS] as const;

/**
 * The resume secrets welcomes handed out, by session: like a real hook, a TestHook presents its
 * session's secret in a later hello (unless the hello says `resume` itself).
 */
const secrets = new Map<string, string>();

/** A scripted hook speaking the wire protocol from TypeScript, for tests of the sidecar alone. */
export class TestHook {
  readonly received: any[] = [];
  closed: Promise<{ code: number; reason: string }>;
  private waiters: Array<() => void> = [];

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data: Buffer) => {
      const message = decode(data) as { type?: unknown; session?: unknown; resume?: unknown } | null;
      if (message?.type === 'welcome' && typeof message.resume === 'string') secrets.set(String(message.session), message.resume);
      this.received.push(message);
      for (const waiter of this.waiters.splice(0)) waiter();
    });
    this.closed = new Promise((resolve) => socket.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  static async connect(url: string, headers: Record<string, string> = {}): Promise<TestHook> {
    const socket = new WebSocket(url, { headers });
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    return new TestHook(socket);
  }

  send(message: unknown): void {
    const frame = message as Record<string, unknown> | null;
    const held = frame?.type === 'hello' && !('resume' in frame) ? secrets.get(String(frame.session)) : undefined;
    this.socket.send(encode(held ? { ...frame, resume: held } : message));
  }

  sendRaw(data: Buffer | string, binary = true): void {
    this.socket.send(data, { binary });
  }

  async next(predicate: (message: any) => boolean, timeoutMs = 5000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.received.find(predicate);
      if (found) return found;
      if (Date.now() > deadline) throw new Error('expected message not received');
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  close(): void {
    this.socket.close();
  }
}

export function hello(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    v: 1,
    type: 'hello',
    job: 'job-a',
    rank: 0,
    local_rank: 0,
    world_size: 1,
    session: 'sess-0',
    pid: 1234,
    host: 'node-1',
    clock: { wall_ns: BigInt(Date.now()) * 1_000_000n, mono_ns: 1_000_000 },
    env: { python: '3.11.7' },
    ...overrides,
  };
}

export interface RowSpec {
  seq: number;
  durMs?: number;
  dataMs?: number;
  h2dMs?: number;
  computeMs?: number;
  samples?: number | null;
}

export function row(spec: RowSpec): (number | null)[] {
  const ms = (v: number | undefined) => Math.round((v ?? 0) * 1e6);
  const dur = ms(spec.durMs ?? 10);
  return [spec.seq, spec.seq - 1, spec.seq * dur, dur, ms(spec.dataMs ?? 2), ms(spec.h2dMs ?? 1), ms(spec.computeMs ?? 6), spec.samples ?? 32, null, null, null];
}

export function steps(rows: (number | null)[][], dropped = 0): Record<string, unknown> {
  return { v: 1, type: 'steps', fields: [...STEP_FIELDS], rows, dropped };
}

/** A hook's answer to a capture: where its training thread stands, its loader workers beside it. */
export function stackFrame(id: number, atNs: number): Record<string, unknown> {
  return {
    v: 1,
    type: 'stack',
    id,
    at_ns: atNs,
    last_seq: 5,
    still_ms: 4000,
    threads: [{ name: 'MainThread', training: true, skipped: 0, frames: [['/usr/lib/python3.11/threading.py', 320, 'wait', 'lib'], ['/job/train.py', 48, 'wait_for_it', 'user']] }],
    comm: null,
    workers: [{ pid: 7, name: 'pt_data_worker', state: 'S', wchan: null, cpu_s: 0.5 }],
    flight: null,
  };
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
