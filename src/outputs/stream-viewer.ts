import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import { StreamCloseCode } from '../protocol/stream.js';

export interface StreamLimits {
  /** A frame is held back (and the viewer later gets the newest state whole) when the unsent bytes plus the frame would pass this. */
  highWaterBytes: number;
  /** More unsent than this: the viewer is closed. */
  maxBufferedBytes: number;
  /** Not one byte taken by the viewer for this long while some wait: the viewer is closed. */
  maxStallMs: number;
  /** Ping interval; a viewer that has answered no ping since the last one, with nothing unsent, is gone. */
  heartbeatMs: number;
  /** How long a closed viewer gets to finish the close handshake before its socket is destroyed. */
  closeGraceMs: number;
}

export const DEFAULT_STREAM_LIMITS: StreamLimits = {
  highWaterBytes: 1024 * 1024,
  maxBufferedBytes: 8 * 1024 * 1024,
  maxStallMs: 30_000,
  heartbeatMs: 15_000,
  closeGraceMs: 10_000,
};

export type FrameKind = 'snapshot' | 'update' | 'event';

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/**
 * One viewer's websocket and what it may be sent. A viewer that reads slowly never holds up anyone:
 * frames that would pile up are dropped for it, and its next frame is a whole snapshot of the newest
 * state rather than the stale updates it missed. One that stops reading altogether is closed.
 */
export class StreamViewer {
  /** The next state frame must be a snapshot: the viewer is new, or missed a frame. */
  needsSnapshot = true;
  private closed = false;
  private alive = true;
  private coalesced = 0;
  private lastBuffered = 0;
  private addedSinceCheck = 0;
  private stalledSince: number | null = null;

  constructor(
    private readonly socket: WebSocket,
    private readonly limits: StreamLimits,
    private readonly log: Logger,
    private readonly onGone: (viewer: StreamViewer) => void,
  ) {
    socket.on('pong', () => (this.alive = true));
    socket.on('close', () => this.gone());
    socket.on('error', (error) => {
      this.log.debug({ err: error.message }, 'viewer socket error');
      this.gone();
    });
  }

  /** Sends the frame unless the viewer is behind; closes the viewer past the hard limits. */
  offer(frame: Buffer, kind: FrameKind, at: number): void {
    if (this.closed) return;
    if (kind === 'event' && this.needsSnapshot) return; // the snapshot it is owed says the same
    const buffered = this.socket.bufferedAmount;
    if (!this.makingProgress(buffered, at)) {
      this.tooSlow(`nothing taken for ${((at - this.stalledSince!) / 1000).toFixed(0)} s`);
      return;
    }
    if (buffered > this.limits.maxBufferedBytes) {
      this.tooSlow(`${mib(buffered)} MiB unsent`);
      return;
    }
    if (buffered > 0 && buffered + frame.length > this.limits.highWaterBytes) {
      if (this.coalesced++ === 0) this.log.info({ buffered }, 'viewer behind; sending it the newest state once it catches up');
      this.needsSnapshot = true;
      return;
    }
    this.socket.send(frame, { binary: false });
    this.addedSinceCheck += frame.length;
    if (kind === 'snapshot') this.needsSnapshot = false;
    if (this.coalesced > 0 && kind === 'snapshot') {
      this.log.info({ coalesced: this.coalesced }, 'viewer caught up');
      this.coalesced = 0;
    }
  }

  /** Whether the socket took any byte since the last check, or has nothing waiting (stall clock). */
  private makingProgress(buffered: number, at: number): boolean {
    const taken = this.lastBuffered + this.addedSinceCheck - buffered;
    this.lastBuffered = buffered;
    this.addedSinceCheck = 0;
    if (buffered === 0 || taken > 0) this.stalledSince = null;
    else this.stalledSince ??= at;
    return this.stalledSince === null || at - this.stalledSince <= this.limits.maxStallMs;
  }

  /** Called every heartbeat interval. */
  heartbeat(): void {
    if (this.closed) return;
    // A ping queued behind unsent frames cannot be answered: such a viewer is left to the stall limit.
    if (!this.alive && this.socket.bufferedAmount === 0) {
      this.log.info({ heartbeat_ms: this.limits.heartbeatMs }, 'viewer gone: no pong; dropping it');
      this.closed = true;
      this.socket.terminate();
      this.gone();
      return;
    }
    this.alive = false;
    this.socket.ping();
  }

  close(code: number, reason: string, graceMs = this.limits.closeGraceMs): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.close(code, reason);
    // The close frame waits behind whatever is unsent; a viewer that never reads it is cut off.
    setTimeout(() => this.socket.terminate(), graceMs).unref();
    this.gone();
  }

  private tooSlow(why: string): void {
    const reason = `viewer too slow: ${why}`;
    this.log.warn({ code: StreamCloseCode.tooSlow, reason, coalesced: this.coalesced, buffered: this.socket.bufferedAmount }, 'closing viewer');
    this.close(StreamCloseCode.tooSlow, reason);
  }

  private gone(): void {
    this.closed = true;
    this.onGone(this);
  }
}
