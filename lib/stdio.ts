// A call's stdio: the pipes made for it, our ends as streams, and the
// collection of what a call wrote (run() and `done`).
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';

import { native, type NativeStdio } from './native';

/**
 * The pipes of one call. They exist from the start, so a queued call already
 * has its streams; the child's ends are handed over when it starts.
 */
export class CallStdio {
  readonly stdin: Writable | null = null;
  readonly stdout: Readable | null = null;
  readonly stderr: Readable | null = null;
  /** What the child gets as fds 0-2: our pipe ends for 'pipe', the kind otherwise. */
  readonly forChild: [NativeStdio, NativeStdio, NativeStdio];
  #childEnds: number[] = [];
  #openReadable = 0;
  readonly #onDrained: () => void;

  /** `onDrained` runs each time the last open readable stream closes. */
  constructor(kinds: readonly [NativeStdio, NativeStdio, NativeStdio], onDrained: () => void) {
    this.#onDrained = onDrained;
    this.forChild = kinds.map((kind, i): NativeStdio => {
      if (kind !== 'pipe') return kind;
      const [readFd, writeFd] = native.pipe();
      const [ours, theirs] = i === 0 ? [writeFd, readFd] : [readFd, writeFd];
      this.#childEnds.push(theirs);
      const sock = this.#socket(ours, i !== 0);
      if (i === 0) (this as { stdin: Writable | null }).stdin = sock;
      else if (i === 1) (this as { stdout: Readable | null }).stdout = sock;
      else (this as { stderr: Readable | null }).stderr = sock;
      return theirs;
    }) as [NativeStdio, NativeStdio, NativeStdio];
  }

  /** Readable streams not yet closed: 'close' of the call waits for them. */
  get openReadable(): number {
    return this.#openReadable;
  }

  /** The child holds its own copies once it started (or never will): ours would keep the pipes open. */
  closeChildEnds(): void {
    for (const fd of this.#childEnds) native.closeFd(fd);
    this.#childEnds = [];
  }

  /** The call never ran: every stream ends. */
  destroy(): void {
    this.closeChildEnds();
    this.stdin?.destroy();
    this.stdout?.destroy();
    this.stderr?.destroy();
  }

  setRef(ref: boolean): void {
    for (const s of [this.stdin, this.stdout, this.stderr] as Array<net.Socket | null>) {
      if (ref) s?.ref();
      else s?.unref();
    }
  }

  #socket(fd: number, readable: boolean): net.Socket {
    const sock = new net.Socket({ fd, readable, writable: !readable, allowHalfOpen: true });
    if (!readable) {
      // EPIPE once the command is gone is not fatal, as with ChildProcess;
      // like ChildProcess, 'close' does not wait for stdin.
      sock.on('error', () => {});
      return sock;
    }
    this.#openReadable += 1;
    sock.once('close', () => {
      this.#openReadable -= 1;
      this.#onDrained();
    });
    return sock;
  }
}

/** Keeps the first `max` bytes a stream produced, and whether there was more. */
export class Collector {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(
    stream: Readable | null,
    private readonly max: number,
  ) {
    // Keep reading past the limit: a writer blocked on a full pipe would
    // never exit.
    stream?.on('data', (chunk: Buffer) => {
      if (this.size >= this.max) {
        if (chunk.length > 0) this.truncated = true;
        return;
      }
      const room = this.max - this.size;
      if (chunk.length > room) {
        this.truncated = true;
        chunk = chunk.subarray(0, room);
      }
      this.chunks.push(chunk);
      this.size += chunk.length;
    });
  }

  value(encoding: BufferEncoding | 'buffer'): string | Buffer {
    const buf = Buffer.concat(this.chunks, this.size);
    return encoding === 'buffer' ? buf : buf.toString(encoding);
  }
}
