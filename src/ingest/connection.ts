import type { ProfileRequest } from '../protocol/profile.js';
import type { Logger } from 'pino';
import type { RawData, WebSocket } from 'ws';
import { encode } from '../protocol/codec.js';
import { CloseCode, ProtocolError, readHookFrame, sidecarFrame, type Hello, type HelloMessage, type HookMessage, type SidecarMessage } from '../protocol/messages.js';
import { JournalRefused } from '../journal/recorder.js';
import { sidecarNow } from '../model/clock.js';
import type { Ingest } from './ingest.js';
import type { Flow, FlowConnection } from './flow.js';
import { RateLimiter } from './limits.js';

const MAX_REASON_BYTES = 123;
/** Frames a client may send between its hello and the welcome (a hook waits for welcome; a pipelining client need not). */
const MAX_EARLY_FRAMES = 64;

/** At most 123 bytes of UTF-8, cut at a character boundary: ws throws on a longer reason. */
export function closeReason(text: string): string {
  if (Buffer.byteLength(text) <= MAX_REASON_BYTES) return text;
  let cut = '';
  for (const char of text) {
    if (Buffer.byteLength(cut + char) > MAX_REASON_BYTES - 3) break;
    cut += char;
  }
  return cut + '...';
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/**
 * The hook connections of one sidecar, so that sockets that never say hello cannot take the slots
 * real ranks need: at most `maxPending` wait for a hello at once, and a new one closes the oldest.
 */
export class ConnectionSlots {
  private readonly pending = new Set<HookConnection>();

  constructor(private readonly maxPending: number) {}

  /** Makes room for `connection`'s hello, closing the oldest connection still waiting for one. */
  waitHello(connection: HookConnection): void {
    while (this.pending.size >= this.maxPending) {
      const oldest = this.pending.values().next().value!;
      this.pending.delete(oldest);
      oldest.evict();
    }
    this.pending.add(connection);
  }

  settled(connection: HookConnection): void {
    this.pending.delete(connection);
  }
}

/** One hook's websocket: hello first, then (after welcome) steps / env / end / counters, each validated before use. */
export class HookConnection {
  private hello: Hello | null = null;
  /** Whether `welcome` was sent: frames that come before it wait (a few) until the hello is recorded. */
  private welcomed = false;
  /** Frames that came before welcome, each with what settles its bytes. */
  private readonly early: Array<{ message: HookMessage; settle: () => void }> = [];
  /** Its frames' bytes, held until each is settled: past the bounds its socket is not read (flow.ts). */
  private readonly flow: FlowConnection;
  /** Whether the connect was recorded (so a disconnect is owed). */
  private registered = false;
  private closed = false;
  private log: Logger;
  private readonly rate: RateLimiter;
  private lastHeard = sidecarNow();
  private readonly timers: NodeJS.Timeout[] = [];
  /** Closed by the sidecar because nothing came from it: the disconnect says so (its process may live on). */
  private silent = false;
  /** What the hook was last told about viewers (in welcome or `watch`). */
  private toldWatched = false;
  /** The highest ack owed and not yet sent (-1: none): frames settled together are acknowledged by one ack. */
  private ackOwed = -1;

  constructor(
    private readonly socket: WebSocket,
    private readonly ingest: Ingest,
    log: Logger,
    remote: string,
    private readonly slots: ConnectionSlots,
    flow: Flow,
    /** Whether a viewer watches the sidecar now: told to the hook, which batches less often while none does. */
    private readonly watched: () => boolean,
  ) {
    this.log = log.child({ remote });
    this.flow = flow.open({ pause: () => socket.pause(), resume: () => socket.resume() });
    const limits = ingest.limits;
    this.rate = new RateLimiter(limits.framesPerSecond, limits.burst, sidecarNow());
    const full = ingest.stats.connections >= limits.maxConnections;
    ingest.stats.connections += 1;
    ingest.stats.connectionsTotal += 1;
    socket.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    socket.on('pong', () => (this.lastHeard = sidecarNow()));
    socket.on('close', () => this.onClose());
    socket.on('error', (error) => this.onSocketError(error));
    if (full) {
      this.limit('connections', CloseCode.tryAgainLater, `too many connections: this sidecar takes ${limits.maxConnections}`);
      return;
    }
    slots.waitHello(this);
    this.timers.push(setTimeout(() => this.helloOverdue(), limits.helloTimeoutMs).unref());
    const every = Math.max(10, Math.floor(limits.idleTimeoutMs / 3));
    this.timers.push(setInterval(() => this.checkIdle(), every).unref());
  }

  /** Closed to make room for a newer connection while it had still not said hello. */
  evict(): void {
    this.limit('pending', CloseCode.policyViolation, 'no hello yet, and newer connections are waiting: send hello first');
  }

  private helloOverdue(): void {
    if (this.hello === null) this.limit('hello-timeout', CloseCode.policyViolation, `no hello within ${this.ingest.limits.helloTimeoutMs} ms`);
  }

  private checkIdle(): void {
    const quiet = sidecarNow() - this.lastHeard;
    if (quiet >= this.ingest.limits.idleTimeoutMs) {
      this.silent = true;
      this.limit('idle', CloseCode.goingAway, `nothing heard for ${Math.round(quiet / 1000)} s (no frame, no pong)`);
      return;
    }
    if (this.socket.readyState === this.socket.OPEN) this.socket.ping();
  }

  private limit(limit: string, code: number, reason: string): void {
    this.ingest.limited(limit);
    this.refuse(new ProtocolError(code, reason));
  }

  /** ws reports frames it refused itself (oversized, malformed framing) here, and closes the socket. */
  private onSocketError(error: Error & { code?: string }): void {
    const code = error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? CloseCode.tooBig : CloseCode.protocolError;
    this.ingest.rejected(code);
    this.log.warn({ code, reason: error.message }, 'ingest frame refused; closing connection');
    this.onClose();
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    if (this.closed) return;
    this.lastHeard = sidecarNow();
    this.ingest.stats.frames += 1;
    if (!this.rate.take(this.lastHeard)) {
      this.limit('frame-rate', CloseCode.policyViolation, `too many frames: at most ${this.ingest.limits.framesPerSecond} a second`);
      return;
    }
    const buffer = toBuffer(data);
    const settle = this.flow.take(buffer.length);
    try {
      if (!isBinary) throw new ProtocolError(CloseCode.unsupportedData, 'frame: text frames are not accepted, send msgpack in binary frames');
      this.handle(readHookFrame(buffer), settle);
    } catch (error) {
      settle();
      if (error instanceof ProtocolError) this.refuse(error);
      else this.fail(error as Error);
    }
  }

  /** Handles one frame; `settle` is called once what it asked for is done (or failed). */
  private handle(message: HookMessage, settle: () => void): void {
    if (message.type === 'hello') {
      settle();
      this.onHello(message);
      return;
    }
    const hello = this.hello;
    if (!hello) throw new ProtocolError(CloseCode.policyViolation, `${message.type}: sent before hello`);
    if (!this.welcomed) {
      if (this.early.length >= MAX_EARLY_FRAMES) throw new ProtocolError(CloseCode.policyViolation, `${message.type}: more than ${MAX_EARLY_FRAMES} frames before welcome`);
      // A held steps frame lets go of its bytes (a view that holds the socket's whole read): it is journaled as rows.
      this.early.push({ message: message.type === 'steps' ? { type: 'steps', records: message.records, dropped: message.dropped } : message, settle });
      return;
    }
    const done = (work: Promise<unknown>) => work.then(settle, (error: Error) => (settle(), this.fail(error)));
    switch (message.type) {
      case 'steps':
        void done(this.ingest.steps(hello.session, message).then((ack) => this.owe(ack)));
        break;
      case 'env':
        void done(this.ingest.env(hello.session, message.env));
        break;
      case 'end':
        void done(this.ingest.end(hello.session, message.reason).then((ack) => this.sendAck(ack, true)));
        this.log.info({ job: hello.job, rank: hello.rank, reason: message.reason }, 'rank ended');
        break;
      case 'counters':
        void done(this.ingest.counters(hello.session, message));
        break;
      case 'heartbeat':
        void done(this.ingest.beat(hello.session));
        break;
      case 'stack':
        void done(this.ingest.stack(hello.session, message.frame));
        break;
      case 'profile':
        settle();
        this.ingest.profile(hello, message.frame);
        break;
    }
  }

  /** Asks the hook for a profiler window; false where its hello did not offer them. */
  requestProfile(request: ProfileRequest): boolean {
    if (this.hello?.profile !== true || this.closed) return false;
    this.send(request);
    return true;
  }

  /** A viewer came or the last one left: a welcomed hook is told if that changes what it knows. */
  watchChanged(): void {
    const watched = this.watched();
    if (!this.welcomed || watched === this.toldWatched) return;
    this.toldWatched = watched;
    this.send({ type: 'watch', watched });
  }

  /** Asks the hook where its training thread is (it answers with a `stack` frame). */
  requestCapture(id: number): void {
    this.send({ type: 'capture', id });
  }

  private onHello(message: HelloMessage): void {
    const hello = message.hello;
    if (this.hello) throw new ProtocolError(CloseCode.policyViolation, 'hello: sent twice on one connection');
    const refusal = this.ingest.refusal(hello);
    if (refusal) {
      this.limit(refusal.limit, CloseCode.policyViolation, `hello: ${refusal.reason}`);
      return;
    }
    this.hello = hello;
    this.slots.settled(this);
    this.log = this.log.child({ job: hello.job, rank: hello.rank });
    this.ingest.hello(hello, message.resume).then(
      async (result) => {
        await this.ingest.connected(hello.session);
        this.registered = true;
        // Closed while the hello was being written: its disconnect is owed now.
        if (this.closed) void this.ingest.disconnected(hello.session).catch(() => undefined);
        this.welcomed = true;
        this.toldWatched = this.watched();
        this.send({ type: 'welcome', session: hello.session, resume: result.secret, ack: result.ack, counters: this.ingest.wants, ...this.ingest.offers(hello), watched: this.toldWatched });
        this.ingest.attach(hello.session, this);
        this.log.info({ session: hello.session, resumed: result.resumed, ack: result.ack, world_size: hello.world_size }, 'hook connected');
        if (result.legacy) {
          this.log.warn({ session: hello.session, pid: hello.pid, host: hello.host, ack: result.ack }, 'session journaled before resume secrets: continued by its own process (same pid and host) under a new secret; any other process is refused it');
        }
        for (const { message, settle } of this.early.splice(0)) {
          if (this.closed) {
            settle();
            continue;
          }
          try {
            this.handle(message, settle);
          } catch (error) {
            settle();
            this.fail(error as Error);
          }
        }
      },
      (error: Error) => this.fail(error),
    );
  }

  /**
   * Acks are cumulative (every seq up to `ack` is stored): the frames of one socket read, or of one
   * journal commit, settle in the same pass of the microtask queue, and one ack after it covers them
   * all (a write to the socket each had been 6% of the main thread's busy time under the ingest bench,
   * the kernel's delivery to the hook on loopback included).
   */
  private owe(ack: number): void {
    if (this.ackOwed < 0) process.nextTick(() => this.ackOwed >= 0 && this.sendAck(this.ackOwed, false));
    this.ackOwed = Math.max(this.ackOwed, ack);
  }

  /** An ack covers what is owed: the seqs only grow, so the one owed is at most this one. */
  private sendAck(ack: number, end: boolean): void {
    this.ackOwed = -1;
    this.send(end ? { type: 'ack', ack, end: true } : { type: 'ack', ack });
  }

  private send(message: SidecarMessage): void {
    if (this.closed) return;
    this.socket.send(encode(sidecarFrame(message)));
  }

  private refuse(error: ProtocolError): void {
    this.ingest.rejected(error.code);
    this.log.warn({ code: error.code, reason: error.message }, 'ingest frame refused; closing connection');
    this.close(error.code, error.message);
  }

  private fail(error: Error): void {
    if (error instanceof ProtocolError) {
      this.refuse(error);
      return;
    }
    if (error instanceof JournalRefused) {
      // The hook keeps what was not acknowledged and sends it again once it reconnects.
      this.log.warn({ err: error.message }, 'journal cannot write; closing connection, the hook will resend');
      this.close(CloseCode.tryAgainLater, 'journal cannot write: ' + error.message);
      return;
    }
    this.log.error({ err: error.message }, 'ingest failed; closing connection');
    this.close(CloseCode.internalError, 'sidecar error: ' + error.message);
  }

  close(code: number, reason: string): void {
    if (this.closed) return;
    // What the frames before stored is acknowledged before the close: the hook need not send it again.
    if (this.ackOwed >= 0) this.sendAck(this.ackOwed, false);
    this.socket.close(code, closeReason(reason));
    this.onClose();
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.flow.close();
    for (const { settle } of this.early.splice(0)) settle();
    this.slots.settled(this);
    this.ingest.stats.connections -= 1;
    if (this.hello) this.ingest.detach(this.hello.session, this);
    if (this.hello && this.registered) void this.ingest.disconnected(this.hello.session, this.silent ? 'silent' : null).catch(() => undefined);
  }
}
