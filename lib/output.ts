// What a call wrote, as a model or a harness reads it: every chunk seen once,
// at the moment it arrives (stdout and stderr merged in that order), kept
// within a byte budget as head, tail or both without splitting a UTF-8
// character, streamed to callbacks and line iterators, and fed to a job's
// ring buffer. Nothing here changes the call's own streams: a stream nobody
// reads still pauses (and the command blocks on a full pipe) as with Node.
import type { AsyncResource } from 'node:async_hooks';
import type { Readable } from 'node:stream';
import { Readable as ReadableStream } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

import { type Keep, OutputCollector } from './collect';
import { invalidArgType, invalidArgValue } from './errors';
import { PipeStream, READ } from './pipe-stream';

// The bounded byte stores live in collect.ts; their importers keep importing them from here.
export { ByteTail, type Keep, type Kept, OutputCollector, utf8End, utf8Start } from './collect';

export type OutputStream = 'stdout' | 'stderr';

/** The output options of a call, validated (resolveOutput in options/index.ts). */
export interface OutputSettings {
  maxBuffer: number;
  /**
   * Bytes kept per stream until `done` is read (then `maxBuffer`): a call
   * whose output only streams past (a drop-in ChildProcess, a server) holds
   * little, and one whose `done` is read late still gets what fit, flagged.
   */
  unreadMax: number;
  keep: Keep;
  /** The text put where bytes were omitted, `{omitted}` replaced by their count; null = none. */
  marker: string | null;
  all: boolean;
  onOutput: ((chunk: Buffer, stream: OutputStream) => void) | undefined;
}

export const DEFAULT_MAX_BUFFER = 64 * 1024 * 1024;
/** What spawn() keeps per stream for `done` until it is read, unless `maxBuffer` was given. */
export const UNREAD_MAX_BUFFER = 1024 * 1024;
/** What `marker: true` inserts. */
export const DEFAULT_MARKER = '\n[... {omitted} bytes omitted ...]\n';

function isUtf8(encoding: BufferEncoding | 'buffer'): boolean {
  return encoding !== 'buffer' && /^utf-?8$/i.test(encoding);
}

/** The value of a kept stream: head, the marker where bytes are missing, tail. */
function keptValue(
  collector: OutputCollector,
  encoding: BufferEncoding | 'buffer',
  marker: string | null,
): { value: string | Buffer; omitted: number } {
  const { head, tail, omitted } = collector.kept(isUtf8(encoding));
  const parts = [head];
  if (omitted > 0 && marker !== null) parts.push(Buffer.from(marker.replace(/\{omitted\}/g, String(omitted))));
  parts.push(tail);
  const buf = Buffer.concat(parts);
  return { value: encoding === 'buffer' ? buf : buf.toString(encoding), omitted };
}

type Subscriber = (chunk: Buffer, stream: OutputStream) => void;

/** Options of CallOutput#lines(). */
export interface LinesOptions {
  /** Which output: `'stdout'` (the default), `'stderr'`, or `'all'` (both, each line whole, in arrival order). */
  stream?: OutputStream | 'all';
}

const readablePush = ReadableStream.prototype.push;
/**
 * Whom a tapped stream reports to: the call, which makes its CallOutput when
 * the first chunk (or the end) arrives, or a CallOutput. The call's stdio
 * (stdio.ts) reads the same property of its readable streams, to count their
 * 'close': one property on the stream for both, as each property added to a
 * stream after its construction costs every such stream. A stream that has
 * one keeps it.
 */
export const streamOwner = Symbol('proctree.streamOwner');
/** The method of an OutputOwner that makes (or returns) its CallOutput. @internal */
export const outputNow = Symbol('proctree.outputNow');
export interface OutputOwner {
  [outputNow](): CallOutput;
}
type Tapped = Readable & { [streamOwner]: CallOutput | OutputOwner };

/**
 * Taps a call's output streams from their first byte without making its
 * CallOutput yet: a live call that has written nothing holds none. The
 * owner makes it when something arrives (or somebody asks), from `sources`
 * as tapped here. Returns false when a stream cannot be tapped this way (a
 * push of its own): the CallOutput must then be made now.
 */
export function tapLater(sources: { stdout: Readable | null; stderr: Readable | null }, owner: OutputOwner): boolean {
  const { stdout, stderr } = sources;
  if ((stdout && !tappable(stdout)) || (stderr && stderr !== stdout && !tappable(stderr))) return false;
  for (const s of [stdout, stderr]) {
    // An OutputSocket is tapped from its birth, and reports to its call.
    if (!s || s.push === tappedPush) continue;
    (s as Tapped)[streamOwner] = owner;
    s.push = tappedPush;
  }
  return true;
}

/** Whether a stream's push is Readable's own (or tapped already), so that tappedPush can stand in for it. */
function tappable(s: Readable): boolean {
  return s.push === readablePush || s.push === tappedPush;
}

/**
 * Node's stream_base calls stream.push() once per read from the pipe: the
 * one place every chunk passes, whether anybody listens or not. One
 * function for every stream (the stream says whose it is), not a closure
 * per stream.
 */
function tappedPush(this: Tapped, chunk: unknown, encoding?: BufferEncoding): boolean {
  const target = this[streamOwner];
  const output = target instanceof CallOutput ? target : target[outputNow]();
  return output.pushed(this, readablePush, chunk, encoding);
}

/**
 * A call's stdout or stderr pipe: a PipeStream tapped from its birth, whose
 * call is a field of its own class and whose push is its prototype's, so
 * that neither is a property added to each socket (a live call holds two).
 * @internal
 */
export class OutputSocket extends PipeStream {
  [streamOwner]: CallOutput | OutputOwner;

  constructor(owner: OutputOwner, scope: AsyncResource) {
    super(READ, scope);
    this[streamOwner] = owner;
  }
}
Object.defineProperty(OutputSocket.prototype, 'push', { value: tappedPush, writable: true, configurable: true });

/**
 * The output of one call as it arrives. Each chunk of stdout and stderr is
 * seen where the stream receives it from the pipe (its push), before any
 * listener, in the order the harness read them: that is the order of
 * `all`, of `onOutput`, of lines(), and of a job's ring buffer.
 *
 * A live call holds little here until something arrives or is asked for:
 * the collectors are made with the first chunk (or the result), the
 * subscribers and end waiters with the first of them, and a stream's
 * 'close' is listened to only once somebody waits for the end.
 */
export class CallOutput {
  readonly #stdout: Readable | null;
  readonly #stderr: Readable | null;
  readonly #settings: OutputSettings;
  /** Copied on change, so a subscriber that unsubscribes while chunks are handed out misses nothing else. */
  #subscribers: Subscriber[] | null = null;
  /** Whether stdout (stderr) is still open: it has a stream that neither pushed its end nor closed. */
  #stdoutOpen: boolean;
  #stderrOpen: boolean;
  #endWaiters: Array<() => void> | null = null;
  #watchingClose = false;
  readonly #canResume: (s: Readable) => boolean;
  /** What is kept for the result; made with the first chunk. */
  #collectors: { stdout: OutputCollector; stderr: OutputCollector; all: OutputCollector | null } | null = null;
  /** False once the result was delivered. */
  #collecting = true;
  /** Bytes a collector keeps: `unreadMax` until the result is wanted, then `maxBuffer`. */
  #max: number;
  #allStream: ReadableStream | null = null;
  #alwaysFlow = false;

  /** Runs once, before the first chunk goes anywhere (the call's 'spawn' comes first). */
  #beforeFirst: (() => void) | null;

  /** `canResume`: whether reading a stream is ours to start (not one handed to another call as its stdio). */
  constructor(
    sources: { stdout: Readable | null; stderr: Readable | null },
    settings: OutputSettings,
    canResume: (s: Readable) => boolean,
    beforeFirst: (() => void) | null = null,
  ) {
    this.#settings = settings;
    this.#beforeFirst = beforeFirst;
    this.#canResume = canResume;
    this.#max = settings.unreadMax;
    this.#stdout = sources.stdout;
    // One stream for both (a terminal) is stdout, tapped once.
    this.#stderr = sources.stderr && sources.stderr !== sources.stdout ? sources.stderr : null;
    this.#stdoutOpen = this.#stdout !== null;
    this.#stderrOpen = this.#stderr !== null;
    if (this.#stdout) this.#tap(this.#stdout, 'stdout');
    if (this.#stderr) this.#tap(this.#stderr, 'stderr');
  }

  #source(name: OutputStream): Readable | null {
    return name === 'stdout' ? this.#stdout : this.#stderr;
  }

  #isOpen(name: OutputStream): boolean {
    if (name === 'stdout' ? !this.#stdoutOpen : !this.#stderrOpen) return false;
    // A stream destroyed before its end pushed nothing more: closed is ended.
    if ((this.#source(name) as Readable).closed) {
      this.#ended(name);
      return false;
    }
    return true;
  }

  #tap(stream: Readable, name: OutputStream): void {
    if (tappable(stream)) {
      // Tapped by tapLater() already, or now: this output from here on.
      // A stream that reports to its call already keeps it (the call's
      // stdio counts its 'close' through it), and the call answers with this.
      if ((stream as Partial<Tapped>)[streamOwner] === undefined) (stream as Tapped)[streamOwner] = this;
      if (stream.push !== tappedPush) stream.push = tappedPush;
      return;
    }
    // A stream with a push of its own: call that one.
    const push = stream.push;
    stream.push = (chunk: unknown, encoding?: BufferEncoding): boolean => this.pushed(stream, push, chunk, encoding, name);
  }

  /** A chunk (or the end) the stream receives. @internal */
  pushed(
    stream: Readable,
    push: (chunk: unknown, encoding?: BufferEncoding) => boolean,
    chunk: unknown,
    encoding: BufferEncoding | undefined,
    name: OutputStream = stream === this.#stdout ? 'stdout' : 'stderr',
  ): boolean {
    if (chunk === null) {
      this.#ended(name);
      return push.call(stream, chunk, encoding);
    }
    if (chunk === undefined || (chunk as { length: number }).length === 0) return push.call(stream, chunk, encoding);
    if (this.#beforeFirst !== null) {
      const before = this.#beforeFirst;
      this.#beforeFirst = null;
      before();
    }
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, encoding);
    this.#arrived(buf, name);
    const more = push.call(stream, chunk, encoding);
    // The user's callback last: if it throws, the chunk is already in the
    // stream, and the error surfaces as a throwing 'data' listener's would.
    this.#settings.onOutput?.(buf, name);
    return more;
  }

  #collectorsNow(): { stdout: OutputCollector; stderr: OutputCollector; all: OutputCollector | null } | null {
    if (this.#collectors || !this.#collecting) return this.#collectors;
    const max = this.#max;
    const { keep, all } = this.#settings;
    this.#collectors = {
      stdout: new OutputCollector(max, keep),
      stderr: new OutputCollector(max, keep),
      all: all ? new OutputCollector(max, keep) : null,
    };
    return this.#collectors;
  }

  #arrived(chunk: Buffer, name: OutputStream): void {
    const c = this.#collectorsNow();
    if (c) {
      c[name].write(chunk);
      c.all?.write(chunk);
    }
    const subscribers = this.#subscribers;
    if (subscribers) for (const fn of subscribers) fn(chunk, name);
  }

  #ended(name: OutputStream): void {
    if (name === 'stdout') {
      if (!this.#stdoutOpen) return;
      this.#stdoutOpen = false;
    } else {
      if (!this.#stderrOpen) return;
      this.#stderrOpen = false;
    }
    if (this.#stdoutOpen || this.#stderrOpen) return;
    const waiters = this.#endWaiters;
    this.#endWaiters = null;
    if (waiters) for (const fn of waiters) fn();
  }

  /** Whether every stream has ended (or there was none). */
  get ended(): boolean {
    const stdout = this.#isOpen('stdout');
    return !stdout && !this.#isOpen('stderr');
  }

  /** Calls `fn` once stdout and stderr have both ended (at once if they have). */
  onEnd(fn: () => void): void {
    if (this.ended) {
      fn();
      return;
    }
    (this.#endWaiters ??= []).push(fn);
    // A stream destroyed before its end (a holder outside the tree) ends with its 'close'.
    if (this.#watchingClose) return;
    this.#watchingClose = true;
    this.#stdout?.once('close', () => this.#ended('stdout'));
    this.#stderr?.once('close', () => this.#ended('stderr'));
  }

  /** Calls `fn` for every chunk from now on; returns the unsubscribe. */
  subscribe(fn: Subscriber): () => void {
    this.#subscribers = this.#subscribers ? [...this.#subscribers, fn] : [fn];
    return () => {
      const now = this.#subscribers;
      if (!now) return;
      const i = now.indexOf(fn);
      if (i < 0) return;
      this.#subscribers = now.length === 1 ? null : now.filter((_, j) => j !== i);
    };
  }

  /** The result's output fields as collected so far. */
  collected(encoding: BufferEncoding | 'buffer'): {
    stdout: string | Buffer;
    stderr: string | Buffer;
    all?: string | Buffer;
    stdoutOmitted: number;
    stderrOmitted: number;
    allOmitted?: number;
  } {
    const c = this.#collectorsNow();
    const marker = this.#settings.marker;
    const empty = encoding === 'buffer' ? Buffer.alloc(0) : '';
    if (!c) return { stdout: empty, stderr: empty, stdoutOmitted: 0, stderrOmitted: 0 };
    const out = keptValue(c.stdout, encoding, marker);
    const err = keptValue(c.stderr, encoding, marker);
    const result = { stdout: out.value, stderr: err.value, stdoutOmitted: out.omitted, stderrOmitted: err.omitted };
    if (!c.all) return result;
    const all = keptValue(c.all, encoding, marker);
    return { ...result, all: all.value, allOmitted: all.omitted };
  }

  /** Somebody reads the result: keep up to `maxBuffer` from now on. */
  resultWanted(): void {
    this.#max = this.#settings.maxBuffer;
    const c = this.#collectors;
    if (!c) return;
    for (const collector of [c.stdout, c.stderr, c.all]) collector?.grow(this.#settings.maxBuffer);
  }

  /** The result was delivered: what arrives later is not kept for it. */
  stopCollecting(): void {
    this.#collecting = false;
    this.#collectors = null;
  }

  /**
   * From now on output flows whoever reads: the call is a job, whose output
   * goes to its ring buffer; `call.all` never holds the command back.
   */
  flowAlways(): void {
    this.#alwaysFlow = true;
    this.#resume(['stdout', 'stderr']);
    this.#allStream?.resume();
  }

  #resume(names: readonly OutputStream[]): void {
    for (const n of names) {
      const s = this.#source(n);
      if (s && s.readable && this.#canResume(s)) s.resume();
    }
  }

  /**
   * stdout and stderr merged in arrival order, as a stream (execa's `all`).
   * Made on first use, from then on; reading it reads both streams. Until
   * the call is a job, a full `all` pauses them, as a pipe to two places would.
   */
  allStream(): ReadableStream {
    if (this.#allStream) return this.#allStream;
    const paused = new Set<Readable>();
    const stream = new ReadableStream({
      read: () => {
        for (const s of paused) s.resume();
        paused.clear();
      },
    });
    this.#allStream = stream;
    this.subscribe((chunk) => {
      if (stream.push(chunk) || this.#alwaysFlow) return;
      for (const s of [this.#stdout, this.#stderr]) {
        if (s && !s.isPaused()) {
          s.pause();
          paused.add(s);
        }
      }
    });
    this.onEnd(() => stream.push(null));
    this.#resume(['stdout', 'stderr']);
    return stream;
  }

  /**
   * The lines of stdout (or stderr, or both) from now on, without their
   * `\n` (or `\r\n`); the last one even without a newline. Ends when the
   * streams end. Reading lines reads the streams (as readline does); lines
   * wait in memory for a slow consumer.
   */
  lines(options: LinesOptions = {}): AsyncIterableIterator<string> {
    if (options === null || typeof options !== 'object') throw invalidArgType('options', 'Object', options);
    const which = options.stream ?? 'stdout';
    // An unknown name would match no stream and end at once, silently.
    if (which !== 'stdout' && which !== 'stderr' && which !== 'all') {
      throw invalidArgValue('options.stream', which, "must be one of: 'stdout', 'stderr', 'all'");
    }
    const names = (which === 'all' ? ['stdout', 'stderr'] : [which]).filter((n) => this.#source(n as OutputStream)) as OutputStream[];
    const queue: string[] = [];
    let head = 0;
    const openNames = new Set(names.filter((n) => this.#isOpen(n)));
    let finished = openNames.size === 0;
    const waiting: Array<() => void> = [];
    const wake = (): void => {
      for (const fn of waiting.splice(0)) fn();
    };
    const decoders = new Map(names.map((n) => [n, new StringDecoder('utf8')]));
    const partial = new Map<OutputStream, string>(names.map((n) => [n, '']));
    const take = (name: OutputStream, text: string, last: boolean): void => {
      let start = 0;
      for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
        const end = nl > start && text.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
        queue.push(text.slice(start, end));
        start = nl + 1;
      }
      const rest = text.slice(start);
      if (last && rest !== '') queue.push(rest);
      partial.set(name, last ? '' : rest);
    };
    const unsubscribe = this.subscribe((chunk, name) => {
      const decoder = decoders.get(name);
      if (!decoder) return;
      take(name, (partial.get(name) ?? '') + decoder.write(chunk), false);
      wake();
    });
    const onStreamEnd = (name: OutputStream): void => {
      if (!openNames.delete(name)) return;
      take(name, (partial.get(name) ?? '') + (decoders.get(name)?.end() ?? ''), true);
      if (openNames.size === 0) {
        finished = true;
        unsubscribe();
      }
      wake();
    };
    for (const n of openNames) {
      const s = this.#source(n) as Readable;
      // 'close' comes after the last push: every chunk was taken by then.
      s.once('close', () => onStreamEnd(n));
    }
    if (finished) unsubscribe();
    this.#resume(names);
    const iterator: AsyncIterableIterator<string> = {
      next: async (): Promise<IteratorResult<string>> => {
        while (head >= queue.length && !finished) {
          await new Promise<void>((resolve) => waiting.push(resolve));
        }
        if (head < queue.length) {
          const value = queue[head++];
          if (head > 1024 && head * 2 > queue.length) {
            queue.splice(0, head);
            head = 0;
          }
          return { value, done: false };
        }
        return { value: undefined, done: true };
      },
      return: async (): Promise<IteratorResult<string>> => {
        finished = true;
        unsubscribe();
        queue.length = 0;
        head = 0;
        wake();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() {
        return iterator;
      },
    };
    return iterator;
  }
}
