// The open calls of `proctree serve`: the table from a client's call id to
// its ToolCall, the spawn that opens one and forwards its spawn, output,
// exit, leftover, job, cleanup, ready, error and close events to the wire,
// the requests that act on an open call, and stopping them all.
import type { Readable } from 'node:stream';

import { proctreeError as fail } from '../errors';
import { noTerminal, typeEndOfInput } from '../pty';
import { spawn } from '../default-supervisor';
import { afterPipesPolled, jobOutcome, resultEncoding, settledResult } from '../call/state';
import type { ToolCall } from '../toolcall';
import type { CleanupReport } from '../types';
import type { CollectedOutput, Event, Request } from './protocol';
import { OutputFlow } from './serve-flow';
import { type Answer, collectedOutput, errorOf, spawnPlan } from './serve-request';

/** What the calls need of the transport that carries their events. */
export interface CallWire {
  /** Writes one event; false when our stdout's buffer is full. */
  send(event: Event): boolean;
  /** Writes one chunk of a call's output, holding that call's pipes while our stdout is full. */
  sendOutput(flow: OutputFlow, event: Event): void;
  /** Our stdout is over the operator's limit: collected calls are held. */
  full(): boolean;
  /** The call closed: its flow waits for no 'drain' any more. */
  closed(flow: OutputFlow): void;
}

/** The requests that act on one open call (or list them). */
export type CallRequest = Extract<Request, { op: 'write' | 'closeStdin' | 'kill' | 'terminate' | 'pause' | 'resume' | 'list' | 'resize' | 'foreground' | 'ports' | 'pauseTree' | 'resumeTree' }>;

/** An open call and what the server keeps of it until its close event. */
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

/** The client's open calls by their id: open from the spawn request until the close event. */
export class CallTable {
  readonly #calls = new Map<string, LiveCall>();
  readonly #wire: CallWire;
  /** The operator's bound on what a client may ask kept (--max-buffer). */
  readonly #maxBuffer: number;
  #leftoversSeen = false;

  constructor(wire: CallWire, maxBuffer: number) {
    this.#wire = wire;
    this.#maxBuffer = maxBuffer;
  }

  /** How many calls are open. */
  get size(): number {
    return this.#calls.size;
  }

  /** Some call's cleanup reported leftovers: the server's exit status says so. */
  get leftoversSeen(): boolean {
    return this.#leftoversSeen;
  }

  /** The output flows of the open calls. */
  *flows(): IterableIterator<OutputFlow> {
    for (const live of this.#calls.values()) yield live.flow;
  }

  #live(id: string): LiveCall {
    const live = this.#calls.get(id);
    if (!live) throw fail('ERR_PROCTREE_UNKNOWN_CALL', `no open call with id '${id}'`);
    return live;
  }

  /** Answers one request on an open call; an id that names none is ERR_PROCTREE_UNKNOWN_CALL. */
  request(req: CallRequest): Answer {
    switch (req.op) {
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
      case 'ports':
        return this.#live(req.id)
          .call.ports()
          .then((ports) => ({ ports }));
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
    }
  }

  /**
   * Opens a call: answered with its pid once it runs (later when a shim's
   * start is pending), then its events go to the wire until its close event.
   */
  spawn(req: Extract<Request, { op: 'spawn' }>): Answer {
    if (this.#calls.has(req.id)) throw fail('ERR_PROCTREE_DUPLICATE_CALL', `call id '${req.id}' is already open`);
    const { options, collect, encoding } = spawnPlan(req.options ?? {}, this.#maxBuffer);
    const call = spawn(req.file, req.args ?? [], options);
    if (collect) call[resultEncoding](encoding);
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
    const flow = new OutputFlow(streams, () => this.#wire.full());
    flow.events = !collect;
    flow.collecting = collect;
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
      else this.#wire.send(event);
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
            for (const event of waiting) this.#wire.send(event);
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
        this.#wire.sendOutput(flow, msg);
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
      this.#wire.closed(flow);
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

  /**
   * Terminates every open call and resolves once each has closed. A client
   * that stops everything reads what is left; its pauses would keep the
   * calls from closing.
   */
  async terminateAll(grace: number | undefined): Promise<void> {
    const open = [...this.#calls.values()];
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
  }
}
