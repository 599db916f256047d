// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
//
// This file is the call's lifecycle (queued, started, exited, empty, closed)
// and the ladder it asks the addon for; its pipes live in stdio.ts and what
// it ends with in result.ts.
import { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';

import { spawnError } from './errors';
import { native, NativeEventKind, type NativeErrorShape, type NativeReport } from './native';
import { checkGrace, type ResolvedRun, resolveRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import { helperPath, resolveTier, warnNoGuardian } from './capabilities';
import { cleanupReport, emptyReport, leftoversError, runResult } from './result';
import { CallStdio, Collector } from './stdio';
import type { CleanupReason, CleanupReport, Confinement, ProcessInfo, RunResult } from './types';

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
}

/** Runs the ladder with a reason other than 'terminate' (supervisor shutdown). @internal */
export const terminateFor = Symbol('proctree.terminateFor');
/** Fails a call that is still queued, so it never starts. @internal */
export const dropQueued = Symbol('proctree.dropQueued');

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
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
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
  readonly #stdio: CallStdio;
  #spawnError: Error | null = null;
  #empty = false;
  #closed = false;
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

    this.#stdio = new CallStdio(opts.stdio, () => this.#maybeClose());
    this.stdin = this.#stdio.stdin;
    this.stdout = this.#stdio.stdout;
    this.stderr = this.#stdio.stderr;
    if (run) this.#done = this.#collect(run);
    owner.admit(this, () => this.#start());
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#startedAt = performance.now();
    const opts = this.#opts;
    let res;
    try {
      res = native.spawn(
        {
          group: this.#owner.group,
          candidates: opts.candidates,
          argv: opts.argv,
          env: opts.env,
          stdio: this.#stdio.forChild,
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
    this.#stdio.closeChildEnds();
    if ('error' in res) {
      this.#fail(spawnError(res.error, opts.file, opts.spawnargs));
      return;
    }
    this.#id = res.id;
    this.pid = res.pid;
    this.cgroup = res.cgroup === '' ? null : res.cgroup;
    if (res.guardianError) warnNoGuardian(res.guardianError);

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
    // A shim reports the command's pid (or why it could not start) later.
    if (!res.pending) process.nextTick(() => this.emit('spawn'));
  }

  /** The call never ran: its streams end, 'error' follows, its slot is freed. */
  #fail(err: Error): void {
    this.#spawnError = err;
    this.#rejectDone?.(err);
    this.#stdio.destroy();
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
    this.#stdio.setRef(this.#ref);
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
      case NativeEventKind.Started:
        this.pid = a as number;
        this.emit('spawn');
        break;
      case NativeEventKind.StartFailed:
        // Delivered like a start that failed at once: 'error', and the call
        // never ran. The shim's own exit follows as Empty, which is ignored.
        this.#empty = true;
        if (this.#timer) clearTimeout(this.#timer);
        if (this.#onAbort) this.#opts.signal?.removeEventListener('abort', this.#onAbort);
        this.#fail(spawnError(a as NativeErrorShape, this.#opts.file, this.#opts.spawnargs));
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
    const report = cleanupReport(r, this.confinement);
    this.#report = report;
    this.#resolveLadder?.(report);
    this.emit('cleanup', report);
    const err = leftoversError(report);
    if (err) this.#emitError(err);
  }

  #onEmpty(): void {
    if (this.#spawnError) return;
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
    if (this.#closed || !this.#empty || this.#stdio.openReadable > 0) return;
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
        resolve(
          runResult(
            {
              exitCode: this.exitCode,
              signal: this.signalCode,
              timedOut: this.#timedOut,
              aborted: this.#aborted,
              createdAt: this.#createdAt,
              startedAt: this.#startedAt,
              cleanup: this.#report,
              pid: this.pid,
              cgroup: this.cgroup,
              confinement: this.confinement,
            },
            out,
            err,
            run.encoding,
          ),
        );
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
