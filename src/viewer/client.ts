import WebSocket from 'ws';
import type { StreamEvent } from '../protocol/stream.js';
import { FrameError, parseFrame, type ViewerFrame } from './model/frames.js';

export interface ClientEvents {
  connecting(): void;
  frame(frame: ViewerFrame, at: number): void;
  /** A frame that did not parse was dropped; the connection goes on. */
  refused(reason: string): void;
  /** The connection failed or was lost; the next attempt is due at `retryAt`. */
  lost(error: string, retryAt: number): void;
}

export interface ClientOptions {
  token?: string;
  /** First and longest wait between attempts. */
  backoffMs?: { first: number; max: number };
  /** With no frame for this long (or four update intervals, if longer) the connection is taken as dead. */
  silenceMs?: number;
  now?: () => number;
}

const CLOSED = 'connection closed';

/** `ws://host:port` (or `host:port`, or an http(s) URL) → the sidecar's stream URL. */
export function streamUrl(target: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(target) ? target : `ws://${target}`;
  const url = new URL(withScheme);
  if (url.protocol === 'http:') url.protocol = 'ws:';
  if (url.protocol === 'https:') url.protocol = 'wss:';
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') throw new Error(`${target}: not a ws:// or http:// address`);
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/v1/stream';
  return url.toString();
}

/** The events this viewer shows beyond what every viewer gets. */
const EVENTS: readonly StreamEvent[] = ['regression'];

/**
 * The URL to connect to: the stream's, asking for the events this viewer shows (`?events=`, added
 * to any the address names already). A sidecar that knows none of them ignores the parameter and
 * sends what it always sent.
 */
export function connectUrl(url: string): string {
  const out = new URL(url);
  const asked = (out.searchParams.get('events') ?? '').split(',').map((name) => name.trim()).filter((name) => name !== '');
  out.searchParams.set('events', [...new Set([...asked, ...EVENTS])].join(','));
  return out.toString();
}

/** One sidecar's stream, reconnected with backoff for as long as the viewer runs. */
export class StreamClient {
  private socket: WebSocket | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private silenceTimer: NodeJS.Timeout | null = null;
  private attempt = 0;
  private silenceMs: number;
  private stopped = false;
  /** Why the current connection ended, as best known when it closes. */
  private failure = '';
  private readonly now: () => number;
  private readonly backoff: { first: number; max: number };

  constructor(
    readonly url: string,
    private readonly events: ClientEvents,
    private readonly options: ClientOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.backoff = options.backoffMs ?? { first: 250, max: 5_000 };
    this.silenceMs = options.silenceMs ?? 5_000;
  }

  start(): void {
    this.stopped = false;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.silenceTimer) clearTimeout(this.silenceTimer);
    this.socket?.removeAllListeners();
    this.socket?.on('error', () => undefined);
    this.socket?.terminate();
    this.socket = null;
  }

  private connect(): void {
    if (this.stopped) return;
    this.events.connecting();
    const headers = this.options.token ? { Authorization: `Bearer ${this.options.token}` } : undefined;
    const socket = new WebSocket(connectUrl(this.url), { headers, handshakeTimeout: 5_000 });
    this.socket = socket;
    this.failure = CLOSED;
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      let frame: ViewerFrame;
      try {
        frame = parseFrame(data.toString());
      } catch (error) {
        const reason = `bad frame: ${(error as Error).message}`;
        // A bad update or event is dropped: the next update holds the whole state again. Anything
        // else (not this stream or version, or a snapshot, without which updates cannot be used) ends
        // the connection, to be tried again like any other failed one.
        if (error instanceof FrameError && (error.frame === 'update' || error.frame === 'verdict' || error.frame === 'regression')) {
          this.watchSilence(socket);
          this.events.refused(reason);
          return;
        }
        this.failure = reason;
        socket.terminate();
        return;
      }
      if (frame.type === 'snapshot') {
        this.attempt = 0;
        // Expect a frame every update interval; several missed in a row mean the connection is gone.
        this.silenceMs = Math.max(this.options.silenceMs ?? 5_000, 4_000 / frame.rate_hz);
      }
      this.watchSilence(socket);
      this.events.frame(frame, this.now());
    });
    socket.on('open', () => this.watchSilence(socket));
    // The first thing known to have gone wrong is the one to show; what follows is its consequence.
    socket.on('error', (error) => {
      if (this.failure === CLOSED) this.failure = error.message || String(error);
    });
    socket.on('unexpected-response', (_request, response) => {
      this.failure = `HTTP ${response.statusCode}${response.statusCode === 401 || response.statusCode === 403 ? ' (check --token)' : ''}`;
      socket.terminate();
    });
    socket.on('close', (code, reason) => {
      if (socket !== this.socket) return;
      if (code !== 1006 && code !== 1005 && this.failure === CLOSED) this.failure = `closed ${code}${reason.length ? ` ${reason.toString()}` : ''}`;
      this.retry(this.failure);
    });
  }

  private watchSilence(socket: WebSocket): void {
    if (this.silenceTimer) clearTimeout(this.silenceTimer);
    this.silenceTimer = setTimeout(() => {
      if (socket !== this.socket) return;
      this.failure = `nothing received for ${(this.silenceMs / 1000).toFixed(0)} s`;
      socket.terminate();
    }, this.silenceMs);
  }

  private retry(error: string): void {
    if (this.silenceTimer) clearTimeout(this.silenceTimer);
    this.socket = null;
    if (this.stopped) return;
    const base = Math.min(this.backoff.max, this.backoff.first * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + 0.4 * Math.random()));
    this.attempt += 1;
    this.events.lost(error, this.now() + delay);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }
}
