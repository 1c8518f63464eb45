import type { Logger } from 'pino';
import type { RawData, WebSocket } from 'ws';
import { decode, encode } from '../protocol/codec.js';
import { CloseCode, parseHookMessage, ProtocolError, sidecarFrame, type Hello, type SidecarMessage } from '../protocol/messages.js';
import { JournalRefused } from '../journal/recorder.js';
import type { Ingest } from './ingest.js';
import { RateLimiter } from './limits.js';

const MAX_REASON_BYTES = 123;

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

/** One hook's websocket: hello first, then steps / env / end, each validated before use. */
export class HookConnection {
  private hello: Hello | null = null;
  /** Whether the connect was recorded (so a disconnect is owed). */
  private registered = false;
  private closed = false;
  private log: Logger;
  private readonly rate: RateLimiter;

  constructor(
    private readonly socket: WebSocket,
    private readonly ingest: Ingest,
    log: Logger,
    remote: string,
  ) {
    this.log = log.child({ remote });
    this.rate = new RateLimiter(ingest.limits.framesPerSecond, ingest.limits.burst, Date.now());
    const full = ingest.stats.connections >= ingest.limits.maxConnections;
    ingest.stats.connections += 1;
    ingest.stats.connectionsTotal += 1;
    socket.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    socket.on('close', () => this.onClose());
    socket.on('error', (error) => this.onSocketError(error));
    if (full) this.limit('connections', CloseCode.tryAgainLater, `too many connections: this sidecar takes ${ingest.limits.maxConnections}`);
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
    this.ingest.stats.frames += 1;
    if (!this.rate.take(Date.now())) {
      this.limit('frame-rate', CloseCode.policyViolation, `too many frames: at most ${this.ingest.limits.framesPerSecond} a second`);
      return;
    }
    try {
      if (!isBinary) throw new ProtocolError(CloseCode.unsupportedData, 'frame: text frames are not accepted, send msgpack in binary frames');
      let value: unknown;
      try {
        value = decode(toBuffer(data));
      } catch (error) {
        throw new ProtocolError(CloseCode.invalidPayload, `frame: not valid msgpack (${(error as Error).message})`);
      }
      this.handle(parseHookMessage(value));
    } catch (error) {
      if (error instanceof ProtocolError) this.refuse(error);
      else this.fail(error as Error);
    }
  }

  private handle(message: ReturnType<typeof parseHookMessage>): void {
    if (message.type === 'hello') {
      this.onHello(message);
      return;
    }
    const hello = this.hello;
    if (!hello) throw new ProtocolError(CloseCode.policyViolation, `${message.type}: sent before hello`);
    switch (message.type) {
      case 'steps':
        this.ingest.steps(hello.session, message).then(
          (ack) => this.send({ type: 'ack', ack }),
          (error: Error) => this.fail(error),
        );
        break;
      case 'env':
        this.ingest.env(hello.session, message.env).catch((error: Error) => this.fail(error));
        break;
      case 'end':
        this.ingest.end(hello.session, message.reason).then(
          (ack) => this.send({ type: 'ack', ack, end: true }),
          (error: Error) => this.fail(error),
        );
        this.log.info({ job: hello.job, rank: hello.rank, reason: message.reason }, 'rank ended');
        break;
      case 'counters':
        this.ingest.counters(hello.session, message).catch((error: Error) => this.fail(error));
        break;
    }
  }

  private onHello(hello: Hello): void {
    if (this.hello && (this.hello.session !== hello.session || this.hello.job !== hello.job || this.hello.rank !== hello.rank)) {
      throw new ProtocolError(CloseCode.policyViolation, 'hello: a connection cannot change its job, rank or session');
    }
    const first = this.hello === null;
    const refusal = first ? this.ingest.refusal(hello) : null;
    if (refusal) {
      this.limit(refusal.limit, CloseCode.policyViolation, `hello: ${refusal.reason}`);
      return;
    }
    this.hello = hello;
    if (first) this.log = this.log.child({ job: hello.job, rank: hello.rank });
    this.ingest.hello(hello).then(
      async (result) => {
        if (first) {
          await this.ingest.connected(hello.session);
          this.registered = true;
          // Closed while the hello was being written: its disconnect is owed now.
          if (this.closed) void this.ingest.disconnected(hello.session).catch(() => undefined);
        }
        this.send({ type: 'welcome', session: hello.session, ack: result.ack, counters: this.ingest.wants });
        this.log.info({ session: hello.session, resumed: result.resumed, ack: result.ack, world_size: hello.world_size }, 'hook connected');
      },
      (error: Error) => this.fail(error),
    );
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
    this.socket.close(code, closeReason(reason));
    this.onClose();
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.ingest.stats.connections -= 1;
    if (this.hello && this.registered) void this.ingest.disconnected(this.hello.session).catch(() => undefined);
  }
}
