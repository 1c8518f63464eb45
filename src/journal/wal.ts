import path from 'node:path';
import {
  MAX_CHECKPOINT_BYTES,
  MAX_RECORD_BYTES,
  checkpointName,
  checkpointTmpName,
  appendLine,
  CHECKPOINT_LEVELS,
  encodeLine,
  listWal,
  parseWalName,
  segmentName,
} from './wal-files.js';
import type { JournalHealth } from '../protocol/state.js';
import { TextSink } from '../io/json-parts.js';
import { errorCode, errorMessage, nodeWalFs, type WalFileHandle, type WalFs } from './wal-fs.js';
import { sidecarNow } from '../model/clock.js';

/**
 * The write-ahead log's writer. It stores JSON values and knows nothing of what they mean.
 *
 * An append resolves only once its record is written in full and fdatasync'ed; appends made
 * within `flushDelayMs` share one write and one fdatasync (group commit). A write that fails, or
 * writes short, resolves none of its batch, and rejects every append queued before the failure
 * was seen too: a caller that logged B assuming A was on its way must never see B durable without
 * A. The bytes of a failed batch are cut off again, so that nothing rejected reads back.
 *
 * `checkpoint(state)` takes its place in the order of appends: once every append made before it
 * is settled, it starts a new segment n and writes `checkpoint-n.json`, which stands for every
 * segment below n; those are then deleted. The files together never pass `maxBytes`: a batch that
 * would is refused with WalFullError. What to do about it (and when to checkpoint) is the owner's
 * to decide: see Recorder.
 */

export class WalWriteError extends Error {
  /** The system error code ('ENOSPC', 'EIO', …) or one of the log's own ('ESHORTWRITE', 'WAL_FULL', 'WAL_CLOSED', …). */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WalWriteError';
    this.code = code;
  }
}

export class WalFullError extends WalWriteError {
  constructor(maxBytes: number) {
    super('WAL_FULL', `journal at its cap of ${maxBytes} bytes`);
    this.name = 'WalFullError';
  }
}

/** The log's part of the journal's health: the rest (what was given up, the replay) is the Recorder's. */
export type WalHealth = Omit<JournalHealth, 'givenUp' | 'replay'>;

export interface WalOptions {
  dir: string;
  /** Hard cap on the bytes of all checkpoint and segment files together. */
  maxBytes: number;
  /** A new segment is started once the current one has reached this size (default 4 MiB). */
  segmentBytes?: number;
  /** Appends within this delay share one write and fdatasync (default 5 ms). */
  flushDelayMs?: number;
  /** After a failed write, appends are refused for this long before one is tried again (default 1000 ms). */
  retryMs?: number;
  fs?: WalFs;
  now?: () => number;
  /** A checkpoint larger than this is not written (default MAX_CHECKPOINT_BYTES): the reader would refuse it. */
  maxCheckpointBytes?: number;
  /**
   * An append not settled after this long makes health() not ok (default 5000 ms), whatever holds it:
   * a disk that stopped answering, or file-system threads taken by something else.
   */
  stallMs?: number;
}

const DEFAULT_SEGMENT_BYTES = 4 * 1024 * 1024;
const DEFAULT_FLUSH_DELAY_MS = 5;
const DEFAULT_RETRY_MS = 1000;
const DEFAULT_STALL_MS = 5000;
/** A new batch's sink; it grows as its batch does. */
const SINK_BYTES = 64 * 1024;
/** Sinks kept for later batches, and the largest kept: held while idle, so not a burst's batches of MiBs. */
const SPARE_SINKS = 2;
const SPARE_SINK_MAX_BYTES = 1024 * 1024;

interface Waiter {
  resolve(): void;
  reject(error: Error): void;
}

/** Appends that go out in one write: their lines, written one after another into a sink (more than one where batches were merged). */
interface Batch {
  kind: 'batch';
  sinks: TextSink[];
  bytes: number;
  waiters: Waiter[];
}

/** A checkpoint, at the place in the order of appends where it was called: the segment changes here. */
interface Cut {
  kind: 'cut';
  line: Buffer;
  waiter: Waiter;
}

type Task = Batch | Cut;

interface Segment {
  number: number;
  name: string;
  handle: WalFileHandle | null;
  /** An open was tried: if it failed half-way, the retry may empty what it left. */
  attempted: boolean;
  dirSynced: boolean;
  /** Bytes written and fdatasync'ed: where the next write goes, and what a failed one is cut back to. */
  size: number;
}

export class Wal {
  private readonly fs: WalFs;
  private readonly dir: string;
  private readonly maxBytes: number;
  private readonly segmentBytes: number;
  private readonly flushDelayMs: number;
  private readonly retryMs: number;
  private readonly now: () => number;
  private readonly maxCheckpointBytes: number;
  private readonly stallMs: number;
  /** When each append not yet settled was made, oldest first (appends settle in order); from `pendingHead` on. */
  private pendingAt: number[] = [];
  private pendingHead = 0;

  /** Every file of the log and its size (an upper bound where a failed write left bytes). */
  private readonly files = new Map<string, number>();
  private total = 0;
  private segment: Segment;
  /** The segment was left in a state it must not be written in again (a failed write not cut off). */
  private abandoned = false;

  private open: Batch | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private tasks: Task[] = [];
  private pumping = false;

  /** Set by a failed write until one succeeds; appends are refused with it until `failedUntil`. */
  private failure: WalWriteError | null = null;
  private failedUntil = 0;
  private ok = true;
  private reason: string | null = null;
  private writeErrors = 0;
  private lastError: string | null = null;
  private lastCheckpointAt: number | null = null;
  private lastCheckpointMs: number | null = null;
  private lastCheckpointBytes: number | null = null;
  /**
   * Sinks of batches already written, for the next: each batch's lines are written straight into
   * one, not into a buffer per line joined for the write, so the records cost no buffer of their
   * own (BENCHMARKS.md, "The journal's lines written in parts").
   */
  private spareSinks: TextSink[] = [];

  private closed = false;
  private closing: Promise<void> | null = null;
  private idleWaiters: Array<() => void> = [];

  private constructor(options: WalOptions, fs: WalFs, files: Map<string, number>, firstSegment: number) {
    this.fs = fs;
    this.dir = options.dir;
    this.maxBytes = options.maxBytes;
    this.segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.flushDelayMs = options.flushDelayMs ?? DEFAULT_FLUSH_DELAY_MS;
    this.retryMs = options.retryMs ?? DEFAULT_RETRY_MS;
    this.now = options.now ?? sidecarNow;
    this.maxCheckpointBytes = Math.min(options.maxCheckpointBytes ?? MAX_CHECKPOINT_BYTES, MAX_CHECKPOINT_BYTES);
    this.stallMs = options.stallMs ?? DEFAULT_STALL_MS;
    for (const [name, size] of files) this.setFile(name, size);
    this.segment = newSegment(firstSegment);
  }

  /**
   * Opens the log in `options.dir`, creating the folder if needed. Writing always starts in a new
   * segment, numbered after every existing file, so a segment torn by a crash is never appended to.
   */
  static async open(options: WalOptions): Promise<Wal> {
    checkOptions(options);
    const fs = options.fs ?? nodeWalFs;
    const dir = options.dir;
    let info;
    try {
      info = await fs.stat(dir);
    } catch (error) {
      throw new Error(`cannot open journal directory ${dir}: ${errorMessage(error)}`, { cause: error });
    }
    if (info && !info.isDirectory) throw new Error(`journal directory ${dir} exists and is not a directory`);
    if (!info) {
      try {
        await fs.mkdir(dir);
      } catch (error) {
        throw new Error(`cannot create journal directory ${dir}: ${errorMessage(error)}`, { cause: error });
      }
    }
    const listing = await listWal(fs, dir);
    const files = new Map<string, number>();
    // A .tmp is a checkpoint that was never renamed into place: incomplete by definition.
    for (const tmp of listing['checkpoint-tmp']) {
      const removed = await fs.unlink(path.join(dir, tmp.name)).then(
        () => true,
        () => false,
      );
      if (!removed) listing.checkpoint.push(tmp);
    }
    for (const found of [...listing.segment, ...listing.checkpoint]) {
      const size = (await fs.stat(path.join(dir, found.name)))?.size;
      if (size !== undefined) files.set(found.name, size);
    }
    // Checkpoint n stands for segments below n: the next segment is at least n.
    const highest = Math.max(0, ...listing.segment.map((s) => s.number), ...listing.checkpoint.map((c) => c.number - 1));
    const wal = new Wal(options, fs, files, highest + 1);
    try {
      await wal.ensureCreated(wal.segment);
    } catch (error) {
      await wal.close();
      throw new Error(`cannot start journal segment in ${dir}: ${errorMessage(error)}`, { cause: error });
    }
    return wal;
  }

  /**
   * Resolves once the record is written in full and fdatasync'ed. Never throws; rejects with a
   * WalWriteError (WalFullError at the cap). The appends of one batch resolve in append order in
   * one synchronous loop, and batches resolve in order.
   */
  append(value: unknown): Promise<void> {
    if (this.closed) return Promise.reject(closedError());
    if (this.failure && this.now() < this.failedUntil) return Promise.reject(this.failure);
    // The value's toJSON runs while its line is half written in the open batch: it must not append.
    const batch = (this.open ??= this.newBatch());
    const sink = batch.sinks[0]!;
    let bytes: number;
    try {
      bytes = appendLine(sink, value);
    } catch (error) {
      this.dropIfEmpty(batch);
      return Promise.reject(new WalWriteError('WAL_BAD_VALUE', `journal value cannot be stored: ${errorMessage(error)}`, { cause: error }));
    }
    if (bytes > MAX_RECORD_BYTES) {
      sink.length -= bytes;
      this.dropIfEmpty(batch);
      return Promise.reject(new WalWriteError('WAL_TOO_LARGE', `journal record of ${bytes} bytes is over the ${MAX_RECORD_BYTES} byte limit`));
    }
    batch.bytes += bytes;
    this.pendingAt.push(this.now());
    return new Promise<void>((resolve, reject) => {
      batch.waiters.push({ resolve: () => (this.settledOne(), resolve()), reject: (error) => (this.settledOne(), reject(error)) });
      this.flushTimer ??= setTimeout(() => {
        this.flushTimer = null;
        this.cutOpen();
        this.kick();
      }, this.flushDelayMs);
    });
  }

  /**
   * Writes `state` as checkpoint n, where n is the segment started at this call, then deletes the
   * segments below n and older checkpoints. `state` is serialized at the call and must cover every
   * append made before it, resolved or not (they all go to segments below n). Checkpoints run one
   * at a time, in the order of appends; later appends wait for it.
   */
  checkpoint(state: unknown): Promise<void> {
    if (this.closed) return Promise.reject(closedError());
    let line: Buffer;
    try {
      // About the last one's size: a line grown by doubling is held at up to twice its bytes until written.
      line = encodeLine(state, Math.round((this.lastCheckpointBytes ?? 0) * 1.25), CHECKPOINT_LEVELS);
    } catch (error) {
      return Promise.reject(new WalWriteError('WAL_BAD_VALUE', `journal checkpoint cannot be stored: ${errorMessage(error)}`, { cause: error }));
    }
    return new Promise<void>((resolve, reject) => {
      this.cutOpen();
      this.tasks.push({ kind: 'cut', line, waiter: { resolve, reject } });
      this.kick();
    });
  }

  /** Bytes of all the log's files now, kept up to date as they are written and deleted. */
  bytes(): number {
    return this.total;
  }

  /** One more append settled (they settle in order: the oldest pending moves on). */
  private settledOne(): void {
    this.pendingHead += 1;
    if (this.pendingHead === this.pendingAt.length) {
      this.pendingAt = [];
      this.pendingHead = 0;
    } else if (this.pendingHead >= 1024 && this.pendingHead * 2 >= this.pendingAt.length) {
      // Under steady load the queue never empties: drop the settled front now and then.
      this.pendingAt = this.pendingAt.slice(this.pendingHead);
      this.pendingHead = 0;
    }
  }

  /** Why the log is stalled (an append waiting past `stallMs`), or null. */
  private stalled(): string | null {
    const oldest = this.pendingAt[this.pendingHead];
    if (oldest === undefined) return null;
    const waited = this.now() - oldest;
    return waited > this.stallMs ? `journal stalled: a write has waited ${(waited / 1000).toFixed(1)} s for the disk (or for a file-system thread)` : null;
  }

  health(): WalHealth {
    const stalled = this.ok ? this.stalled() : null;
    let segments = 0;
    let checkpoints = 0;
    for (const name of this.files.keys()) {
      const kind = parseWalName(name)?.kind;
      if (kind === 'segment') segments += 1;
      else if (kind === 'checkpoint') checkpoints += 1;
    }
    return {
      ok: this.ok && stalled === null,
      reason: this.reason ?? stalled,
      writeErrors: this.writeErrors,
      lastError: this.lastError,
      segments,
      bytes: this.total,
      maxBytes: this.maxBytes,
      checkpoints,
      lastCheckpointAt: this.lastCheckpointAt,
      lastCheckpointMs: this.lastCheckpointMs,
      lastCheckpointBytes: this.lastCheckpointBytes,
    };
  }

  /** Writes what is pending, lets a running checkpoint finish, and closes. Appends after this are refused. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.closing = (async () => {
      this.cutOpen();
      this.kick();
      await new Promise<void>((resolve) => {
        this.idleWaiters.push(resolve);
        this.checkIdle();
      });
      const handle = this.segment.handle;
      this.segment.handle = null;
      await handle?.close().catch(() => undefined);
    })();
    return this.closing;
  }

  // --- the write loop -------------------------------------------------------------------------

  private cutOpen(): void {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = null;
    }
    if (!this.open) return;
    this.tasks.push(this.open);
    this.open = null;
  }

  private kick(): void {
    if (!this.pumping) void this.pump();
  }

  /** The one loop that writes: tasks in order, one at a time, so batches complete in order. */
  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      for (;;) {
        const task = this.tasks[0];
        if (!task) break;
        if (task.kind === 'cut') {
          this.tasks.shift();
          await this.runCheckpoint(task);
          continue;
        }
        const batch = this.takeBatch();
        await this.writeBatch(batch);
        this.recycle(batch);
        // Group commit: what arrived during that write has waited long enough.
        if (this.open) this.cutOpen();
      }
    } catch (error) {
      // Not expected (each step handles its own errors); still, no append may hang or go unhandled.
      this.fail(null, new WalWriteError('WAL_INTERNAL', `journal write loop failed: ${errorMessage(error)}`, { cause: error }), false);
    } finally {
      this.pumping = false;
      this.checkIdle();
    }
  }

  /** The batch at the front, with the batches right behind it merged in (one write, one fdatasync). */
  private takeBatch(): Batch {
    const first = this.tasks.shift() as Batch;
    for (;;) {
      const next = this.tasks[0];
      if (!next || next.kind !== 'batch') return first;
      this.tasks.shift();
      first.sinks.push(...next.sinks);
      first.waiters.push(...next.waiters);
      first.bytes += next.bytes;
    }
  }

  private async writeBatch(batch: Batch): Promise<void> {
    if (this.total + batch.bytes > this.maxBytes) {
      this.fail(batch, new WalFullError(this.maxBytes), false);
      return;
    }
    let segment: Segment;
    try {
      segment = await this.readySegment();
    } catch (error) {
      this.fail(batch, writeError(error), true);
      return;
    }
    const handle = segment.handle;
    if (!handle) {
      this.fail(batch, new WalWriteError('WAL_INTERNAL', 'journal segment is not open'), true);
      return;
    }
    const filled = batch.sinks.map((sink) => sink.buffer.subarray(0, sink.length));
    const data = filled.length === 1 ? filled[0]! : Buffer.concat(filled, batch.bytes);
    // Counted before the first byte lands, so bytes() never understates the folder.
    this.setFile(segment.name, segment.size + data.length);
    let written = 0;
    try {
      written = await handle.write(data, segment.size);
      if (written < data.length) throw shortWrite(written, data.length);
      await handle.datasync();
    } catch (error) {
      await this.cutBack(segment, handle, written);
      this.fail(batch, writeError(error), true);
      return;
    }
    segment.size += data.length;
    if (this.failure || !this.ok) {
      this.failure = null;
      this.setHealth(true, null);
    }
    for (const waiter of batch.waiters) waiter.resolve();
  }

  /**
   * After a failed write: cut the file back to its last good size, so that no byte of the failed
   * batch reads back. If that fails, blank what was written instead and never write this segment
   * again (a later batch would otherwise follow a torn line and be lost with it).
   */
  private async cutBack(segment: Segment, handle: WalFileHandle, written: number): Promise<void> {
    let truncated = false;
    try {
      await handle.truncate(segment.size);
      truncated = true;
      await handle.datasync();
      this.setFile(segment.name, segment.size);
      return;
    } catch {
      this.abandoned = true;
    }
    if (truncated) {
      this.setFile(segment.name, segment.size);
      return;
    }
    // A write that throws wrote nothing; a short one wrote `written`, and a failed fdatasync all of it.
    if (written > 0) {
      const blank = Buffer.alloc(written, 0x20);
      blank[written - 1] = 0x0a;
      await handle
        .write(blank, segment.size)
        .then(() => handle.datasync())
        .catch(() => undefined);
    }
    this.setFile(segment.name, segment.size + written);
  }

  /**
   * Rejects `batch` and everything queued behind it (the failure's epoch). A counted failure is a
   * failed write: appends are then refused until `retryMs` has passed.
   */
  private fail(batch: Batch | null, error: WalWriteError, counted: boolean): void {
    if (counted) {
      this.writeErrors += 1;
      this.lastError = error.message;
      this.failure = error;
      this.failedUntil = this.now() + this.retryMs;
    }
    this.setHealth(false, error.message);
    const rejected: Waiter[] = batch ? [...batch.waiters] : [];
    for (const task of this.tasks) {
      if (task.kind !== 'batch') continue;
      rejected.push(...task.waiters);
      this.recycle(task);
    }
    this.tasks = this.tasks.filter((task) => task.kind === 'cut');
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.open) {
      rejected.push(...this.open.waiters);
      this.recycle(this.open);
    }
    this.open = null;
    for (const waiter of rejected) waiter.reject(error);
  }

  private setHealth(ok: boolean, reason: string | null): void {
    this.ok = ok;
    this.reason = reason;
  }

  // --- segments -------------------------------------------------------------------------------

  /** The segment the next batch goes to: a new one if this one is full or was abandoned. */
  private async readySegment(): Promise<Segment> {
    if (this.abandoned || this.segment.size >= this.segmentBytes) await this.rotate();
    await this.ensureCreated(this.segment);
    return this.segment;
  }

  /** Moves on to the next segment number, unless the current segment was never created (then it is as good as new). */
  private async rotate(): Promise<void> {
    const old = this.segment;
    if (!old.handle && !this.files.has(old.name)) return;
    this.segment = newSegment(old.number + 1);
    this.abandoned = false;
    if (old.handle) {
      const handle = old.handle;
      old.handle = null;
      await handle.close().catch(() => undefined);
    }
  }

  /** Creates the segment file and makes its name durable (fsync of the folder) before anything is acknowledged in it. */
  private async ensureCreated(segment: Segment): Promise<void> {
    if (!segment.handle) {
      const flags = segment.attempted ? 'w' : 'wx';
      segment.attempted = true;
      segment.handle = await this.fs.open(path.join(this.dir, segment.name), flags);
      this.setFile(segment.name, 0);
    }
    if (!segment.dirSynced) {
      await this.fs.syncDir(this.dir);
      segment.dirSynced = true;
    }
  }

  // --- checkpoints ----------------------------------------------------------------------------

  /**
   * Reached in the write loop once everything appended before the checkpoint call is settled.
   * Never rejects: the outcome goes to the caller.
   */
  private async runCheckpoint(cut: Cut): Promise<void> {
    const { line, waiter } = cut;
    try {
      await this.rotate();
      // Created now so that checkpoint n always has a segment n after it; if this fails, the next write retries.
      await this.ensureCreated(this.segment).catch(() => undefined);
      const number = this.segment.number;
      const started = this.now();
      if (line.length > this.maxCheckpointBytes) {
        throw new WalWriteError('WAL_TOO_LARGE', `journal checkpoint of ${line.length} bytes is over the ${this.maxCheckpointBytes} byte limit`);
      }
      // It must fit beside the files it replaces: they are only deleted once it is durable.
      if (this.total + line.length > this.maxBytes) throw new WalFullError(this.maxBytes);
      await this.writeCheckpoint(number, line);
      this.lastCheckpointAt = this.now();
      this.lastCheckpointMs = this.lastCheckpointAt - started;
      this.lastCheckpointBytes = line.length;
      await this.deleteCovered(number);
    } catch (error) {
      waiter.reject(error instanceof Error ? error : writeError(error));
      return;
    }
    waiter.resolve();
  }

  /** tmp file, fdatasync, rename, fsync of the folder. Its bytes count from before the first one lands. */
  private async writeCheckpoint(number: number, line: Buffer): Promise<void> {
    const tmpName = checkpointTmpName(number);
    const tmp = path.join(this.dir, tmpName);
    this.setFile(tmpName, line.length);
    let renamed = false;
    try {
      const handle = await this.fs.open(tmp, 'w');
      try {
        const written = await handle.write(line, 0);
        if (written < line.length) throw shortWrite(written, line.length);
        await handle.datasync();
      } finally {
        await handle.close().catch(() => undefined);
      }
      await this.fs.rename(tmp, path.join(this.dir, checkpointName(number)));
      renamed = true;
      this.dropFile(tmpName);
      this.setFile(checkpointName(number), line.length);
      await this.fs.syncDir(this.dir);
    } catch (error) {
      const failure = writeError(error);
      this.writeErrors += 1;
      this.lastError = failure.message;
      if (!renamed) await this.remove(tmpName);
      throw failure;
    }
  }

  /** Deletes what checkpoint `number` stands for; a file that will not go is kept (and counted) for the next one. */
  private async deleteCovered(number: number): Promise<void> {
    for (const name of [...this.files.keys()]) {
      const parsed = parseWalName(name);
      if (!parsed) continue;
      if (parsed.kind === 'checkpoint-tmp' || parsed.number < number) await this.remove(name);
    }
  }

  private async remove(name: string): Promise<void> {
    try {
      await this.fs.unlink(path.join(this.dir, name));
      this.dropFile(name);
    } catch (error) {
      if (errorCode(error) === 'ENOENT') this.dropFile(name);
    }
  }

  private setFile(name: string, size: number): void {
    this.total += size - (this.files.get(name) ?? 0);
    this.files.set(name, size);
  }

  private dropFile(name: string): void {
    this.total -= this.files.get(name) ?? 0;
    this.files.delete(name);
  }

  private newBatch(): Batch {
    return { kind: 'batch', sinks: [this.spareSinks.pop() ?? new TextSink(SINK_BYTES)], bytes: 0, waiters: [] };
  }

  /** The open batch, where its only append was refused: gone, as if never opened. */
  private dropIfEmpty(batch: Batch): void {
    if (batch.waiters.length > 0 || this.open !== batch) return;
    this.open = null;
    this.recycle(batch);
  }

  /** A batch's sinks, once nothing reads them (written, or refused), kept for later batches: a few, none grown past SPARE_SINK_MAX_BYTES. */
  private recycle(batch: Batch): void {
    for (const sink of batch.sinks) {
      if (this.spareSinks.length >= SPARE_SINKS || sink.buffer.length > SPARE_SINK_MAX_BYTES) continue;
      sink.length = 0;
      this.spareSinks.push(sink);
    }
    batch.sinks = [];
  }

  private checkIdle(): void {
    if (this.pumping || this.tasks.length > 0 || this.open) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

function newSegment(number: number): Segment {
  return { number, name: segmentName(number), handle: null, attempted: false, dirSynced: false, size: 0 };
}

function closedError(): WalWriteError {
  return new WalWriteError('WAL_CLOSED', 'journal closed');
}

function shortWrite(written: number, asked: number): WalWriteError {
  return new WalWriteError('ESHORTWRITE', `short write: ${written} of ${asked} bytes`);
}

/** As a WalWriteError whose message reads `journal write failed: ENOSPC: no space left on device, write`. */
function writeError(error: unknown): WalWriteError {
  if (error instanceof WalWriteError && error.code === 'ESHORTWRITE') {
    return new WalWriteError(error.code, `journal write failed: ${error.message}`, { cause: error });
  }
  if (error instanceof WalWriteError) return error;
  return new WalWriteError(errorCode(error) ?? 'EIO', `journal write failed: ${errorMessage(error)}`, { cause: error });
}

function checkOptions(options: WalOptions): void {
  const check = (name: string, value: number | undefined, optional: boolean, zeroOk: boolean): void => {
    if (value === undefined && optional) return;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!zeroOk && value === 0)) {
      throw new Error(`journal option ${name} must be a ${zeroOk ? 'non-negative' : 'positive'} number, not ${String(value)}`);
    }
  };
  check('maxBytes', options.maxBytes, false, false);
  check('segmentBytes', options.segmentBytes, true, false);
  check('flushDelayMs', options.flushDelayMs, true, true);
  check('retryMs', options.retryMs, true, true);
}
