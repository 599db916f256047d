// `proctree serve`: the API over JSON lines on stdin/stdout, for harnesses
// written in other languages. Each request maps onto one API call; nothing
// here stops processes by itself. When the client goes away (stdin closes, or
// stdout breaks), every call is terminated and the server exits: a harness
// that crashed leaves nothing behind. Output has backpressure: a client that
// reads slowly slows the calls that flood, never the server's memory.
import type { Readable, Writable } from 'node:stream';

import { capabilities } from '../capabilities';
import { spawn } from '../run';
import type { ToolCall } from '../toolcall';
import type { CleanupReport, SpawnOptions } from '../types';
import { parseFlags } from './args';
import { PROTOCOL_VERSION, type ProtocolError, ProtocolViolation, type Request, RequestValidator, type Response, type Event } from './protocol';

export const serveHelp = `Usage: proctree serve

Speaks the JSON-lines protocol of docs/protocol.md on stdin/stdout: one
request per line in, one response per request and the calls' events out.
When stdin closes, every call is stopped and the server exits.

Options:
  -h, --help   show this help
`;

/** Longest request line accepted (in characters; JSON lines are mostly ASCII). A write of 8 MiB fits in base64. */
const MAX_LINE = 16 * 1024 * 1024;

type Result = Record<string, unknown> | Promise<Record<string, unknown>>;

interface LiveCall {
  call: ToolCall;
  startedAt: number;
  report: CleanupReport | null;
  closed: Promise<void>;
  flow: OutputFlow;
}

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

  constructor(private readonly streams: Readable[]) {}

  apply(): void {
    const hold = this.starting || this.waitingForDrain || (this.clientPaused && !this.treeEmpty);
    for (const s of this.streams) {
      if (hold) s.pause();
      else s.resume();
    }
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

function fail(code: string, message: string): Error & { code: string } {
  return Object.assign(new Error(message), { code });
}

export interface ServerIo {
  input: Readable;
  output: Writable;
}

export class ProtocolServer {
  readonly #io: ServerIo;
  readonly #validator: RequestValidator;
  readonly #calls = new Map<string, LiveCall>();
  #pending = '';
  #discarding = false;
  #clientGone = false;
  #stopping: Promise<number> | null = null;
  #leftoversSeen = false;
  readonly #stoppedWaiters: (() => void)[] = [];
  readonly #onStopped: (status: number) => void;
  /** Calls whose output waits for our stdout's 'drain'. */
  readonly #waitingForDrain = new Set<OutputFlow>();

  constructor(io: ServerIo, onStopped: (status: number) => void) {
    this.#io = io;
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
    return this.#io.output.write(`${JSON.stringify(msg)}\n`);
  }

  /**
   * One chunk of a call's output. When our stdout is full, stop reading the
   * pipes of the call that wrote it until 'drain': only the calls that flood
   * wait, the others' events keep going out.
   */
  #sendOutput(flow: OutputFlow, event: 'stdout' | 'stderr', id: string, chunk: Buffer): void {
    if (this.#send({ event, id, data: chunk.toString('base64') }) || this.#clientGone) return;
    flow.waitingForDrain = true;
    this.#waitingForDrain.add(flow);
    flow.apply();
  }

  #onData(text: string): void {
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
      const line = this.#pending + piece;
      this.#pending = '';
      this.#onLine(line);
    }
    if (this.#discarding) return;
    this.#pending += text.slice(start);
    if (this.#pending.length > MAX_LINE) {
      // Answer now and drop the rest of the line when its newline comes.
      this.#pending = '';
      this.#discarding = true;
      this.#send({ rid: null, ok: false, error: { code: 'ERR_PROCTREE_LINE_TOO_LONG', message: 'request line longer than 16 MiB' } });
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
    if (this.#stopping && req.op !== 'list' && req.op !== 'capabilities') {
      throw fail('ERR_PROCTREE_SHUTTING_DOWN', 'the server is stopping every call and takes no new work');
    }
    switch (req.op) {
      case 'spawn':
        return this.#spawn(req);
      case 'write': {
        const stdin = this.#live(req.id).call.stdin;
        if (!stdin) throw fail('ERR_PROCTREE_NO_STDIN', `call '${req.id}' has no stdin pipe: spawn it with options.stdin 'pipe'`);
        if (stdin.writableEnded || stdin.destroyed) throw fail('ERR_PROCTREE_STDIN_CLOSED', `the stdin of call '${req.id}' is closed`);
        // Answer once the data is with the kernel: the client's flow control.
        return new Promise((resolve, reject) => {
          stdin.write(Buffer.from(req.data, 'base64'), (err) => (err ? reject(err) : resolve({})));
        });
      }
      case 'closeStdin': {
        const stdin = this.#live(req.id).call.stdin;
        if (!stdin) throw fail('ERR_PROCTREE_NO_STDIN', `call '${req.id}' has no stdin pipe`);
        stdin.end();
        return {};
      }
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
      case 'list':
        return {
          calls: [...this.#calls].map(([id, { call }]) => ({
            id,
            pid: call.pid ?? 0,
            cgroup: call.cgroup ?? '',
            members: call.members(),
            exitCode: call.exitCode,
            signal: call.signalCode,
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
    const { stdin = 'ignore', stdout = 'pipe', stderr = 'pipe', confinement, ...rest } = o;
    const options: SpawnOptions = { ...rest, stdio: [stdin, stdout, stderr] };
    // Which tiers exist is the library's call; it rejects the ones it lacks.
    if (confinement !== undefined) options.confinement = confinement as SpawnOptions['confinement'];
    const call = spawn(req.file, req.args ?? [], options);
    if (!call.started) {
      // It could not start: the error arrives on the next tick.
      return new Promise<never>((_, reject) => call.once('error', reject));
    }
    const id = req.id;
    let resolveClosed!: () => void;
    const flow = new OutputFlow([call.stdout, call.stderr].filter((s): s is Readable => s !== null));
    const live: LiveCall = { call, startedAt: performance.now(), report: null, closed: new Promise((r) => (resolveClosed = r)), flow };
    // Open from now on, even while its start is pending: terminate and
    // stop-all reach it.
    this.#calls.set(id, live);
    const answer = (): Record<string, unknown> => ({ id, pid: call.pid as number, cgroup: call.cgroup ?? '', confinement: call.confinement });
    // The call's events go out after the spawn answer. A shim (pidns,
    // subreaper) reports the command's pid, or why it could not start, a
    // little later: until then its events wait here and its output in its
    // pipes, and a start that fails sends an error answer and no events.
    let held: Event[] | null = null;
    const emit = (event: Event): void => {
      if (held) held.push(event);
      else this.#send(event);
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
            this.#send({ event: 'spawn', id, pid: call.pid as number });
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
      call.on('spawn', () => emit({ event: 'spawn', id, pid: call.pid as number }));
    }
    call.stdout?.on('data', (chunk: Buffer) => this.#sendOutput(flow, 'stdout', id, chunk));
    call.stderr?.on('data', (chunk: Buffer) => this.#sendOutput(flow, 'stderr', id, chunk));
    call.on('empty', () => {
      flow.treeEmpty = true;
      flow.apply();
    });
    call.on('exit', (code, signal) => emit({ event: 'exit', id, code, signal }));
    call.on('leftover', (processes) => emit({ event: 'leftover', id, processes }));
    call.on('cleanup', (report) => {
      live.report = report;
      if (report.leftovers.length > 0) this.#leftoversSeen = true;
      emit({ event: 'cleanup', id, report });
    });
    call.on('error', (err) => {
      if (call.started) emit({ event: 'error', id, error: errorOf(err) });
    });
    call.on('close', (code, signal) => {
      this.#calls.delete(id);
      this.#waitingForDrain.delete(flow);
      emit({
        event: 'close',
        id,
        code,
        signal,
        timedOut: live.report?.reason === 'timeout',
        durationMs: performance.now() - live.startedAt,
        cleanup: live.report,
      });
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

let version: string | undefined;
function packageVersion(): string {
  if (version === undefined) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    version = (require('../../../package.json') as { version: string }).version;
  }
  return version;
}

export async function serveCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, { help: { type: 'boolean', short: 'h' } });
  if (flags.help) {
    process.stdout.write(serveHelp);
    return 0;
  }
  return new Promise<number>((resolve) => {
    const server = new ProtocolServer({ input: process.stdin, output: process.stdout }, (status) => {
      for (const s of stopSignals) process.off(s, onSignal);
      // Flush what is queued on stdout, then let main exit with the status.
      if (process.stdout.writableLength === 0) resolve(status);
      else process.stdout.once('drain', () => resolve(status));
    });
    const onSignal = (): void => void server.stop();
    const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
    for (const s of stopSignals) process.on(s, onSignal);
    server.start();
  });
}
