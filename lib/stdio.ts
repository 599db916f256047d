// A call's stdio: the pipes made for it and our ends as streams. What the
// call wrote is collected in output.ts.
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';

import { native, type NativeStdio } from './native';
import type { StdioEntry } from './options';

/**
 * Streams handed to a call as its stdio (another call's stdout as this one's
 * stdin, as Node's 'wrap' entries): we stop reading them, and no flush at
 * exit resumes them, or we would steal the child's input.
 */
const usedAsStdio = new WeakSet<object>();

/**
 * The pipes of one call. They exist from the start, so a queued call already
 * has its streams; the child's ends are handed over when it starts.
 */
export class CallStdio {
  readonly stdin: Writable | null = null;
  readonly stdout: Readable | null = null;
  readonly stderr: Readable | null = null;
  /** As ChildProcess#stdio: our stream for each 'pipe' entry, null for the others. */
  readonly streams: Array<Readable | Writable | null>;
  /** What the child gets at each fd: our pipe ends for 'pipe', the kind or fd otherwise. */
  readonly forChild: NativeStdio[];
  #childEnds: number[] = [];
  readonly #readables = new Set<net.Socket>();
  readonly #onDrained: () => void;

  /**
   * `onDrained` runs each time the last open readable stream closes. Throws
   * (EMFILE…) only after closing every pipe it had made: all or nothing.
   */
  constructor(entries: readonly StdioEntry[], onDrained: () => void) {
    this.#onDrained = onDrained;
    this.streams = [];
    this.forChild = [];
    try {
      for (const [i, entry] of entries.entries()) {
        if (entry.kind !== 'pipe') {
          this.streams.push(null);
          this.forChild.push(entry.kind === 'fd' ? entry.fd : entry.kind);
          continue;
        }
        const [readFd, writeFd] = native.pipe();
        // The child reads fd 0 and writes every other pipe (stdout, stderr, 3, 4, …).
        const [ours, theirs] = i === 0 ? [writeFd, readFd] : [readFd, writeFd];
        this.#childEnds.push(theirs);
        this.forChild.push(theirs);
        try {
          this.streams.push(this.#socket(ours, i !== 0));
        } catch (err) {
          native.closeFd(ours);
          throw err;
        }
      }
    } catch (err) {
      this.destroy();
      throw err;
    }
    this.stdin = (this.streams[0] as Writable | null) ?? null;
    this.stdout = (this.streams[1] as Readable | null) ?? null;
    this.stderr = (this.streams[2] as Readable | null) ?? null;
    // Streams given as entries are the child's now: stop reading them.
    for (const entry of entries) if (entry.kind === 'fd' && entry.stream) stopReading(entry.stream);
  }

  /** Readable streams not yet closed: 'close' of the call waits for them. */
  get openReadable(): number {
    return this.#readables.size;
  }

  /** The child holds its own copies once it started (or never will): ours would keep the pipes open. */
  closeChildEnds(): void {
    for (const fd of this.#childEnds) native.closeFd(fd);
    this.#childEnds = [];
  }

  /**
   * Node's flushStdio: a readable stream nobody consumes is resumed, so it
   * reaches EOF and 'close' can come.
   */
  flush(): void {
    for (const s of this.#readables) {
      if (s.readable && !usedAsStdio.has(s)) s.resume();
    }
  }

  /** Closes our ends of the readable pipes still open (a holder outside the tree keeps them from EOF). */
  releaseReadable(): void {
    for (const s of [...this.#readables]) s.destroy();
  }

  /** The call never ran: every stream ends. */
  destroy(): void {
    this.closeChildEnds();
    for (const s of this.streams) s?.destroy();
  }

  setRef(ref: boolean): void {
    for (const s of this.streams as Array<net.Socket | null>) {
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
    this.#readables.add(sock);
    sock.once('close', () => {
      this.#readables.delete(sock);
      this.#onDrained();
    });
    return sock;
  }
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
