/**
 * Backpressure for the hooks' connections: the bytes of frames received but not yet settled (written,
 * applied, acknowledged) are bounded per connection and in all. Past a bound the connection's
 * socket stops being read, so TCP fills and the hook's sends wait instead of the sidecar's buffers
 * growing; it is read again as soon as what it holds settles. A hook slows, it loses nothing.
 */
export interface FlowLimits {
  /** Bytes one connection may have received and not settled before its socket is paused. */
  heldBytesPerConnection: number;
  /** Bytes all connections together may have received and not settled before each sender is paused. */
  heldBytes: number;
}

/** What a connection does when told to stop or go on reading its socket. */
export interface Valve {
  pause(): void;
  resume(): void;
}

export class Flow {
  private held = 0;
  private readonly paused = new Set<FlowConnection>();

  constructor(readonly limits: FlowLimits) {}

  open(valve: Valve): FlowConnection {
    return new FlowConnection(this, valve);
  }

  /** @internal */
  received(connection: FlowConnection, bytes: number): void {
    this.held += bytes;
    if (connection.held > this.limits.heldBytesPerConnection || this.held > this.limits.heldBytes) this.pause(connection);
  }

  /** @internal */
  settled(bytes: number): void {
    this.held -= bytes;
    if (this.held > this.limits.heldBytes) return;
    // Every paused connection under its own bound goes on at once: none waits behind the others.
    for (const connection of this.paused) if (connection.held <= this.limits.heldBytesPerConnection) this.resume(connection);
  }

  /** @internal */
  closed(connection: FlowConnection): void {
    this.paused.delete(connection);
  }

  private pause(connection: FlowConnection): void {
    if (this.paused.has(connection)) return;
    this.paused.add(connection);
    connection.valve.pause();
  }

  private resume(connection: FlowConnection): void {
    this.paused.delete(connection);
    connection.valve.resume();
  }
}

/** One connection's share: each frame is `take`n as it arrives and its settle function called once when done. */
export class FlowConnection {
  held = 0;
  private open = true;

  constructor(
    private readonly flow: Flow,
    readonly valve: Valve,
  ) {}

  /** Counts a received frame; returns what to call once it is settled (exactly once, success or not). */
  take(bytes: number): () => void {
    this.held += bytes;
    this.flow.received(this, bytes);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.held -= bytes;
      this.flow.settled(bytes);
    };
  }

  /** The socket closed: nothing of it waits to be read again (its frames still settle as they finish). */
  close(): void {
    if (!this.open) return;
    this.open = false;
    this.flow.closed(this);
  }
}
