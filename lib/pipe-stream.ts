// A call's pipe as a stream: our end of it is read and written by the addon
// (native/loop/streams.h), never by a libuv stream (net.Socket), which Bun
// and Deno do not reliably give over an arbitrary fd. A Duplex as
// ChildProcess's stdio sockets are, readable and writable as the pipe is:
// stdin (written, `readable: false`), stdout and stderr (read), fd 3 and up
// (a socketpair: both).
//
// Backpressure both ways: a chunk whose push() finds the buffer full stops
// the addon's reading until _read() asks again (the writer blocks on its
// full pipe meanwhile); a write completes (its callback runs, and 'drain'
// may follow) only once its bytes are in the pipe.
import type { AsyncResource } from 'node:async_hooks';
import { Duplex, type DuplexOptions } from 'node:stream';

import { binding } from './binding';
import type { NativeErrorShape, StreamKind } from './binding/contract';
import { holdOutput, OutputHold, releaseOutput } from './output-hold';

/** streamOpen() kinds. */
export const READ: StreamKind = 1;
export const WRITE: StreamKind = 2;
export const DUPLEX: StreamKind = 3;

/** The stream's own stop of reading, for its handle's readStop(). */
const stopRead = Symbol('proctree.stopRead');

/**
 * What a 'wrap' stdio entry (options/stdio.ts, stdio.ts's stopReading) reads of a
 * stream handed to another call: its fd, and how to stop reading it. A class,
 * not an object with a closure: a live call has three of these.
 */
class PipeHandle {
  reading = false;
  constructor(
    readonly fd: number,
    readonly stream: PipeStream,
  ) {}

  readStop(): void {
    this.stream[stopRead]();
  }
}

type Callback = (err?: Error | null) => void;

/** What Writable hands _writev(): the chunks buffered (decodeStrings: Buffers). */
export interface WrittenChunk {
  chunk: Buffer;
  encoding: BufferEncoding;
}

/** _writev()'s chunks as one Buffer, for one write. @internal */
export function joinChunks(chunks: readonly WrittenChunk[]): Buffer {
  return chunks.length === 1 ? chunks[0].chunk : Buffer.concat(chunks.map((c) => c.chunk));
}

/**
 * Stops waiting for EOF (a process outside the tree holds the child's end):
 * what the pipe holds now is still read and delivered, then the end. Unlike
 * destroy(), nothing already written is lost. @internal
 */
export const stopWaitingForEof = Symbol('proctree.stopWaitingForEof');

/**
 * At the command's exit: waits until what the pipe holds then (its bytes,
 * and its EOF when every writer is gone) has been delivered and its readers
 * had their turn, as a net.Socket reads what is ready before the loop
 * hears of the exit (the kernel closes a dying process's files before it
 * reports the exit). @internal
 */
export const awaitBacklog = Symbol('proctree.awaitBacklog');

/**
 * What the pipe held at the exit: `bytes` still to be delivered (less each
 * chunk since, which may take it below 0), and whether its EOF follows
 * (`eof`: then only the stream's end will do). `done` is told once they
 * are delivered and the readers had a turn, or nobody takes more (reading
 * stopped, the stream ended or closed). `check`: that turn's look.
 */
interface Backlog {
  readonly done: () => void;
  bytes: number;
  eof: boolean;
  check: NodeJS.Immediate | null;
}

export class PipeStream extends Duplex {
  /** The child's end, until the call's start hands it over (stdio.ts closes it then). */
  readonly childEnd: number;
  /** @internal */
  readonly _handle: PipeHandle;
  readonly #id: number;
  #reading = false;
  #closed = false;
  /** stopWaitingForEof(): the end is on its way. */
  #ending = false;
  /** Completions of the writes in flight, oldest first. */
  #writes: Callback[] | null = null;
  /** What was read while the call's 'spawn' was due ([holdOutput]). */
  #hold: OutputHold | null = null;
  /** [awaitBacklog] from the exit until it is done (one field a stream: a live call's heap is counted). */
  #backlog: Backlog | null = null;

  /** `scope`: the async context its events run in (its call's, CallState#scope). */
  constructor(kind: StreamKind, scope: AsyncResource) {
    const readable = kind !== WRITE;
    const writable = kind !== READ;
    // allowHalfOpen false, as a net.Socket: the end of reading ends writing
    // too, so fd 3's stream closes (and the call's 'close' may come) once
    // the child is done with it.
    // (`readable`/`writable`: Duplex's own options since Node 14, which
    // these typings do not list.)
    super({ readable, writable, allowHalfOpen: false, decodeStrings: true } as DuplexOptions);
    const [id, childEnd, fd] = binding.streamOpen(kind, (k, v) => scope.runInAsyncScope(this.#onEvent, this, k, v));
    this.#id = id;
    this.childEnd = childEnd;
    this._handle = new PipeHandle(fd, this);
    // As a net.Socket over an fd: reading starts now, until the buffer is full.
    if (readable) this.read(0);
  }

  #onEvent(kind: 0 | 1 | 2, value: Buffer | NativeErrorShape | null): void {
    const backlog = this.#backlog;
    if (backlog && kind !== 2) {
      if (kind === 0) backlog.bytes -= (value as Buffer).length;
      this.#checkBacklogSoon(backlog);
    }
    if (this.#hold && kind !== 2) {
      if (this.#hold.keep(kind, value, this.readableHighWaterMark) && kind === 0) this.#read(false);
      if (kind === 1) this.#reading = false;
      return;
    }
    if (kind === 0) {
      if (this.destroyed) return;
      // Full: no more reads until _read() asks.
      if (!this.push(value as Buffer)) this.#read(false);
      return;
    }
    if (kind === 1) {
      this.#reading = false;
      if (value) this.destroy(value as Error);
      else if (!this.destroyed) this.push(null);
      return;
    }
    const cb = this.#writes?.shift();
    cb?.(value as Error | null);
  }

  /** @internal */
  [holdOutput](): void {
    if (this.readable && !this.#closed) this.#hold ??= new OutputHold();
  }

  /** @internal */
  [releaseOutput](): void {
    const hold = this.#hold;
    if (!hold) return;
    this.#hold = null;
    hold.replay((kind, value) => this.#onEvent(kind, value));
  }

  [stopWaitingForEof](): void {
    if (this.#closed || this.destroyed || !this.readable || this.#ending) return;
    this.#ending = true;
    binding.streamEnd(this.#id);
  }

  [awaitBacklog](done: () => void): boolean {
    // Output held for 'spawn' goes out with the exit; an ended stream has nothing to wait for.
    if (this.#closed || this.destroyed || this.readableEnded || this.#hold || this.#backlog) return false;
    const [bytes, endFollows] = binding.streamBacklog?.(this.#id) ?? [0, false];
    const backlog: Backlog = { done, bytes, eof: endFollows, check: null };
    this.#backlog = backlog;
    // Decided a turn later: its reader may still be on what it was given
    // (some runtimes run several of the addon's callbacks before the
    // promises they settle).
    this.#checkBacklogSoon(backlog);
    return true;
  }

  // A turn after the exit, and after each chunk, end or pause since: the
  // stream's readers ('data', a for await loop) have run. Done once it
  // ended, once it has delivered what the pipe held at the exit (and the
  // end, if that followed), or once nobody takes more: its buffer stayed
  // full, or the end is read and nobody read it to its 'end'.
  #checkBacklogSoon(backlog: Backlog): void {
    backlog.check ??= setImmediate(() => {
      backlog.check = null;
      if (this.#backlog !== backlog) return;
      const delivered = backlog.bytes <= 0 && !backlog.eof;
      if (!this.#closed && !this.destroyed && !this.readableEnded && this.#reading && !delivered) return;
      this.#backlog = null;
      backlog.done();
    });
  }

  #read(on: boolean): void {
    if (this.#reading === on || this.#closed) return;
    this.#reading = on;
    this._handle.reading = on;
    binding.streamRead(this.#id, on);
    if (!on && this.#backlog) this.#checkBacklogSoon(this.#backlog);
  }

  override _read(): void {
    this.#read(true);
  }

  /** @internal */
  [stopRead](): void {
    this.#read(false);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: Callback): void {
    const r = binding.streamWrite(this.#id, chunk);
    if (r === false) cb();
    else if (r === true) (this.#writes ??= []).push(cb);
    else cb(r);
  }

  /**
   * What the stream buffered while a write was in flight (or while corked),
   * in one write: one system call instead of one per chunk, as a net.Socket
   * writes it with writev(2).
   */
  override _writev(chunks: WrittenChunk[], cb: Callback): void {
    this._write(joinChunks(chunks), chunks[0].encoding, cb);
  }

  override _final(cb: Callback): void {
    cb(binding.streamShutdown(this.#id) ?? null);
  }

  override _destroy(err: Error | null, cb: Callback): void {
    this.#close();
    cb(err);
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#writes = null;
    binding.streamClose(this.#id);
    if (this.#backlog) this.#checkBacklogSoon(this.#backlog);
  }

  /**
   * Our end's descriptor, -1 once closed: what child_process.spawn takes of
   * a stream given as a stdio entry (it had a net.Socket's handle before).
   * Never read, written or closed but through this stream.
   */
  get fd(): number {
    return this.#closed ? -1 : this._handle.fd;
  }

  /** As Socket#ref(): the stream keeps the loop alive while it reads or writes. */
  ref(): this {
    if (!this.#closed) binding.streamRef(this.#id, true);
    return this;
  }

  /** As Socket#unref(). */
  unref(): this {
    if (!this.#closed) binding.streamRef(this.#id, false);
    return this;
  }
}
