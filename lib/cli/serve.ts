// `proctree serve`: the API over JSON lines on stdin/stdout, for harnesses
// written in other languages. Each request maps onto one API call; nothing
// here stops processes by itself. When the client goes away (stdin closes, or
// stdout breaks), every call is terminated and the server exits: a harness
// that crashed leaves nothing behind — its jobs included. Output has
// backpressure: a client that reads slowly slows the calls that flood, never
// the server's memory; and while more than the operator's limit waits on
// our stdout (answers, events, collected results), no further request is
// read, so nothing else piles up either. What a client may ask to be kept
// (maxBuffer, jobBuffer) is bounded by the operator too.
import type { Readable, Writable } from 'node:stream';

import { capabilities } from '../capabilities';
import { invalidArgValue, outOfRange, proctreeError as fail } from '../errors';
import { DEFAULT_MAX_BUFFER } from '../output';
import { noTerminal, typeEndOfInput } from '../pty';
import { spawn } from '../default-supervisor';
import { job, jobs } from '../supervisor';
import { afterPipesPolled, jobOutcome, resultEncoding, settledResult } from '../call/state';
import type { ToolCall } from '../toolcall';
import type { CleanupReport, ReadyOptions, RunResult, SpawnOptions } from '../types';
import { packageVersion, parseFlags, parseSize, UsageError } from './args';
import {
  type CollectedOutput,
  type Event,
  PROTOCOL_VERSION,
  type ProtocolError,
  ProtocolViolation,
  type ReadyRequestOptions,
  type Request,
  RequestValidator,
  type Response,
} from './protocol';

export const serveHelp = `Usage: proctree serve [--max-buffer SIZE] [--max-queued SIZE]

Speaks the JSON-lines protocol of docs/protocol.md on stdin/stdout: one
request per line in, one response per request and the calls' events out.
When stdin closes, every call is stopped and the server exits.

Options:
  --max-buffer SIZE  the most a client may ask as a call's maxBuffer or
                     jobBuffer (default 64MiB; env PROCTREE_SERVE_MAX_BUFFER)
  --max-queued SIZE  stop reading requests while more than this waits on
                     stdout for the client (default 1MiB, at least 64k;
                     env PROCTREE_SERVE_MAX_QUEUED)
  -h, --help         show this help
`;

/** What the operator bounds (serve's flags and environment). */
export interface ServerLimits {
  /** The most a client may ask as maxBuffer (a collected stream) or jobBuffer (a job's ring). */
  maxBuffer: number;
  /** Bytes waiting on our stdout past which no further request is read until it drains. */
  maxQueued: number;
}

export const DEFAULT_LIMITS: Readonly<ServerLimits> = { maxBuffer: DEFAULT_MAX_BUFFER, maxQueued: 1024 * 1024 };
/**
 * The smallest --max-queued: above a stream's high-water mark (16 KiB), so
 * that being over it means a write returned false and 'drain' will come.
 */
const MIN_QUEUED = 64 * 1024;

/** Longest request line accepted (in characters; JSON lines are mostly ASCII). A write of 8 MiB fits in base64. */
const MAX_LINE = 16 * 1024 * 1024;

type Result = Record<string, unknown> | Promise<Record<string, unknown>>;

interface LiveCall {
  call: ToolCall;
  startedAt: number;
  report: CleanupReport | null;
  closed: Promise<void>;
  flow: OutputFlow;
  /** The job event went out (the call's output is the job's from then on). */
  jobSent: boolean;
  /** The close event went out: nothing of the call may follow it. */
  closeSent: boolean;
  /** The last byte typed on the call's terminal (undefined: at the start of a line), for closeStdin's ^D. */
  lastTyped: number | undefined;
}

/** Requests that start or change nothing: still answered while every call is being stopped. */
/** The protocol's options.ready as the API's: outputPattern becomes a RegExp. */
function readyOptions(r: ReadyRequestOptions): ReadyOptions {
  if (r.output !== undefined && r.outputPattern !== undefined) {
    throw invalidArgValue('options.ready.outputPattern', r.outputPattern, 'cannot be given with options.ready.output');
  }
  let output: string | RegExp | undefined = r.output;
  if (r.outputPattern !== undefined) {
    try {
      output = new RegExp(r.outputPattern);
    } catch (err) {
      throw invalidArgValue('options.ready.outputPattern', r.outputPattern, `is not a regular expression (${(err as Error).message})`);
    }
  }
  return { ...(r.listening !== undefined ? { listening: r.listening } : {}), ...(output !== undefined ? { output } : {}), ...(r.timeout !== undefined ? { timeout: r.timeout } : {}) };
}

const READ_ONLY = new Set<Request['op']>(['list', 'capabilities', 'jobs', 'jobRead', 'jobTail', 'jobWait', 'foreground', 'ports', 'jobPorts']);

/**
 * The result of a call spawned with `collect`, as the protocol carries it:
 * the library collected it as run() does (maxBuffer bytes a stream, head,
 * tail or both, never cutting a character in text) in bytes or UTF-8 text,
 * and bytes go as base64.
 */
function collectedOutput(r: RunResult<string | Buffer>): CollectedOutput {
  const wire = (v: string | Buffer): string => (typeof v === 'string' ? v : v.toString('base64'));
  const out: CollectedOutput = { stdout: wire(r.stdout), stderr: wire(r.stderr), stdoutOmitted: r.stdoutOmitted, stderrOmitted: r.stderrOmitted };
  if (r.all !== undefined) {
    out.all = wire(r.all);
    out.allOmitted = r.allOmitted ?? 0;
  }
  return out;
}

/** The options that shape a collected result: refused without `collect`. */
const COLLECT_OPTIONS = ['maxBuffer', 'keep', 'marker', 'all', 'encoding'] as const;

/**
 * Whether the server reads a call's stdout and stderr pipes. Not reading
 * them is the backpressure: the pipe fills and the command blocks in write(),
 * as it would under a shell pipeline, so nothing is lost and nothing piles up.
 */
class OutputFlow {
  /** The client asked (`pause`): it buffers this call's output itself. */
  clientPaused = false;
  /** Our stdout was full when this call's output was written: until 'drain'. */
  waitingForDrain = false;
  /**
   * The tree is empty: what is left in the pipes is bounded by their size,
   * and 'close' waits for it, so a client's pause no longer holds.
   */
  treeEmpty = false;
  /** The spawn is not answered yet (a shim's start is pending): output waits for the answer. */
  starting = false;
  /**
   * The output goes out as events. Not with `collect`, and not once the call
   * is a job: then it flows to the result or to the job's ring buffer
   * whoever reads, and no pause holds it.
   */
  events = true;
  /**
   * Its output goes to a collected result, sent in one line at the end:
   * while the server's stdout is over the operator's limit it is held too,
   * so results that nobody reads yet stop growing.
   */
  collecting = false;

  constructor(
    private readonly streams: Readable[],
    private readonly serverFull: () => boolean,
  ) {}

  get hold(): boolean {
    if (this.collecting) return this.serverFull() && !this.treeEmpty;
    return this.events && (this.starting || this.waitingForDrain || (this.clientPaused && !this.treeEmpty));
  }

  apply(): void {
    const hold = this.hold;
    for (const s of this.streams) {
      if (hold) s.pause();
      else s.resume();
    }
  }

  /**
   * A chunk came while the output should be held: the library resumed the
   * streams (Node's flushStdio at exit, as ChildProcess does). Hold them again.
   */
  reassert(): void {
    if (this.hold) this.apply();
  }
}

function errorOf(err: unknown): ProtocolError {
  const e = err as Error & { code?: unknown; leftovers?: unknown };
  const out: ProtocolError = {
    code: typeof e?.code === 'string' ? e.code : 'ERR_PROCTREE_INTERNAL',
    message: typeof e?.message === 'string' ? e.message : String(err),
  };
  if (Array.isArray(e?.leftovers)) out.leftovers = e.leftovers as ProtocolError['leftovers'];
  return out;
}

export interface ServerIo {
  input: Readable;
  output: Writable;
}

export class ProtocolServer {
  readonly #io: ServerIo;
  readonly #validator: RequestValidator;
  readonly #calls = new Map<string, LiveCall>();
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
  #leftoversSeen = false;
  readonly #stoppedWaiters: (() => void)[] = [];
  readonly #onStopped: (status: number) => void;
  /** Calls whose output waits for our stdout's 'drain'. */
  readonly #waitingForDrain = new Set<OutputFlow>();

  constructor(io: ServerIo, onStopped: (status: number) => void, limits: Partial<ServerLimits> = {}) {
    this.#io = io;
    this.#limits = { ...DEFAULT_LIMITS, ...limits };
    this.#onStopped = onStopped;
    this.#validator = new RequestValidator();
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
      for (const live of this.#calls.values()) {
        live.flow.clientPaused = false;
        live.flow.waitingForDrain = false;
        live.flow.apply();
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
    for (const live of this.#calls.values()) live.flow.apply();
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
    let result: Result;
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

  #live(id: string): LiveCall {
    const live = this.#calls.get(id);
    if (!live) throw fail('ERR_PROCTREE_UNKNOWN_CALL', `no open call with id '${id}'`);
    return live;
  }

  #handle(req: Request): Result {
    if (this.#stopping && !READ_ONLY.has(req.op)) {
      throw fail('ERR_PROCTREE_SHUTTING_DOWN', 'the server is stopping every call and takes no new work');
    }
    switch (req.op) {
      case 'spawn':
        return this.#spawn(req);
      case 'write': {
        const live = this.#live(req.id);
        // On a terminal, writing is typing.
        const input = live.call.pty ?? live.call.stdin;
        if (!input) throw fail('ERR_PROCTREE_NO_STDIN', `call '${req.id}' has no stdin pipe: spawn it with options.stdin 'pipe' (or options.pty)`);
        if (input.writableEnded || input.destroyed) throw fail('ERR_PROCTREE_STDIN_CLOSED', `the stdin of call '${req.id}' is closed`);
        const data = Buffer.from(req.data, 'base64');
        if (live.call.pty && data.length > 0) live.lastTyped = data[data.length - 1];
        // Answer once the data is with the kernel: the client's flow control.
        return new Promise((resolve, reject) => {
          input.write(data, (err) => (err ? reject(err) : resolve({})));
        });
      }
      case 'closeStdin': {
        const live = this.#live(req.id);
        const pty = live.call.pty;
        if (pty) {
          // A terminal has no end to close: the end-of-file character at the
          // start of a line is what makes its reader see end of input, and
          // typing goes on working after it.
          if (pty.writable) typeEndOfInput(pty, live.lastTyped);
          live.lastTyped = undefined;
          return {};
        }
        const stdin = live.call.stdin;
        if (!stdin) throw fail('ERR_PROCTREE_NO_STDIN', `call '${req.id}' has no stdin pipe`);
        stdin.end();
        return {};
      }
      case 'resize':
        this.#live(req.id).call.resize(req.cols, req.rows);
        return {};
      case 'foreground': {
        const pty = this.#live(req.id).call.pty;
        if (!pty) throw noTerminal();
        return { process: pty.foreground() };
      }
      case 'jobs':
        // Each with what its tree listens on now (asked of all at once, off the JS thread).
        return Promise.all(
          jobs().map(async (info) => {
            const ports = await job(info.id).ports();
            return { ...info, listeners: ports, listenersAt: Date.now(), ports };
          }),
        ).then((list) => ({ jobs: list }));
      case 'ports':
        return this.#live(req.id)
          .call.ports()
          .then((ports) => ({ ports }));
      case 'jobPorts':
        return job(req.job)
          .ports()
          .then((ports) => ({ ports }));
      case 'jobRead':
        return { ...job(req.job).read(req.from ?? 0, req.maxBytes === undefined ? {} : { maxBytes: req.maxBytes }) };
      case 'jobTail':
        return { ...job(req.job).tail(req.bytes) };
      case 'jobStop':
        return job(req.job)
          .stop(req.grace === undefined ? {} : { grace: req.grace })
          .then((report) => ({ report }));
      case 'jobWait':
        return job(req.job)
          .wait()
          .then((info) => ({ job: info }));
      case 'kill':
        return { delivered: this.#live(req.id).call.kill(req.signal ?? 'SIGTERM') };
      case 'terminate': {
        const call = this.#live(req.id).call;
        return call.terminate(req.grace === undefined ? {} : { grace: req.grace }).then((report) => ({ report }));
      }
      case 'pause':
      case 'resume': {
        const { flow } = this.#live(req.id);
        flow.clientPaused = req.op === 'pause';
        flow.apply();
        return {};
      }
      case 'pauseTree':
      case 'resumeTree': {
        const call = this.#live(req.id).call;
        return (req.op === 'pauseTree' ? call.pause() : call.resume()).then(() => ({ paused: call.paused }));
      }
      case 'jobPause':
      case 'jobResume': {
        const j = job(req.job);
        return (req.op === 'jobPause' ? j.pause() : j.resume()).then(() => ({ paused: j.paused }));
      }
      case 'list':
        return {
          calls: [...this.#calls].map(([id, { call }]) => ({
            id,
            pid: call.pid ?? 0,
            cgroup: call.cgroup ?? '',
            members: call.members(),
            exitCode: call.exitCode,
            signal: call.signalCode,
            jobId: call.jobId,
          })),
        };
      case 'capabilities':
        return { protocol: PROTOCOL_VERSION, version: packageVersion(), capabilities: capabilities() };
      case 'shutdown': {
        const open = this.#calls.size;
        const stopped = this.#stopped();
        this.#stopAll(req.grace).catch(() => {});
        // Answered when every call is closed; the server then exits.
        return stopped.then(() => ({ stopped: open }));
      }
    }
  }

  #stopped(): Promise<void> {
    return new Promise((resolve) => this.#stoppedWaiters.push(resolve));
  }

  #spawn(req: Extract<Request, { op: 'spawn' }>): Result {
    if (this.#calls.has(req.id)) throw fail('ERR_PROCTREE_DUPLICATE_CALL', `call id '${req.id}' is already open`);
    const o = req.options ?? {};
    const { stdin, stdout, stderr, confinement, collect, maxBuffer, keep, marker, all, encoding, pty, ready, ...rest } = o;
    // What a client may have kept is the operator's to bound, not the client's.
    const most = this.#limits.maxBuffer;
    for (const [name, value] of [['maxBuffer', maxBuffer], ['jobBuffer', o.jobBuffer]] as const) {
      if (typeof value === 'number' && value > most) {
        throw outOfRange(`options.${name}`, `<= ${most} (the server's --max-buffer)`, value);
      }
    }
    if (!collect) {
      for (const name of COLLECT_OPTIONS) {
        if (o[name] !== undefined) throw invalidArgValue(`options.${name}`, o[name], 'needs options.collect: true');
      }
    }
    const options: SpawnOptions = { ...rest };
    if (ready !== undefined) options.ready = readyOptions(ready);
    if (pty !== undefined && pty !== false) {
      for (const [name, value] of [['stdin', stdin], ['stdout', stdout], ['stderr', stderr]] as const) {
        if (value !== undefined) throw invalidArgValue(`options.${name}`, value, 'cannot be given with options.pty: fds 0-2 are the terminal');
      }
      options.pty = pty;
    } else {
      options.stdio = [stdin ?? 'ignore', stdout ?? 'pipe', stderr ?? 'pipe'];
    }
    // Which tiers exist is the library's call; it rejects the ones it lacks.
    if (confinement !== undefined) options.confinement = confinement as SpawnOptions['confinement'];
    // With collect, the call's own result is sent: the library keeps
    // maxBuffer bytes a stream from the first byte (as run() does), until the
    // call is a job or closes.
    if (collect) Object.assign(options, { maxBuffer: maxBuffer ?? Math.min(DEFAULT_MAX_BUFFER, most), keep, marker, all });
    const call = spawn(req.file, req.args ?? [], options);
    if (collect) call[resultEncoding](encoding === 'utf8' ? 'utf8' : 'buffer');
    let resultSent = !collect;
    // Once: with the job event, or else with the close event.
    const takeResult = (): CollectedOutput | undefined => {
      const result = resultSent ? null : call[settledResult]();
      if (!result) return undefined;
      resultSent = true;
      return collectedOutput(result);
    };
    if (!call.started) {
      // It could not start: the error arrives on the next tick.
      return new Promise<never>((_, reject) => call.once('error', reject));
    }
    const id = req.id;
    let resolveClosed!: () => void;
    const streams = call.pty ? [call.pty] : [call.stdout, call.stderr].filter((s): s is Readable => s !== null);
    const flow = new OutputFlow(streams, () => this.#full);
    flow.events = !collect;
    flow.collecting = Boolean(collect);
    const live: LiveCall = {
      call,
      startedAt: performance.now(),
      report: null,
      closed: new Promise((r) => (resolveClosed = r)),
      flow,
      jobSent: false,
      closeSent: false,
      lastTyped: undefined,
    };
    // Open from now on, even while its start is pending: terminate and
    // stop-all reach it.
    this.#calls.set(id, live);
    const answer = (): Record<string, unknown> => ({
      id,
      pid: call.pid as number,
      cgroup: call.cgroup ?? '',
      confinement: call.confinement,
      jobId: call.jobId,
      ...(call.pty ? { pty: { path: call.pty.path, cols: call.pty.cols, rows: call.pty.rows, term: call.pty.term } } : {}),
    });
    // The call's events go out after the spawn answer. A shim (pidns,
    // subreaper) reports the command's pid, or why it could not start, a
    // little later: until then its events wait here and its output in its
    // pipes, and a start that fails sends an error answer and no events.
    let held: Event[] | null = null;
    const emit = (event: Event): void => {
      if (live.closeSent) return;
      if (held) held.push(event);
      else this.#send(event);
    };
    const sendJob = (): void => {
      if (live.jobSent || live.closeSent || call.jobId === null) return;
      live.jobSent = true;
      const result = takeResult();
      // From now on the output is the job's: it flows to its ring buffer.
      flow.events = false;
      flow.collecting = false;
      flow.apply();
      // What the call's own result says: the same remaining and usage.
      const { remaining, usage } = call[jobOutcome]();
      emit({ event: 'job', id, jobId: call.jobId, remaining, usage, ...(result ? { result } : {}) });
    };
    const spawned = (): void => {
      emit({ event: 'spawn', id, pid: call.pid as number });
      // A background call is a job from its start.
      if (call.jobId !== null) sendJob();
    };
    let pending: Promise<Record<string, unknown>> | null = null;
    if (call.pid === undefined) {
      held = [];
      flow.starting = true;
      flow.apply();
      pending = new Promise((resolve, reject) => {
        call.once('spawn', () => {
          resolve(answer());
          // After the answer, whose delivery is already queued.
          queueMicrotask(() => {
            const waiting = held ?? [];
            held = null;
            spawned();
            for (const event of waiting) this.#send(event);
            flow.starting = false;
            flow.apply();
          });
        });
        call.once('error', (err) => {
          if (call.started) return;
          this.#calls.delete(id);
          resolveClosed();
          reject(err);
        });
      });
    } else {
      call.on('spawn', spawned);
    }
    const output = (event: 'stdout' | 'stderr' | 'pty', chunk: Buffer): void => {
      // With collect the result has it; once a job, its ring buffer.
      if (!flow.events || live.closeSent) return;
      const msg: Event = { event, id, data: chunk.toString('base64') };
      if (held) {
        held.push(msg);
        flow.reassert();
      } else {
        this.#sendOutput(flow, msg);
      }
    };
    if (call.pty) {
      call.pty.on('data', (chunk: Buffer) => output('pty', chunk));
      // The terminal failing is the call's error; it still ends and closes.
      call.pty.on('error', (err) => emit({ event: 'error', id, error: errorOf(err) }));
    } else {
      call.stdout?.on('data', (chunk: Buffer) => output('stdout', chunk));
      call.stderr?.on('data', (chunk: Buffer) => output('stderr', chunk));
    }
    call.on('empty', () => {
      flow.treeEmpty = true;
      flow.apply();
    });
    call.on('exit', (code, signal) => emit({ event: 'exit', id, code, signal }));
    call.on('leftover', (processes) => {
      emit({ event: 'leftover', id, processes });
      if (call.jobId === null || live.jobSent) return;
      // What the command left is a job now. When the call's own result is
      // made (output already in the pipes is in it), with what remains then.
      afterPipesPolled(sendJob);
    });
    call.on('cleanup', (report) => {
      live.report = report;
      if (report.leftovers.length > 0) this.#leftoversSeen = true;
      emit({ event: 'cleanup', id, report });
    });
    call.on('ready', (state) => emit({ event: 'ready', id, ...state }));
    call.on('error', (err) => {
      if (call.started) emit({ event: 'error', id, error: errorOf(err) });
    });
    call.on('close', (code, signal) => {
      this.#calls.delete(id);
      this.#waitingForDrain.delete(flow);
      const result = takeResult();
      emit({
        event: 'close',
        id,
        code,
        signal,
        timedOut: call.timedOut,
        durationMs: performance.now() - live.startedAt,
        cleanup: live.report,
        usage: call.usage,
        jobId: call.jobId,
        oomKilled: call.oomKilled,
        pidsLimited: call.pidsLimited,
        ...(result ? { result } : {}),
      });
      live.closeSent = true;
      resolveClosed();
    });
    return pending ?? answer();
  }

  #stopAll(grace: number | undefined): Promise<number> {
    if (this.#stopping) return this.#stopping;
    this.#stopping = (async () => {
      const open = [...this.#calls.values()];
      // A client that stops everything reads what is left; its pauses would
      // keep the calls from closing.
      for (const live of open) {
        live.flow.clientPaused = false;
        live.flow.apply();
      }
      await Promise.all(
        open.map(async (live) => {
          await live.call.terminate(grace === undefined ? {} : { grace }).catch(() => null);
          await live.closed;
        }),
      );
      for (const w of this.#stoppedWaiters.splice(0)) w();
      return this.#leftoversSeen ? 1 : 0;
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

/** The operator's limits: a flag, else its environment variable, else the default. */
export function serverLimits(flags: Record<string, unknown>, env: NodeJS.ProcessEnv): ServerLimits {
  const size = (flag: string, name: string, fallback: number): number => {
    const given = flags[flag.slice(2)] ?? env[name];
    if (given === undefined || given === '') return fallback;
    return parseSize(String(given), flags[flag.slice(2)] !== undefined ? flag : name);
  };
  const maxBuffer = size('--max-buffer', 'PROCTREE_SERVE_MAX_BUFFER', DEFAULT_LIMITS.maxBuffer);
  const maxQueued = size('--max-queued', 'PROCTREE_SERVE_MAX_QUEUED', DEFAULT_LIMITS.maxQueued);
  if (maxQueued < MIN_QUEUED) throw new UsageError(`--max-queued: at least ${MIN_QUEUED} bytes (64k)`);
  return { maxBuffer, maxQueued };
}

export async function serveCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, {
    help: { type: 'boolean', short: 'h' },
    'max-buffer': { type: 'string' },
    'max-queued': { type: 'string' },
  });
  if (flags.help) {
    process.stdout.write(serveHelp);
    return 0;
  }
  const limits = serverLimits(flags, process.env);
  return new Promise<number>((resolve) => {
    const server = new ProtocolServer({ input: process.stdin, output: process.stdout }, (status) => {
      for (const s of stopSignals) process.off(s, onSignal);
      // Flush what is queued on stdout, then let main exit with the status.
      if (process.stdout.writableLength === 0) resolve(status);
      else process.stdout.once('drain', () => resolve(status));
    }, limits);
    const onSignal = (): void => void server.stop();
    const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
    for (const s of stopSignals) process.on(s, onSignal);
    server.start();
  });
}
