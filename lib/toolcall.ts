// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
import { EventEmitter } from 'node:events';
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';

import { LeftoversError, spawnError } from './errors';
import {
  native,
  NativeEventKind,
  type NativeErrorShape,
  type NativeReport,
  type NativeStdio,
} from './native';
import { checkGrace, type ResolvedRun, resolveRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import { helperPath, resolveTier } from './capabilities';
import type { CleanupReason, CleanupReport, Confinement, ProcessInfo, RunResult, Verification } from './types';

/**
 * What a call needs from the supervisor that owns it: where its cgroup goes,
 * when it may start (maxConcurrent), and where errors nobody listens to go.
 * @internal
 */
export interface CallOwner {
  readonly group: string;
  /** Calls start() now or later (FIFO), never twice. */
  admit(call: ToolCall, start: () => void): void;
  /** The call has settled ('close', or it could not start): its slot is free. */
  release(call: ToolCall): void;
  /** An 'error' the call has no listener for. */
  unhandledError(call: ToolCall, err: Error): void;
  /** Prepares what must exist before a process of this owner starts (the guardian of cgroup calls). */
  beforeStart(tier: Confinement): void;
}

/** Runs the ladder with a reason other than 'terminate' (supervisor shutdown). @internal */
export const terminateFor = Symbol('proctree.terminateFor');
/** Fails a call that is still queued, so it never starts. @internal */
export const dropQueued = Symbol('proctree.dropQueued');


const verification: Record<Confinement, Verification> = {
  cgroup: 'cgroup.events',
  pidns: 'pidns',
  subreaper: 'subreaper',
  pgroup: 'none',
};

function emptyReport(reason: CleanupReason, confinement: Confinement): CleanupReport {
  return { reason, confinement, signaled: 0, killed: 0, escaped: 0, leftovers: [], verified: verification[confinement], durationMs: 0 };
}

class Collector {
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

export interface ToolCallEvents {
  spawn: [];
  exit: [code: number | null, signal: NodeJS.Signals | null];
  leftover: [processes: ProcessInfo[]];
  cleanup: [report: CleanupReport];
  empty: [];
  close: [code: number | null, signal: NodeJS.Signals | null];
  error: [err: Error];
}

export class ToolCall extends EventEmitter {
  /**
   * Pid of the main process (the command, as this process numbers it, in
   * every tier: for pidns and subreaper it is the shim's child, not the
   * shim); undefined while queued or when it could not start.
   */
  pid: number | undefined;
  readonly stdin: Writable | null = null;
  readonly stdout: Readable | null = null;
  readonly stderr: Readable | null = null;
  /** Exit code of the main process once it exited, else null. */
  exitCode: number | null = null;
  /** Signal that ended the main process, else null. */
  signalCode: NodeJS.Signals | null = null;
  /** Whether kill() delivered a signal to at least one process. */
  killed = false;
  /** The confinement tier this call runs in (resolved from 'auto' when it was created). */
  readonly confinement: Confinement;
  /** Absolute path of the call's cgroup; null while queued, when it could not start, or in a tier other than `cgroup`. */
  cgroup: string | null = null;
  readonly spawnfile: string;
  readonly spawnargs: string[];

  #id = 0;
  readonly #opts: ResolvedSpawn;
  readonly #owner: CallOwner;
  readonly #createdAt = performance.now();
  #startedAt = 0;
  #started = false;
  #childEnds: number[] = [];
  #spawnError: Error | null = null;
  #empty = false;
  #closed = false;
  #openStreams = 0;
  #report: CleanupReport | null = null;
  #ladder: Promise<CleanupReport> | null = null;
  #resolveLadder: ((r: CleanupReport) => void) | null = null;
  #timedOut = false;
  #aborted = false;
  #timer: NodeJS.Timeout | null = null;
  #onAbort: (() => void) | null = null;
  #done: Promise<RunResult<string | Buffer>> | null = null;
  #rejectDone: ((err: Error) => void) | null = null;
  #ref = true;
  #killedAll = false;

  /** @internal use spawn() or Supervisor#spawn() */
  constructor(opts: ResolvedSpawn, owner: CallOwner, run?: ResolvedRun) {
    super();
    this.#opts = opts;
    this.#owner = owner;
    this.spawnfile = opts.file;
    this.spawnargs = opts.spawnargs;
    // Before anything is created: an explicit tier this host cannot run throws here.
    this.confinement = resolveTier(opts.confinement);

    // The pipes exist from the start, so a queued call already has its
    // streams; the child's ends are handed over when it starts.
    const stdio = opts.stdio.map((kind, i): NativeStdio => {
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
    if (run) this.#done = this.#collect(run);
    owner.admit(this, () => this.#start(stdio));
  }

  #start(stdio: [NativeStdio, NativeStdio, NativeStdio]): void {
    if (this.#started) return;
    this.#started = true;
    this.#startedAt = performance.now();
    const opts = this.#opts;
    let res;
    try {
      this.#owner.beforeStart(this.confinement);
      res = native.spawn(
        {
          group: this.#owner.group,
          candidates: opts.candidates,
          argv: opts.argv,
          env: opts.env,
          stdio,
          tier: this.confinement,
          helper: helperPath(),
          ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
          ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
          ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
        },
        (kind, a, b) => this.#onNative(kind, a, b),
      );
    } catch (err) {
      res = { error: err as NativeErrorShape };
    }
    // The child holds its own copies now; ours would keep the pipes open.
    for (const fd of this.#childEnds) native.closeFd(fd);
    this.#childEnds = [];
    if ('error' in res) {
      this.#fail(spawnError(res.error, opts.file, opts.spawnargs));
      return;
    }
    this.#id = res.id;
    this.pid = res.pid;
    this.cgroup = res.cgroup === '' ? null : res.cgroup;

    if (opts.timeout > 0) {
      this.#timer = setTimeout(() => {
        this.#timedOut = true;
        void this.#startLadder('timeout', opts.grace);
      }, opts.timeout);
    }
    const signal = opts.signal;
    if (signal) {
      this.#onAbort = () => {
        this.#aborted = true;
        void this.#startLadder('abort', opts.grace);
      };
      if (signal.aborted) process.nextTick(this.#onAbort);
      else signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    if (!this.#ref) this.#applyRef();
    process.nextTick(() => this.emit('spawn'));
  }

  /** The call never ran: its streams end, 'error' follows, its slot is freed. */
  #fail(err: Error): void {
    this.#spawnError = err;
    this.#rejectDone?.(err);
    for (const fd of this.#childEnds) native.closeFd(fd);
    this.#childEnds = [];
    this.stdin?.destroy();
    this.stdout?.destroy();
    this.stderr?.destroy();
    process.nextTick(() => {
      this.#owner.release(this);
      this.#emitError(err);
      if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport('terminate', this.confinement));
    });
  }

  /** @internal a queued call dropped by a supervisor shutdown */
  [dropQueued](err: Error): void {
    if (!this.#started) {
      this.#started = true;
      this.#fail(err);
    }
  }

  #emitError(err: Error): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
    else this.#owner.unhandledError(this, err);
  }

  #socket(fd: number, readable: boolean): net.Socket {
    const sock = new net.Socket({ fd, readable, writable: !readable, allowHalfOpen: true });
    if (!readable) {
      // EPIPE once the command is gone is not fatal, as with ChildProcess;
      // like ChildProcess, 'close' does not wait for stdin.
      sock.on('error', () => {});
      return sock;
    }
    this.#openStreams += 1;
    sock.once('close', () => {
      this.#openStreams -= 1;
      this.#maybeClose();
    });
    return sock;
  }

  /** Live pids of the whole tree now: from the cgroup, the shim's descendants, or the session (pgroup). */
  members(): number[] {
    return this.#id && !this.#empty ? native.members(this.#id) : [];
  }

  /**
   * Sends one signal to every process of the tree (escapees included), with
   * no escalation. Returns whether at least one process got it.
   */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const num = signalNumber(signal);
    if (!this.#id || this.#empty) return false;
    const n = native.kill(this.#id, num);
    if (n > 0) this.killed = true;
    // SIGKILL goes through cgroup.kill: the whole tree is already dying, so
    // members seen after the main process exits are not leftovers.
    if (n > 0 && num === signalNumber('SIGKILL')) this.#killedAll = true;
    return n > 0;
  }

  /**
   * Stops the whole tree: freeze, the graceful signal once to every member,
   * thaw, `grace` ms, cgroup.kill, verified empty. Idempotent: every call
   * gets the report of the one ladder.
   */
  terminate(options: { grace?: number } = {}): Promise<CleanupReport> {
    const grace = checkGrace(options?.grace, this.#opts.grace);
    return this.#startLadder('terminate', grace);
  }

  /** @internal */
  [terminateFor](reason: CleanupReason, grace: number): Promise<CleanupReport> {
    return this.#startLadder(reason, grace);
  }

  /**
   * Lets the harness exit while the call runs, like ChildProcess#unref().
   * The call is still stopped then: the exit hook kills every live call.
   */
  unref(): this {
    this.#ref = false;
    this.#applyRef();
    return this;
  }

  /** Undoes unref(): the call keeps the event loop alive again (the default). */
  ref(): this {
    this.#ref = true;
    this.#applyRef();
    return this;
  }

  #applyRef(): void {
    for (const s of [this.stdin, this.stdout, this.stderr] as Array<net.Socket | null>) {
      if (this.#ref) s?.ref();
      else s?.unref();
    }
    if (this.#timer) {
      if (this.#ref) this.#timer.ref();
      else this.#timer.unref();
    }
    if (this.#id && !this.#empty) native.setRef(this.#id, this.#ref);
  }

  /** Whether `timeout` ran out and stopped the call. */
  get timedOut(): boolean {
    return this.#timedOut;
  }

  /** Whether `signal` was aborted and stopped the call. */
  get aborted(): boolean {
    return this.#aborted;
  }

  /** The report of the ladder, once one ran; null before (or when none was needed). */
  get cleanupReport(): CleanupReport | null {
    return this.#report;
  }

  /** Whether the call has started (false while it waits for a slot). */
  get started(): boolean {
    return this.#started && this.#spawnError === null;
  }

  /**
   * Settles once the tree is empty and stdio drained, with the whole result.
   * Output is collected from the first time this is read: read it right
   * after spawn() to get all of it.
   */
  get done(): Promise<RunResult> {
    if (!this.#done) {
      this.#done = this.#collect({ ...resolveRun(undefined), closeStdin: false });
      // 'done' carries a failed start; do not also crash on it.
      this.#done.catch(() => {});
    }
    return this.#done as Promise<RunResult>;
  }

  #startLadder(reason: CleanupReason, grace: number): Promise<CleanupReport> {
    if (this.#report) return Promise.resolve(this.#report);
    if (this.#ladder) return this.#ladder;
    if (!this.#started) {
      // Still queued: it will never start.
      this[dropQueued](Object.assign(new Error('The call was stopped before it started'), { code: 'ABORT_ERR' }));
      return Promise.resolve(emptyReport(reason, this.confinement));
    }
    if (!this.#id || this.#empty) return Promise.resolve(emptyReport(reason, this.confinement));
    this.#ladder = new Promise((resolve) => {
      this.#resolveLadder = resolve;
    });
    if (!native.terminate(this.#id, grace, this.#opts.killSignal, reason)) {
      // The tree emptied before any ladder ran: nothing to stop.
      this.#resolveLadder?.(emptyReport(reason, this.confinement));
    }
    return this.#ladder;
  }

  #onNative(kind: NativeEventKind, a?: number | null | NativeReport | NativeErrorShape, b?: number): void {
    switch (kind) {
      case NativeEventKind.Exit:
        this.#onExit(a as number | null, b ?? 0);
        break;
      case NativeEventKind.Cleanup:
        this.#onCleanup(a as NativeReport);
        break;
      case NativeEventKind.Empty:
        this.#onEmpty();
        break;
      case NativeEventKind.Error:
        this.#emitError(a as NativeErrorShape);
        break;
    }
  }

  #onExit(code: number | null, signal: number): void {
    this.exitCode = code;
    this.signalCode = signalName(signal);
    this.emit('exit', this.exitCode, this.signalCode);
    if (this.#ladder || this.#empty || this.#killedAll) return;
    const pids = native.members(this.#id);
    if (pids.length === 0) return;
    const infos = native.processInfo(pids);
    if (infos.length > 0) this.emit('leftover', infos);
    if (this.#opts.leftovers === 'kill' && !this.#ladder) void this.#startLadder('leftovers', this.#opts.grace);
  }

  #onCleanup(r: NativeReport): void {
    const report: CleanupReport = {
      reason: r.reason as CleanupReason,
      confinement: this.confinement,
      signaled: r.signaled,
      killed: r.killed,
      escaped: r.escaped,
      leftovers: r.leftovers,
      verified: r.verified,
      durationMs: r.durationMs,
    };
    this.#report = report;
    this.#resolveLadder?.(report);
    this.emit('cleanup', report);
    if (report.leftovers.length > 0) {
      const names = report.leftovers.map((p) => `${p.pid} (${p.comm})`).join(', ');
      this.#emitError(new LeftoversError(`processes survived the kill ladder: ${names}`, report.leftovers));
    }
  }

  #onEmpty(): void {
    this.#empty = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#onAbort) this.#opts.signal?.removeEventListener('abort', this.#onAbort);
    // A ladder asked for while the empty event was on its way.
    if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport('terminate', this.confinement));
    // Nobody is left to read stdin: release our end.
    this.stdin?.destroy();
    this.emit('empty');
    this.#maybeClose();
  }

  #maybeClose(): void {
    // Every writer of our pipes was in the tree, so once it is empty the
    // pipes reach EOF: 'close' cannot hang on a daemon holding stdout.
    if (this.#closed || !this.#empty || this.#openStreams > 0) return;
    this.#closed = true;
    this.#owner.release(this);
    this.emit('close', this.exitCode, this.signalCode);
  }

  #collect(run: ResolvedRun): Promise<RunResult<string | Buffer>> {
    const out = new Collector(this.stdout, run.maxBuffer);
    const err = new Collector(this.stderr, run.maxBuffer);
    if (this.stdin) {
      if (run.input !== undefined) this.stdin.end(run.input);
      else if (run.closeStdin) this.stdin.end();
    }
    return new Promise((resolve, reject) => {
      if (this.#spawnError) {
        reject(this.#spawnError);
        return;
      }
      this.#rejectDone = reject;
      this.once('close', () => {
        resolve({
          exitCode: this.exitCode,
          signal: this.signalCode,
          stdout: out.value(run.encoding),
          stderr: err.value(run.encoding),
          stdoutTruncated: out.truncated,
          stderrTruncated: err.truncated,
          timedOut: this.#timedOut,
          aborted: this.#aborted,
          durationMs: performance.now() - this.#startedAt,
          queuedMs: this.#startedAt - this.#createdAt,
          cleanup: this.#report,
          pid: this.pid ?? 0,
          cgroup: this.cgroup ?? '',
          confinement: this.confinement,
        });
      });
    });
  }
}

// Typed overloads for the events, so listeners are checked.
export interface ToolCall {
  on<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  once<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  off<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  emit<E extends keyof ToolCallEvents>(event: E, ...args: ToolCallEvents[E]): boolean;
}
