// A call's terminal: the pseudo-terminal's master side as a duplex stream,
// its window size, and what runs in its foreground. The addon opens the pair
// before the clone and makes the slave the command's fds 0–2 and controlling
// terminal (setsid + TIOCSCTTY); the master, non-blocking and close-on-exec,
// is handed back to the addon's streams (native/loop/streams.h), which read
// and write it (no tty.ReadStream, no libuv handle on it) until this file
// closes it.
import type { AsyncResource } from 'node:async_hooks';
import fs from 'node:fs';
import { Duplex } from 'node:stream';

import { invalidArgType, proctreeError } from './errors';
import { binding } from './binding';
import type { NativeErrorShape } from './binding/contract';
import { holdOutput, OutputHold, releaseOutput } from './output-hold';
import { joinChunks, type WrittenChunk } from './pipe-stream';
import { checkPtySize, type ResolvedPty } from './options/stdio';
import type { ProcessInfo } from './types';

export function noTerminal(): Error & { code: string } {
  return proctreeError('ERR_PROCTREE_NO_PTY', 'The call has no terminal: spawn it with options.pty');
}

/** @internal the master fd from the spawn result; the stream owns it from here. */
export const attachMaster = Symbol('proctree.attachMaster');
/** @internal Node's flushStdio for the terminal: resumed so it reaches its end. */
export const flushPty = Symbol('proctree.flushPty');
/** @internal the tree is empty: the master may close once its output is read. */
export const ptyTreeEmpty = Symbol('proctree.ptyTreeEmpty');
/** @internal closes the master now (something outside the tree holds the slave, or the call never ran). */
export const releasePty = Symbol('proctree.releasePty');
/** @internal whether the call's 'close' still waits for the terminal (output not over, or master open). */
export const ptyPending = Symbol('proctree.ptyPending');
/** @internal ref()/unref() of the call. */
export const setPtyRef = Symbol('proctree.setPtyRef');

/**
 * The master side of a call's terminal. Reading gives what the command
 * wrote to its terminal (stdout and stderr merged, as a screen shows them,
 * after the line discipline: `\n` arrives as `\r\n` unless the command set
 * the terminal raw); writing is typing. It ends when no process holds the
 * terminal any more (EIO or EOF on the master: normal termination, never an
 * 'error'), which is after everything the tree wrote has been read.
 *
 * The master stays open until the call's tree is empty, even after that
 * end: closing it hangs the terminal up, and the kernel would send SIGHUP to
 * a session leader that closed its fds but has not exited yet (`cat` at
 * EOF), changing how it ends. `destroy()` closes it at once: a hangup, as
 * closing a terminal window.
 */
export class PtyStream extends Duplex {
  /** The window size the command sees (TIOCGWINSZ), as last set. */
  cols: number;
  rows: number;
  /** What TERM says in the command's environment. */
  readonly term: string;
  /** /dev/pts/N (the slave), once the call started; null before (and on kernels before 4.18). */
  path: string | null = null;

  // The master's number (ioctls) and its stream in the addon, while open.
  #fd = -1;
  #id = 0;
  #master: 'waiting' | 'open' | 'closed' = 'waiting';
  #reading = false;
  /** What was read while the call's 'spawn' was due ([holdOutput]). */
  #heldOutput: OutputHold | null = null;
  #outputEnded = false;
  // Until the tree is empty, a master whose output ended is kept open.
  #hold = true;
  // A write before the start, or one the addon queued (the terminal's input
  // queue is full): one at most, as Writable serializes _write.
  #pending: { chunk: Buffer | null; cb: (err?: Error | null) => void } | null = null;
  #ref = true;
  #settled = false;
  readonly #onChange: () => void;
  readonly #members: () => number[];

  /** @internal created by the call; `onChange` runs when the output ends and when the master closes. */
  readonly #scope: AsyncResource;

  /** `scope`: the async context its events run in (its call's, CallState#scope). */
  constructor(opts: ResolvedPty, onChange: () => void, members: () => number[], scope: AsyncResource) {
    // allowHalfOpen false: once the terminal is gone, typing ends too.
    // autoDestroy false: the end of the output does not close the master
    // while the tree lives (see #hold); the stream is destroyed, and 'close'
    // comes, once the master is closed.
    super({ allowHalfOpen: false, decodeStrings: true, autoDestroy: false });
    this.cols = opts.cols;
    this.rows = opts.rows;
    this.term = opts.term;
    this.#onChange = onChange;
    this.#members = members;
    this.#scope = scope;
    if (opts.encoding) this.setEncoding(opts.encoding);
    const settle = (): void => {
      if (this.#settled) return;
      this.#settled = true;
      this.#onChange();
    };
    this.once('end', settle);
    this.once('close', settle);
    this.once('end', () => this.#maybeDone());
  }

  /**
   * Sets the window size: TIOCSWINSZ on the master, which sends SIGWINCH to
   * the terminal's foreground process group. Before the call starts, the
   * size it starts with.
   */
  resize(cols: number, rows: number): void {
    if (typeof cols !== 'number') throw invalidArgType('cols', 'number', cols);
    if (typeof rows !== 'number') throw invalidArgType('rows', 'number', rows);
    const c = checkPtySize(cols, 'cols', this.cols);
    const r = checkPtySize(rows, 'rows', this.rows);
    this.cols = c;
    this.rows = r;
    if (this.#master === 'open') binding.ptyResize(this.#fd, c, r);
  }

  /**
   * The terminal's foreground process group (tcgetpgrp on the master) as
   * one of its processes: the group's leader, or a member of the call in
   * that group when the leader is gone. `comm` says what it is ("vim is in
   * the foreground"); null before the start, once the tree is gone, or when
   * no group is in the foreground.
   */
  foreground(): ProcessInfo | null {
    if (this.#master !== 'open') return null;
    const pgid = binding.ptyForeground(this.#fd);
    if (pgid <= 0) return null;
    // The pgid names the leader only while it lives: check the pgid it has
    // now (a reused pid would have another), else look among the call's own
    // (their stat only, until one is in the group: this runs on the
    // JavaScript thread, and a command line's read can wait on its process).
    const [leader] = binding.processInfo([pgid], pgid);
    if (leader) return leader;
    return binding.processInfo(this.#members(), pgid)[0] ?? null;
  }

  /** @internal */
  [attachMaster](fd: number): void {
    if (this.#master !== 'waiting') {
      // Destroyed before the call started: closing the master hangs the
      // terminal up, as closing a terminal window would.
      binding.closeFd(fd);
      return;
    }
    try {
      this.#id = binding.streamAdopt(fd, (kind, value) => this.#scope.runInAsyncScope(this.#onEvent, this, kind, value));
    } catch (err) {
      // The addon closed it.
      this.#master = 'closed';
      this.destroy(err as Error);
      return;
    }
    this.#fd = fd;
    this.#master = 'open';
    this.path = ptsPath(fd);
    if (!this.#ref) binding.streamRef(this.#id, false);
    // Read from the start, as a flowing terminal would be, until the buffer is full.
    this.#read(true);
    const p = this.#pending;
    if (p?.chunk) {
      this.#pending = null;
      this.#write(p.chunk, p.cb);
    }
  }

  // (0, chunk) read; (1, null | error) the end of reading: EIO or EOF (no
  // process holds the slave any more) is how a terminal ends, never an
  // 'error', and comes after everything the tree wrote was read (the
  // kernel flushes its queue before it reports EIO); (2, null | error) the
  // write the addon queued is in the terminal's input queue.
  #onEvent(kind: 0 | 1 | 2, value: Buffer | NativeErrorShape | null): void {
    if (this.#heldOutput && kind !== 2) {
      if (this.#heldOutput.keep(kind, value, this.readableHighWaterMark) && kind === 0) this.#read(false);
      if (kind === 1) this.#reading = false;
      return;
    }
    if (kind === 0) {
      if (!this.push(value)) this.#read(false);
    } else if (kind === 1) {
      this.#reading = false;
      this.#outputDone(value as Error | null);
    } else {
      const p = this.#pending;
      this.#pending = null;
      p?.cb(value as Error | null);
    }
  }

  /** @internal */
  [holdOutput](): void {
    this.#heldOutput ??= new OutputHold();
  }

  /** @internal */
  [releaseOutput](): void {
    const hold = this.#heldOutput;
    if (!hold) return;
    this.#heldOutput = null;
    hold.replay((kind, value) => this.#onEvent(kind, value));
  }

  #read(on: boolean): void {
    if (this.#reading === on || this.#master !== 'open' || this.#outputEnded) return;
    this.#reading = on;
    binding.streamRead(this.#id, on);
  }

  // The master closes: a hangup for whatever still holds the slave.
  #closeMaster(): void {
    if (this.#master !== 'open') return;
    this.#master = 'closed';
    this.#fd = -1;
    binding.streamClose(this.#id);
    const p = this.#pending;
    this.#pending = null;
    // Typing goes nowhere once nobody holds the terminal.
    p?.cb();
    this.#onChange();
    this.#maybeDone();
  }

  // Done ('close') once the output was read to its end and the master is
  // closed, in whichever order the two come.
  #maybeDone(): void {
    if (this.readableEnded && this.#master !== 'open' && !this.destroyed) this.destroy();
  }

  #outputDone(err: Error | null): void {
    if (this.#outputEnded) return;
    this.#outputEnded = true;
    if (err) this.destroy(err);
    else this.push(null);
    // The tree may already be gone (EIO after the empty event).
    if (!this.#hold) this.#closeMaster();
  }

  /** @internal */
  [flushPty](): void {
    if (this.readable) this.resume();
  }

  /** @internal */
  [ptyTreeEmpty](): void {
    this.#hold = false;
    if (this.#outputEnded) this.#closeMaster();
  }

  /** @internal */
  [releasePty](): void {
    this.#hold = false;
    if (this.#master === 'waiting') this.#master = 'closed';
    // Stop waiting for the end (a process outside the tree holds the
    // slave): what the terminal holds now is still read and delivered, then
    // the end and the master's close. Destroying would drop it, and a reader
    // that holds the stream paused has not read it yet; what was read waits
    // in the stream's buffer, and the stream ends once it is read.
    if (this.#master === 'open') {
      if (this.#outputEnded) this.#closeMaster();
      else binding.streamEnd(this.#id);
    } else if (!this.#outputEnded) {
      this.destroy();
    }
  }

  /** @internal */
  get [ptyPending](): boolean {
    return !this.#settled || this.#master === 'open';
  }

  /** @internal */
  [setPtyRef](ref: boolean): void {
    this.#ref = ref;
    if (this.#master === 'open') binding.streamRef(this.#id, ref);
  }

  override _read(): void {
    this.#read(true);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.#master === 'waiting') {
      // Typed before the start: written once the terminal exists.
      this.#pending = { chunk, cb };
      return;
    }
    this.#write(chunk, cb);
  }

  /** What was typed while a write was in flight (or corked), in one write. */
  override _writev(chunks: WrittenChunk[], cb: (err?: Error | null) => void): void {
    this._write(joinChunks(chunks), chunks[0].encoding, cb);
  }

  // The addon writes what the terminal's input queue takes now and the rest
  // when it has room (EPOLLOUT): no spinning on EAGAIN while the command
  // does not read.
  #write(chunk: Buffer, cb: (err?: Error | null) => void): void {
    if (this.#master !== 'open' || this.#outputEnded) {
      // Nobody holds the terminal: typing goes nowhere, as into a closed window.
      cb();
      return;
    }
    const r = binding.streamWrite(this.#id, chunk);
    if (r === false) cb();
    else if (r === true) this.#pending = { chunk: null, cb };
    else cb(r);
  }

  override _final(cb: (err?: Error | null) => void): void {
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.#hold = false;
    if (this.#master === 'waiting') this.#master = 'closed';
    this.#outputEnded = true;
    // A write still waiting is dropped with the stream, as Writable expects.
    this.#pending = null;
    this.#closeMaster();
    cb(err);
  }
}

// /dev/pts/N of a master: the kernel shows the slave's index in the
// master's fdinfo (Linux 4.18 and later; null before).
function ptsPath(fd: number): string | null {
  try {
    const info = fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
    const m = /^tty-index:\s*(\d+)$/m.exec(info);
    return m ? `/dev/pts/${m[1]}` : null;
  } catch {
    return null;
  }
}

/**
 * "No more input" on a terminal in canonical mode: the end-of-file
 * character (VEOF, ^D) at the start of a line — the counterpart of closing a
 * stdin pipe. After a partial line (`last` is not a newline) the first ^D
 * hands that line to the reader and the second is the EOF.
 */
export function typeEndOfInput(pty: PtyStream, last: number | undefined): void {
  pty.write(last === undefined || last === 0x0a || last === 0x0d ? '\x04' : '\x04\x04');
}

/** run()'s `input` on a terminal: typed, then the end of input. */
export function typeInput(pty: PtyStream, input: Buffer | undefined): void {
  if (input !== undefined && input.length > 0) pty.write(input);
  typeEndOfInput(pty, input !== undefined && input.length > 0 ? input[input.length - 1] : undefined);
}
