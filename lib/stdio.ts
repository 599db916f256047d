// A call's stdio: the pipes made for it and our ends as streams. What the
// call wrote is collected in output.ts.
import type { AsyncResource } from 'node:async_hooks';
import { EventEmitter } from 'node:events';
import { PassThrough, type Readable, type Writable } from 'node:stream';

import { binding, portable } from './binding';
import type { NativeErrorShape, NativeStdio, PortablePipe } from './binding/contract';
import { type OutputOwner, OutputSocket, streamOwner } from './output';
import { DUPLEX, PipeStream, stopWaitingForEof, WRITE } from './pipe-stream';
import type { StdioEntry } from './options';

/**
 * Streams handed to a call as its stdio (another call's stdout as this one's
 * stdin, as Node's 'wrap' entries): we stop reading them, and no flush at
 * exit resumes them, or we would steal the child's input.
 */
const usedAsStdio = new WeakSet<object>();

/**
 * What the owner of a call's pipes (the call) is told each time one of its
 * readable streams closes: a method of the owner, not a closure per call.
 * It counts them down and closes when that was the last.
 */
export const stdioClosed = Symbol('proctree.stdioClosed');

/**
 * The owner of a call's pipes: the call. Its readable streams name it (under
 * output.ts's streamOwner, which its output tap reads too).
 */
export interface StdioOwner extends OutputOwner {
  [stdioClosed](): void;
}

// EPIPE once the command is gone is not fatal, as with ChildProcess.
function ignoreError(): void {}

/** A call started by run(): its caller never sees its streams, only the result. */
export interface RunStdio {
  /** run() was given `input`: stdin stays a pipe (else the command reads /dev/null). */
  input: boolean;
}

/**
 * run()'s stdout or stderr, read by the addon (native/loop/streams.h)
 * without a stream object: a Readable per stream costs the harness more
 * than the command's output often does. Nobody but the call's output collector ever reads it, so it
 * has only what CallOutput and the call's pipes use of a Readable: push() once per
 * chunk (where CallOutput taps it; 'data', then 'end' at EOF), 'close' after
 * the last push, destroy(); it never pauses (the output always flows, as
 * run() always resumed its sockets).
 */
class OutputPipeReader extends EventEmitter {
  readable = true;
  destroyed = false;
  /** The child's write end, until the call's stdio closes it. */
  readonly childEnd: number;
  readonly #id: number;
  #ending = false;

  constructor(scope: AsyncResource) {
    super();
    [this.#id, this.childEnd] = binding.streamOpen(0, (kind, value) => scope.runInAsyncScope(this.#onEvent, this, kind, value));
  }

  // (0, chunk) per chunk, then (1, null) once at the end: a pipe's read end
  // has no error of its own (kind 2 is for writes: there are none).
  #onEvent(kind: 0 | 1 | 2, value: Buffer | NativeErrorShape | null): void {
    if (kind === 0) {
      this.push(value as Buffer);
      return;
    }
    this.readable = false;
    this.destroyed = true;
    try {
      this.push(null);
    } finally {
      // Even after a throwing listener: 'close' of the call waits for this.
      this.emit('close');
    }
  }

  push(chunk: Buffer | null): boolean {
    if (chunk === null) this.emit('end');
    else this.emit('data', chunk);
    return true;
  }

  resume(): this {
    return this;
  }

  pause(): this {
    return this;
  }

  isPaused(): boolean {
    return false;
  }

  /** As the call's ref()/unref(): whether reading the pipe keeps the loop alive. */
  ref(): this {
    if (this.readable) binding.streamRef(this.#id, true);
    return this;
  }

  unref(): this {
    if (this.readable) binding.streamRef(this.#id, false);
    return this;
  }

  /** Stops waiting for EOF: what the pipe holds now still arrives, then 'close'. */
  destroy(): this {
    if (this.readable && !this.#ending) {
      this.#ending = true;
      binding.streamEnd(this.#id);
    }
    return this;
  }
}

/** What a call's start hands its child, and what of it is ours to close then. */
export class ChildSide {
  /** The child's ends of our pipes, closed once it holds its own copies. */
  childEnds: number[] | null = null;
  /** Portable binding: the pipes child_process will make, until it does. */
  portablePipes: PortablePipe[] | null = null;

  /** `forChild`: what the child gets at each fd (our pipe ends for 'pipe', the kind or fd otherwise). */
  constructor(public forChild: NativeStdio[]) {}
}

/**
 * The pipes of one call as makePipes() made them. They exist from the
 * start, so a queued call already has its streams; the child's ends are
 * handed over when it starts. The call keeps what it needs of this in
 * fields of its own (a live call holds no object for its pipes).
 */
export interface CallPipes {
  /** As ChildProcess#stdio: our stream for each 'pipe' entry, null for the others. */
  readonly streams: Array<Readable | Writable | null>;
  /** What only the child's start needs: gone once it started (or never will). */
  readonly child: ChildSide;
  /**
   * Our readable streams (`streams[1…]`: the child writes every pipe but
   * stdin), which the call's 'close' waits for: the owner counts them down
   * at each [stdioClosed](), not kept in a set.
   */
  readonly openReadable: number;
}

/**
 * Makes a call's pipes. The owner's [stdioClosed]() runs each time one of
 * its readable streams closes. Throws (EMFILE…) only after closing every
 * pipe it had made: all or nothing. `run`: the call was started by run(),
 * whose stdout and stderr the addon reads itself and whose stdin is
 * /dev/null unless it has input.
 */
/** `scope`: the async context the streams' events run in (the call's, CallState#scope). */
export function makePipes(entries: readonly StdioEntry[], owner: StdioOwner, scope: AsyncResource, run?: RunStdio): CallPipes {
  // Made at their final length, not grown by push(): a live call keeps
  // `streams` (as ChildProcess#stdio), and a grown array keeps room for 16.
  const streams: Array<Readable | Writable | null> = new Array<Readable | Writable | null>(entries.length).fill(null);
  const forChild: NativeStdio[] = new Array<NativeStdio>(entries.length).fill('ignore');
  const child = new ChildSide(forChild);
  try {
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i];
      if (entry.kind !== 'pipe') {
        forChild[i] = entry.kind === 'fd' ? entry.fd : entry.kind;
        continue;
      }
      if (portable) {
        // Portable binding (no pipe pairs of its own): our side is a
        // PassThrough now, connected to the child's pipe when it starts.
        const pipe: PortablePipe = { stream: writableQuiet(new PassThrough(), i !== 0), readable: i !== 0, connected: false };
        // stdin is for writing only to the caller, as ChildProcess#stdin is
        // (readable false); the stream's own state, which its pipe() to the
        // child reads, is left as it is.
        if (i === 0) Object.defineProperty(pipe.stream, 'readable', { get: () => false, configurable: true });
        (child.portablePipes ??= []).push(pipe);
        forChild[i] = pipe;
        streams[i] = pipe.stream;
        continue;
      }
      if (run && i === 0 && !run.input) {
        // Nothing will ever be written: EOF at the first read, as the
        // closed pipe was, without a pipe and a stream to close.
        continue;
      }
      if (run && (i === 1 || i === 2)) {
        const reader = new OutputPipeReader(scope);
        (child.childEnds ??= []).push(reader.childEnd);
        forChild[i] = reader.childEnd;
        streams[i] = reader as unknown as Readable;
        continue;
      }
      // Our end is read and written by the addon: stdout and stderr tapped
      // from their birth (output.ts), stdin written, fd 3 and up both ways
      // (a socketpair, as Node's).
      const stream = i === 1 || i === 2 ? new OutputSocket(owner, scope) : writableQuiet(new PipeStream(i === 0 ? WRITE : DUPLEX, scope), i !== 0);
      (child.childEnds ??= []).push(stream.childEnd);
      forChild[i] = stream.childEnd;
      streams[i] = stream;
    }
  } catch (err) {
    destroyPipes(streams, child);
    throw err;
  }
  // Our readable streams (every pipe but stdin), tracked once all were
  // made: a construction that threw made none the owner waits for.
  let openReadable = 0;
  for (let i = 1; i < streams.length; i++) {
    const s = streams[i];
    if (!s) continue;
    openReadable++;
    // An OutputSocket names its owner from its birth: no property added.
    if (!(s instanceof OutputSocket)) (s as Readable & { [streamOwner]?: StdioOwner })[streamOwner] = owner;
    s.on('close', readableClosed);
  }
  // Streams given as entries are the child's now: stop reading them.
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i];
    if (entry.kind === 'fd' && entry.stream) stopReading(entry.stream);
  }
  return { streams, child, openReadable };
}

/**
 * One listener for every readable stream of every call: no closure, no
 * once() wrapper per stream. It takes itself off, so a second 'close'
 * counts nothing.
 */
function readableClosed(this: Readable & { [streamOwner]?: StdioOwner }): void {
  this.off('close', readableClosed);
  // Our own streams name the call; a CallOutput is never their owner (output.ts keeps an owner there).
  this[streamOwner]?.[stdioClosed]();
}

/**
 * What the child gets at each fd, for its start (the one reader): a live
 * call does not keep it.
 */
export function takeForChild(child: ChildSide | null): NativeStdio[] {
  if (!child) return [];
  const forChild = child.forChild;
  child.forChild = [];
  return forChild;
}

/** The child holds its own copies once it started (or never will): ours would keep the pipes open. */
export function closeChildEnds(child: ChildSide | null): void {
  if (!child) return;
  const ends = child.childEnds;
  child.childEnds = null;
  if (ends) for (const fd of ends) binding.closeFd(fd);
  const pipes = child.portablePipes;
  child.portablePipes = null;
  // Portable: a pipe the child never got will never carry anything.
  if (pipes) for (const p of pipes) if (!p.connected && p.readable && !p.stream.destroyed) p.stream.end();
}

/**
 * Node's flushStdio: a readable stream nobody consumes is resumed, so it
 * reaches EOF and 'close' can come.
 */
export function flushPipes(streams: ReadonlyArray<Readable | Writable | null>): void {
  for (let i = 1; i < streams.length; i++) {
    const s = streams[i] as Readable | null;
    if (s && s.readable && !usedAsStdio.has(s)) s.resume();
  }
}

/**
 * Stops waiting for the readable pipes' EOF (a holder outside the tree keeps
 * them open): what they hold now is still read and delivered, then their
 * end. Destroying them would drop it, and a reader that is slow (or a
 * machine that is busy) has not read it yet when the wait is over.
 */
export function releaseReadable(streams: ReadonlyArray<Readable | Writable | null>): void {
  for (let i = 1; i < streams.length; i++) {
    const s = streams[i] as Readable | null;
    if (!s || s.closed) continue;
    // A stream handed to another call as its stdio is that call's to read.
    if (s instanceof PipeStream && !usedAsStdio.has(s)) s[stopWaitingForEof]();
    else s.destroy();
  }
}

/** The call never ran: every stream ends. */
export function destroyPipes(streams: ReadonlyArray<Readable | Writable | null>, child: ChildSide | null): void {
  closeChildEnds(child);
  for (const s of streams) s?.destroy();
}

export function setPipesRef(streams: ReadonlyArray<Readable | Writable | null>, ref: boolean): void {
  for (const s of streams) {
    // Portable proxies hold no handle: the binding refs the child's pipes.
    if (!(s instanceof PipeStream) && !(s instanceof OutputPipeReader)) continue;
    if (ref) s.ref();
    else s.unref();
  }
}

/** Like ChildProcess, 'close' does not wait for stdin, and its errors (EPIPE once the command is gone) are no call's. */
function writableQuiet<S extends PipeStream | PassThrough>(sock: S, readable: boolean): S {
  if (!readable) sock.on('error', ignoreError);
  return sock;
}

/** Whether a stream was handed to a call as its stdio: the child reads it, we must not. */
export function isUsedAsStdio(stream: object): boolean {
  return usedAsStdio.has(stream);
}

function stopReading(stream: Readable | Writable): void {
  usedAsStdio.add(stream);
  // What Node does to a 'wrap' stdio entry: the handle stops reading and the
  // stream forgets the read it had in flight, so a later resume() starts a
  // new one (else the stream waits forever for the read it thinks is pending).
  const s = stream as Readable & {
    _handle?: { readStop?: () => void; reading?: boolean } | null;
    _readableState?: { reading: boolean };
  };
  if (typeof s.pause === 'function' && s.readable) {
    s._handle?.readStop?.();
    if (s._handle) s._handle.reading = false;
    s.pause();
    if (s._readableState) s._readableState.reading = false;
  }
}
