// The session of `proctree serve`: reads request lines from the client and
// answers each, writes the calls' events, and applies the backpressure of
// our stdout (a call that floods waits for 'drain'; over the operator's
// limit no further request is read). When the client goes away (stdin
// closes, or stdout breaks), every call is terminated and the server stops.
import type { Readable, Writable } from 'node:stream';

import { capabilities } from '../capabilities';
import { proctreeError as fail } from '../errors';
import { DEFAULT_MAX_BUFFER } from '../output';
import { packageVersion } from './args';
import { type Event, PROTOCOL_VERSION, ProtocolViolation, type Request, RequestValidator, type Response } from './protocol';
import { CallTable } from './serve-calls';
import type { OutputFlow } from './serve-flow';
import { jobRequest } from './serve-jobs';
import { type Answer, errorOf } from './serve-request';

/** What the operator bounds (serve's flags and environment). */
export interface ServerLimits {
  /** The most a client may ask as maxBuffer (a collected stream) or jobBuffer (a job's ring). */
  maxBuffer: number;
  /** Bytes waiting on our stdout past which no further request is read until it drains. */
  maxQueued: number;
}

export const DEFAULT_LIMITS: Readonly<ServerLimits> = { maxBuffer: DEFAULT_MAX_BUFFER, maxQueued: 1024 * 1024 };

/** Longest request line accepted (in characters; JSON lines are mostly ASCII). A write of 8 MiB fits in base64. */
const MAX_LINE = 16 * 1024 * 1024;

/** Requests that start or change nothing: still answered while every call is being stopped. */
const READ_ONLY = new Set<Request['op']>(['list', 'capabilities', 'jobs', 'jobRead', 'jobTail', 'jobWait', 'foreground', 'ports', 'jobPorts']);

export interface ServerIo {
  input: Readable;
  output: Writable;
}

export class ProtocolServer {
  readonly #io: ServerIo;
  readonly #validator: RequestValidator;
  readonly #calls: CallTable;
  /** The start of a line whose newline has not come yet. */
  #pending = '';
  #discarding = false;
  /** Lines read but not handled yet (from #next on): they wait here while our stdout is over the limit. */
  #lines: string[] = [];
  #next = 0;
  /** Reading requests is paused until our stdout drains below the limit. */
  #readingHeld = false;
  /** Our stdout went over the limit and has not drained yet: collected calls are held. */
  #full = false;
  readonly #limits: ServerLimits;
  #clientGone = false;
  #stopping: Promise<number> | null = null;
  readonly #stoppedWaiters: (() => void)[] = [];
  readonly #onStopped: (status: number) => void;
  /** Calls whose output waits for our stdout's 'drain'. */
  readonly #waitingForDrain = new Set<OutputFlow>();

  constructor(io: ServerIo, onStopped: (status: number) => void, limits: Partial<ServerLimits> = {}) {
    this.#io = io;
    this.#limits = { ...DEFAULT_LIMITS, ...limits };
    this.#onStopped = onStopped;
    this.#validator = new RequestValidator();
    this.#calls = new CallTable(
      {
        send: (event) => this.#send(event),
        sendOutput: (flow, event) => this.#sendOutput(flow, event),
        full: () => this.#full,
        closed: (flow) => void this.#waitingForDrain.delete(flow),
      },
      this.#limits.maxBuffer,
    );
  }

  start(): void {
    const { input, output } = this.#io;
    // A character split across two reads must not turn into garbage.
    input.setEncoding('utf8');
    input.on('data', (chunk: Buffer | string) => this.#onData(chunk.toString()));
    // The client's end closed: it exited or crashed. Stop everything it started.
    input.on('end', () => void this.#stopAll(undefined));
    input.on('error', () => void this.#stopAll(undefined));
    output.on('drain', () => {
      for (const flow of this.#waitingForDrain) {
        flow.waitingForDrain = false;
        flow.apply();
      }
      this.#waitingForDrain.clear();
      if (this.#full) {
        this.#full = false;
        this.#applyAll();
      }
      if (this.#readingHeld) this.#pump();
    });
    output.on('error', () => {
      // EPIPE: nobody reads us any more. Same as a closed stdin.
      this.#clientGone = true;
      // Nothing is sent any more: let every pipe run to its end so the
      // calls can close.
      for (const flow of this.#calls.flows()) {
        flow.clientPaused = false;
        flow.waitingForDrain = false;
        flow.apply();
      }
      this.#waitingForDrain.clear();
      this.#full = false;
      this.#applyAll();
      if (this.#readingHeld) this.#pump();
      void this.#stopAll(undefined);
    });
  }

  /** Stops every call (terminate, then wait for each to close) and exits. */
  stop(): Promise<number> {
    return this.#stopAll(undefined);
  }

  /** Writes one line; false when our stdout's buffer is full (wait for 'drain'). */
  #send(msg: Response | Event): boolean {
    if (this.#clientGone) return true;
    const room = this.#io.output.write(`${JSON.stringify(msg)}\n`);
    if (!this.#full && this.#overQueued) {
      this.#full = true;
      this.#applyAll();
    }
    return room;
  }

  #applyAll(): void {
    for (const flow of this.#calls.flows()) flow.apply();
  }

  /**
   * One chunk of a call's output. When our stdout is full, stop reading the
   * pipes of the call that wrote it until 'drain': only the calls that flood
   * wait, the others' events keep going out.
   */
  #sendOutput(flow: OutputFlow, event: Event): void {
    if (this.#send(event) || this.#clientGone) {
      flow.reassert();
      return;
    }
    flow.waitingForDrain = true;
    this.#waitingForDrain.add(flow);
    flow.apply();
  }

  #onData(text: string): void {
    // Only the new text is searched for newlines: a long line arriving in
    // many reads is appended to, never scanned again.
    let start = 0;
    for (;;) {
      const nl = text.indexOf('\n', start);
      if (nl < 0) break;
      const piece = text.slice(start, nl);
      start = nl + 1;
      if (this.#discarding) {
        this.#discarding = false;
        this.#pending = '';
        continue;
      }
      this.#lines.push(this.#pending + piece);
      this.#pending = '';
    }
    if (!this.#discarding) {
      this.#pending += text.slice(start);
      if (this.#pending.length > MAX_LINE) {
        // Answer now and drop the rest of the line when its newline comes.
        this.#pending = '';
        this.#discarding = true;
        this.#send({ rid: null, ok: false, error: { code: 'ERR_PROCTREE_LINE_TOO_LONG', message: 'request line longer than 16 MiB' } });
      }
    }
    this.#pump();
  }

  /**
   * Whether more than the operator allows waits on our stdout. Answers and
   * the events other than output (a collected result is one line) have no
   * pipe to hold back: the requests that make them are what waits.
   */
  get #overQueued(): boolean {
    return !this.#clientGone && this.#io.output.writableLength > this.#limits.maxQueued;
  }

  /** Handles the lines read, until our stdout is over the limit; reading pauses until it drains. */
  #pump(): void {
    while (this.#next < this.#lines.length && !this.#overQueued) {
      const line = this.#lines[this.#next];
      this.#next += 1;
      this.#onLine(line);
    }
    if (this.#next === this.#lines.length) {
      this.#lines = [];
      this.#next = 0;
    }
    if (this.#overQueued) {
      if (!this.#readingHeld) this.#io.input.pause();
      this.#readingHeld = true;
    } else if (this.#readingHeld) {
      this.#readingHeld = false;
      this.#io.input.resume();
    }
  }

  #onLine(raw: string): void {
    const line = raw.trim();
    if (line === '') return;
    let req: Request;
    try {
      req = this.#validator.parse(line);
    } catch (err) {
      if (err instanceof ProtocolViolation) this.#send({ rid: err.rid, ok: false, error: { code: err.code, message: err.message } });
      else this.#send({ rid: null, ok: false, error: errorOf(err) });
      return;
    }
    const ok = (result: Record<string, unknown>): void => void this.#send({ rid: req.rid, ok: true, ...result });
    const failed = (err: unknown): void => void this.#send({ rid: req.rid, ok: false, error: errorOf(err) });
    let result: Answer;
    try {
      result = this.#handle(req);
    } catch (err) {
      failed(err);
      return;
    }
    // Answer what is done now at once, so a spawn's answer (with its pid)
    // precedes the call's events; terminate and shutdown answer later.
    if (result instanceof Promise) result.then(ok, failed);
    else ok(result);
  }

  #handle(req: Request): Answer {
    if (this.#stopping && !READ_ONLY.has(req.op)) {
      throw fail('ERR_PROCTREE_SHUTTING_DOWN', 'the server is stopping every call and takes no new work');
    }
    switch (req.op) {
      case 'spawn':
        return this.#calls.spawn(req);
      case 'jobs':
      case 'jobPorts':
      case 'jobRead':
      case 'jobTail':
      case 'jobStop':
      case 'jobWait':
      case 'jobPause':
      case 'jobResume':
        return jobRequest(req);
      case 'capabilities':
        return { protocol: PROTOCOL_VERSION, version: packageVersion(), capabilities: capabilities() };
      case 'shutdown': {
        const open = this.#calls.size;
        const stopped = this.#stopped();
        this.#stopAll(req.grace).catch(() => {});
        // Answered when every call is closed; the server then exits.
        return stopped.then(() => ({ stopped: open }));
      }
      default:
        return this.#calls.request(req);
    }
  }

  #stopped(): Promise<void> {
    return new Promise((resolve) => this.#stoppedWaiters.push(resolve));
  }

  #stopAll(grace: number | undefined): Promise<number> {
    if (this.#stopping) return this.#stopping;
    this.#stopping = (async () => {
      await this.#calls.terminateAll(grace);
      for (const w of this.#stoppedWaiters.splice(0)) w();
      return this.#calls.leftoversSeen ? 1 : 0;
    })();
    this.#stopping.then(
      (status) => {
        // Let the shutdown answer (sent by the waiters above) go out first.
        setImmediate(() => this.#onStopped(status));
      },
      () => this.#onStopped(1),
    );
    return this.#stopping;
  }
}
