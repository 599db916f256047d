// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
//
// This file is the call's lifecycle (queued, started, exited, empty, closed)
// and the ladder it asks the addon for; its pipes live in stdio.ts, the
// collection of its output in output.ts, what it ends with in result.ts, and
// what a job is in jobs.ts.
import { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';

import { AbortError, spawnError, spawnThrow } from './errors';
import { native, NativeEventKind, type NativeErrorShape, type NativeReport, type NativeUsage, type NativeSpawnSpec } from './native';
import { checkGrace, type ResolvedRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import { helperPath, resolveTier, warnNoGuardian } from './capabilities';
import type { CallPhase } from './jobs';
import { ByteTail, CallOutput, type LinesOptions } from './output';
import { attachMaster, flushPty, noTerminal, PtyStream, ptyPending, ptyTreeEmpty, releasePty, setPtyRef, typeInput } from './pty';
import { cleanupReport, emptyReport, finalUsage, leftoversError, runResult, usageSoFar } from './result';
import { CallStdio, isUsedAsStdio } from './stdio';
import type { CleanupReason, CleanupReport, Confinement, Verification, ProcessInfo, ResourceUsage, RunResult } from './types';

/**
 * How long pipes may stay open once the tree is verified empty. Every
 * process that could write to them is gone, so what is left is data already
 * in the pipe (read within this time) or a process outside the tree that was
 * handed our pipe (fd passing over a unix socket): it must not hang 'close'.
 */
export const STDIO_DRAIN_MS = 100;

/**
 * What a call needs from the supervisor that owns it: where its cgroup goes,
 * when it may start (maxConcurrent), and where errors nobody listens to go.
 * @internal
 */
export interface CallOwner {
  readonly group: string;
  /** Calls start() now or later (FIFO), never twice; a background call starts now and takes no slot. */
  admit(call: ToolCall, start: () => void, background: boolean): void;
  /** A queued call that will never start leaves the queue. */
  dequeue(call: ToolCall): void;
  /** The call has settled ('close', or it could not start): its slot is free. */
  release(call: ToolCall): void;
  /** An 'error' the call has no listener for. */
  unhandledError(call: ToolCall, err: Error): void;
  /** The call is a job now (its id is set): list it, and free its slot. */
  adoptJob(call: ToolCall, ring: ByteTail): void;
}

/** Runs the ladder with a reason other than 'terminate' (supervisor shutdown). @internal */
export const terminateFor = Symbol('proctree.terminateFor');
/** Runs the ladder on many calls at once (ToolCall[terminateMany]). @internal */
export const terminateMany = Symbol('proctree.terminateMany');
/** Ends a call that is still queued, quietly: it never starts. @internal */
export const dropQueued = Symbol('proctree.dropQueued');
/** Whether the ladder runs and whether the call closed, for its job's state. @internal */
export const callPhase = Symbol('proctree.callPhase');

export interface ToolCallEvents {
  spawn: [];
  exit: [code: number | null, signal: NodeJS.Signals | null];
  leftover: [processes: ProcessInfo[]];
  cleanup: [report: CleanupReport];
  empty: [];
  close: [code: number | null, signal: NodeJS.Signals | null];
  error: [err: Error];
}

// A start that Node reports by throwing from spawn() rather than by 'error':
// the uid/gid steps (EPERM when not privileged, EINVAL for a bad id).
function throwsLikeNode(err: NativeErrorShape): boolean {
  return err.syscall === 'setuid' || err.syscall === 'setgid' || err.syscall === 'setgroups';
}

export class ToolCall extends EventEmitter {
  /**
   * Pid of the main process (the command, as this process numbers it, in
   * every tier: for pidns and subreaper it is the shim's child, not the
   * shim); undefined while queued, until a pidns/subreaper start is
   * confirmed, or when it could not start.
   */
  pid: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** As ChildProcess#stdio: stdin, stdout, stderr, then fd 3, 4, …; null where not a pipe. */
  readonly stdio: Array<Readable | Writable | null>;
  /**
   * Exit code of the main process once it exited, else null; the negative
   * errno when it could not start, as Node's.
   */
  exitCode: number | null = null;
  /** Signal that ended the main process, else null. */
  signalCode: NodeJS.Signals | null = null;
  /** Whether a signal was delivered by kill(), terminate(), the timeout or the abort signal. */
  killed = false;
  /** Always false: proctree has no IPC channel (duck-typed like ChildProcess). */
  readonly connected = false;
  /** The confinement tier this call runs in (resolved from 'auto' when it was created). */
  readonly confinement: Confinement;
  /** Absolute path of the call's cgroup; null while queued, when it could not start, or in a tier other than `cgroup`. */
  cgroup: string | null = null;
  /** The executable (the shell's path with `shell`), as ChildProcess#spawnfile. */
  readonly spawnfile: string;
  /** argv, argv[0] included, as ChildProcess#spawnargs. */
  readonly spawnargs: string[];
  /**
   * `c<N>` once the call is a job of its supervisor (`background: true`
   * from the start; `leftovers: 'keep'` when the main process exited and
   * processes remained), else null. The same name as its cgroup leaf.
   */
  jobId: string | null = null;
  /**
   * The call's terminal with options.pty (the master side: read what it
   * shows, write to type), else null; stdin, stdout and stderr are null then.
   */
  readonly pty: PtyStream | null;

  #id = 0;
  /** How the tree is proved empty, as the addon says for this call's tier ('none' until it started). */
  #verified: Verification = 'none';
  readonly #opts: ResolvedSpawn;
  readonly #owner: CallOwner;
  readonly #createdAt = performance.now();
  #startedAt = 0;
  #started = false;
  readonly #pipes: CallStdio;
  #spawnError: Error | null = null;
  #exited = false;
  #empty = false;
  #closed = false;
  #report: CleanupReport | null = null;
  #ladder: Promise<CleanupReport> | null = null;
  #resolveLadder: ((r: CleanupReport) => void) | null = null;
  #timedOut = false;
  #aborted = false;
  #timer: NodeJS.Timeout | null = null;
  #idleTimer: NodeJS.Timeout | null = null;
  #drainTimer: NodeJS.Timeout | null = null;
  #onAbort: (() => void) | null = null;
  #done: Promise<RunResult<string | Buffer>>;
  #rejectDone: ((err: Error) => void) | null = null;
  /** Resolves `done` with what is known now (at 'close', or when the call became a job). */
  #settleDone: (() => void) | null = null;
  readonly #output: CallOutput;
  /** A job's output, from the start of the call (only for calls that can become jobs). */
  readonly #ring: ByteTail | null = null;
  #usage: ResourceUsage | null = null;
  #remaining: ProcessInfo[] = [];
  #ref = true;
  #killedAll = false;
  #constructing = false;
  #throwNow: Error | null = null;

  /** @internal use spawn() or Supervisor#spawn() */
  constructor(opts: ResolvedSpawn, owner: CallOwner, run?: ResolvedRun) {
    super();
    this.#opts = opts;
    this.#owner = owner;
    this.spawnfile = opts.file;
    this.spawnargs = opts.argv;
    // Before anything is created: an explicit tier this host cannot run throws here.
    this.confinement = resolveTier(opts.confinement);

    let stdioError: NativeErrorShape | null = null;
    try {
      this.#pipes = new CallStdio(opts.stdio, () => this.#maybeClose(), run && !opts.pty ? { input: run.input !== undefined } : undefined);
    } catch (err) {
      // Out of fds (EMFILE) while making the pipes: as Node, an 'error', not a throw.
      stdioError = err as NativeErrorShape;
      this.#pipes = new CallStdio(opts.stdio.map(() => ({ kind: 'ignore' as const })), () => this.#maybeClose());
    }
    this.stdio = this.#pipes.streams;
    this.stdin = this.#pipes.stdin;
    this.stdout = this.#pipes.stdout;
    this.stderr = this.#pipes.stderr;
    this.pty = opts.pty ? new PtyStream(opts.pty, () => this.#maybeClose(), () => this.members()) : null;
    // Output is collected from the first byte, so `done` read late loses nothing.
    // A terminal is one stream for both: what it shows is stdout.
    const sources = this.pty ? { stdout: this.pty, stderr: this.pty } : { stdout: this.stdout, stderr: this.stderr };
    this.#output = new CallOutput(sources, opts.output, (s) => !isUsedAsStdio(s));
    if (opts.background || opts.leftovers === 'keep') {
      const ring = new ByteTail(opts.jobBuffer);
      this.#ring = ring;
      this.#output.subscribe((chunk) => ring.write(chunk));
    }
    if (opts.idleTimeout > 0) this.#output.subscribe(() => this.#idleTimer?.refresh());
    this.#done = this.#collect(run ?? { input: undefined, encoding: 'utf8', closeStdin: false });
    // 'done' carries a failed start; do not also crash on it.
    this.#done.catch(() => {});
    // run() reads the streams itself (nobody else can) and wants the result.
    if (run) {
      this.#output.resultWanted();
      this.#flushOutput();
    }
    if (stdioError) {
      this.#started = true;
      this.#fail(spawnError(stdioError, opts.file, opts.argv));
      return;
    }
    this.#constructing = true;
    owner.admit(this, () => this.#start(), opts.background);
    this.#constructing = false;
    // After admit: an already aborted signal acts a tick after 'spawn' was queued, as in Node.
    if (!this.#throwNow) this.#watchSignal();
    if (this.#throwNow) {
      this.#removeAbortListener();
      this.#pipes.destroy();
      owner.release(this);
      throw this.#throwNow;
    }
  }

  // Node listens from spawn() on; so do we, which also lets an abort
  // take a queued call out of the queue.
  #watchSignal(): void {
    const signal = this.#opts.signal;
    if (!signal) return;
    this.#onAbort = () => this.#abort(signal.reason);
    if (signal.aborted) process.nextTick(this.#onAbort);
    else signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  #removeAbortListener(): void {
    if (this.#onAbort) this.#opts.signal?.removeEventListener('abort', this.#onAbort);
    this.#onAbort = null;
  }

  #abort(reason: unknown): void {
    if (this.#onAbort === null) return;
    this.#removeAbortListener();
    const err = new AbortError(undefined, { cause: reason });
    if (!this.#started) {
      // Queued: it never starts. Node would have killed it; the caller
      // asked to stop it, and gets the same AbortError.
      this.#drop(err, true);
      return;
    }
    if (this.#spawnError || this.#exited) return;
    this.#aborted = true;
    // As Node's abortChildProcess: 'error' only when the signal was delivered.
    if (this.#startLadder('abort', this.#opts.grace, true)) this.#emitError(err);
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#startedAt = performance.now();
    const opts = this.#opts;
    let res;
    try {
      // No prototype: the addon reads optional fields (uid, gid, cwd) by
      // name, and a polluted Object.prototype.uid must not reach them.
      const spec: NativeSpawnSpec = Object.assign(Object.create(null) as NativeSpawnSpec, {
          group: this.#owner.group,
          candidates: opts.candidates,
          argv: opts.argv,
          env: opts.env,
          stdio: this.#pipes.forChild,
          tier: this.confinement,
          helper: helperPath(),
          ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
          ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
          ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
          ...(this.pty ? { pty: { cols: this.pty.cols, rows: this.pty.rows } } : {}),
          // Portable binding on Windows only (shell: cmd.exe's quoting); the addon never reads it.
          ...(opts.windowsVerbatimArguments ? { windowsVerbatimArguments: true } : {}),
      });
      res = native.spawn(spec, (kind, a, b) => this.#onNative(kind, a, b));
    } catch (err) {
      res = { error: err as NativeErrorShape };
    }
    this.#pipes.closeChildEnds();
    if ('error' in res) {
      if (this.#constructing && throwsLikeNode(res.error)) this.#throwNow = spawnThrow(res.error);
      else this.#fail(spawnError(res.error, opts.file, opts.argv));
      return;
    }
    this.#id = res.id;
    this.#verified = res.verified;
    if (res.ptyMaster !== undefined) this.pty?.[attachMaster](res.ptyMaster);
    this.cgroup = res.cgroup === '' ? null : res.cgroup;
    if (res.guardianError) warnNoGuardian(res.guardianError);
    if (!res.pending) {
      this.pid = res.pid;
      process.nextTick(() => this.emit('spawn'));
    }

    if (opts.timeout > 0) this.#timer = setTimeout(() => this.#onTimeout(), opts.timeout);
    if (opts.idleTimeout > 0) this.#idleTimer = setTimeout(() => this.#onIdle(), opts.idleTimeout);
    if (opts.background) this.#becomeJob();
    if (!this.#ref) this.#applyRef();
  }

  #onIdle(): void {
    this.#idleTimer = null;
    void this.#startLadder('idle', this.#opts.grace, true);
  }

  /** From now on the call is a job: listed by its supervisor, its output flowing to the ring whoever reads. */
  #becomeJob(): void {
    if (this.jobId !== null || !this.#ring) return;
    this.jobId = `c${this.#id}`;
    this.#output.flowAlways();
    this.#owner.adoptJob(this, this.#ring);
  }

  #onTimeout(): void {
    this.#timer = null;
    this.#timedOut = true;
    if (this.#empty) {
      // pgroup: the visible tree is gone but something still holds our
      // pipes, maybe an escapee we cannot see: the timeout ends the wait.
      this.#pipes.releaseReadable();
      this.pty?.[releasePty]();
      return;
    }
    void this.#startLadder('timeout', this.#opts.grace, true);
  }

  /** The call never ran: 'error', then its streams end and 'close' follows; its slot is freed. */
  #fail(err: Error): void {
    this.#spawnError = err;
    const errno = (err as { errno?: unknown }).errno;
    if (typeof errno === 'number') this.exitCode = errno;
    this.#end(err, true);
  }

  /** Ends a call that has no process: `emitError` says whether 'error' is due. */
  #end(err: Error, emitError: boolean): void {
    this.#spawnError ??= err;
    this.#rejectDone?.(err);
    this.#removeAbortListener();
    this.#pipes.closeChildEnds();
    this.stdin?.destroy();
    this.pty?.[releasePty]();
    process.nextTick(() => {
      this.#owner.release(this);
      if (emitError) this.#emitError(err);
      if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport('terminate', this.confinement, this.#verified));
      this.#empty = true;
      this.#flushOutput();
      this.#maybeClose();
    });
  }

  /** A queued call that will never start: out of the queue, closed. */
  #drop(err: Error, emitError: boolean): void {
    if (this.#started) return;
    this.#started = true;
    this.#owner.dequeue(this);
    this.#end(err, emitError);
  }

  /** @internal a queued call dropped by terminate() or a supervisor shutdown: not an error */
  [dropQueued](err: Error): void {
    this.#drop(err, false);
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
   * no escalation. Returns whether at least one process got it, and sets
   * `killed` then, as ChildProcess#kill does. `0` only probes.
   */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const num = signalNumber(signal);
    if (!this.#id || this.#empty || this.#spawnError) return false;
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
   * gets the report of the one ladder. A call still queued never starts,
   * and its report is empty.
   */
  terminate(options: { grace?: number } = {}): Promise<CleanupReport> {
    const grace = checkGrace(options?.grace, this.#opts.grace);
    return this.#ladderFor('terminate', grace);
  }

  /**
   * Sets the terminal's window size (options.pty): the foreground process
   * group gets SIGWINCH. Throws ERR_PROCTREE_NO_PTY for a call without one.
   */
  resize(cols: number, rows: number): void {
    if (!this.pty) throw noTerminal();
    this.pty.resize(cols, rows);
  }

  /** @internal */
  [terminateFor](reason: CleanupReason, grace: number): Promise<CleanupReport> {
    return this.#ladderFor(reason, grace);
  }

  /** `using call = spawn(…)`: stops the whole tree when the scope ends, unless it was already signalled. */
  [Symbol.dispose](): void {
    if (!this.killed && !this.#closed) void this.terminate().catch(() => {});
  }

  /** `await using call = spawn(…)`: stops the whole tree and waits for 'close'. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#closed) return;
    const closed = new Promise<void>((resolve) => this.once('close', () => resolve()));
    await this.terminate();
    await closed;
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
    this.#pipes.setRef(this.#ref);
    this.pty?.[setPtyRef](this.#ref);
    for (const t of [this.#timer, this.#idleTimer, this.#drainTimer]) {
      if (this.#ref) t?.ref();
      else t?.unref();
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
   * Settles once the tree is empty and stdio drained, with the whole result
   * — or, for a job, when it became one: at 'spawn' with `background`, when
   * the main process exited with `leftovers: 'keep'`. Output is collected
   * from the first byte: up to `maxBuffer` once this is read (or from the
   * start when `maxBuffer` was given), up to 1 MiB a stream before.
   */
  get done(): Promise<RunResult> {
    // Reading the result reads the streams, as collecting them always did.
    this.#output.resultWanted();
    this.#flushOutput();
    return this.#done as Promise<RunResult>;
  }

  /** What the whole tree used; null until it is empty ('empty', then 'close'). */
  get usage(): ResourceUsage | null {
    return this.#usage;
  }

  /**
   * stdout and stderr merged in the order they arrived, with `all: true`
   * (else null). The stream starts where it is first read from.
   */
  get all(): Readable | null {
    return this.#opts.output.all ? this.#output.allStream() : null;
  }

  /**
   * `for await (const line of call.lines())`: the lines of stdout (or
   * `{ stream: 'stderr' | 'all' }`) from now on, until the streams end.
   * Call it before the output you want arrives (right after spawn()).
   */
  lines(options?: LinesOptions): AsyncIterableIterator<string> {
    return this.#output.lines(options);
  }

  /** @internal */
  [callPhase](): CallPhase {
    return { stopping: this.#ladder !== null && this.#report === null, empty: this.#empty, closed: this.#closed };
  }

  #ladderFor(reason: CleanupReason, grace: number): Promise<CleanupReport> {
    if (!this.#started) {
      // Still queued: it will never start, and that is no error.
      this[dropQueued](Object.assign(new Error('The call was stopped before it started'), { code: 'ABORT_ERR' }));
      return Promise.resolve(emptyReport(reason, this.confinement, this.#verified));
    }
    this.#startLadder(reason, grace, reason !== 'leftovers');
    return this.#ladder ?? Promise.resolve(this.#report ?? emptyReport(reason, this.confinement, this.#verified));
  }

  /** Starts the ladder once; returns whether it will signal a live tree. */
  #startLadder(reason: CleanupReason, grace: number, kills: boolean): boolean {
    if (!this.#prepareLadder()) return false;
    return this.#ladderStarted(native.terminate(this.#id, grace, this.#opts.killSignal, reason), reason, kills);
  }

  /** Whether a ladder may start now; if so, its promise exists from here. */
  #prepareLadder(): boolean {
    if (this.#report || this.#ladder) return false;
    if (!this.#id || this.#empty || this.#spawnError) return false;
    this.#ladder = new Promise((resolve) => {
      this.#resolveLadder = resolve;
    });
    return true;
  }

  #ladderStarted(reporting: boolean, reason: CleanupReason, kills: boolean): boolean {
    if (!reporting) {
      // The tree emptied before any ladder ran: nothing to stop.
      this.#resolveLadder?.(emptyReport(reason, this.confinement, this.#verified));
      return false;
    }
    if (kills) this.killed = true;
    return true;
  }

  /**
   * The ladder on many calls at once (a supervisor's shutdown): one call into
   * the addon, which freezes each cgroup subtree they share with one write
   * instead of one freeze and thaw per call. @internal
   */
  static [terminateMany](calls: readonly ToolCall[], reason: CleanupReason, grace: number): Promise<CleanupReport[]> {
    const ready: ToolCall[] = [];
    for (const c of calls) {
      if (!c.#started) continue;
      if (c.#prepareLadder()) ready.push(c);
    }
    const reporting = ready.length
      ? native.terminateGroup(ready.map((c) => c.#id), ready.map((c) => c.#opts.killSignal), grace, reason)
      : [];
    ready.forEach((c, i) => c.#ladderStarted(reporting[i] === true, reason, true));
    return Promise.all(calls.map((c) => c.#ladderFor(reason, grace)));
  }

  #onNative(kind: NativeEventKind, a?: number | null | NativeReport | NativeErrorShape | NativeUsage, b?: number | string): void {
    switch (kind) {
      case NativeEventKind.Exit:
        this.#onExit(a as number | null, (b as number | undefined) ?? 0);
        break;
      case NativeEventKind.Cleanup:
        this.#onCleanup(a as NativeReport);
        break;
      case NativeEventKind.Empty:
        this.#onEmpty(a as NativeUsage | undefined);
        break;
      case NativeEventKind.Error:
        this.#emitError(a as NativeErrorShape);
        break;
      case NativeEventKind.Started:
        this.pid = a as number;
        // The systemd tier learns its leaf from the broker.
        if (typeof b === 'string') this.cgroup = b;
        this.emit('spawn');
        break;
      case NativeEventKind.StartFailed:
        this.#fail(spawnError(a as NativeErrorShape, this.#opts.file, this.#opts.argv));
        break;
    }
  }

  #onExit(code: number | null, signal: number): void {
    if (this.#spawnError) return;
    this.#exited = true;
    this.exitCode = code;
    this.signalCode = signalName(signal);
    // As Node: the abort listener goes at 'exit' (a long-lived signal must
    // not collect listeners), and so does our end of stdin.
    this.#removeAbortListener();
    this.stdin?.destroy();
    this.emit('exit', this.exitCode, this.signalCode);
    // Node's flushStdio, a tick later: the listeners of 'exit' may still
    // start reading.
    process.nextTick(() => {
      this.#flushOutput();
    });
    if (this.#ladder || this.#empty || this.#killedAll) return;
    const pids = native.members(this.#id);
    if (pids.length === 0) return;
    const infos = native.processInfo(pids);
    if (infos.length > 0 && this.#opts.leftovers === 'keep') {
      // What the command left running is a job now, not part of the
      // command's time: its timers stop (a background call's bound the job
      // from the start, and keep running). The result comes after one more
      // whole poll phase, so output already in the pipes is in it: a check
      // phase later, and another, since 'exit' may be delivered inside a poll
      // phase after the pipes were polled (or before their reading started).
      this.#remaining = infos;
      if (!this.#opts.background) {
        for (const t of [this.#timer, this.#idleTimer]) if (t) clearTimeout(t);
        this.#timer = null;
        this.#idleTimer = null;
      }
      this.#becomeJob();
      setImmediate(() =>
        setImmediate(() => {
          if (!this.#settleDone) return;
          // Read again: a process caught between fork and exec at 'exit' shows its command by now.
          const now = this.#empty ? [] : native.processInfo(native.members(this.#id));
          if (now.length > 0) this.#remaining = now;
          this.#settleDone();
        }),
      );
    }
    if (infos.length > 0) this.emit('leftover', infos);
    if (this.#opts.leftovers === 'kill') this.#startLadder('leftovers', this.#opts.grace, false);
  }

  #onCleanup(r: NativeReport): void {
    const report = cleanupReport(r, this.confinement);
    this.#report = report;
    this.#resolveLadder?.(report);
    this.emit('cleanup', report);
    const err = leftoversError(report);
    if (err) this.#emitError(err);
  }

  #onEmpty(usage: NativeUsage | undefined): void {
    if (this.#empty || this.#spawnError) return;
    this.#empty = true;
    this.#usage = finalUsage(usage);
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const unverified = this.#verified === 'none';
    // The timeout covers the whole tree; where emptiness is not proven
    // (pgroup), it also covers the pipes until 'close'.
    if (this.#timer && !unverified) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    // A ladder asked for while the empty event was on its way.
    if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport('terminate', this.confinement, this.#verified));
    this.stdin?.destroy();
    this.emit('empty');
    this.pty?.[ptyTreeEmpty]();
    this.#flushOutput();
    if (this.#pipes.openReadable > 0 || this.pty?.[ptyPending]) {
      // Every writer in the tree is gone; one outside it (handed our pipe)
      // must not hang 'close'. Unverified tiers wait `grace` for escapees.
      const wait = unverified ? this.#opts.grace : STDIO_DRAIN_MS;
      this.#drainTimer = setTimeout(() => {
        // After one more poll phase: data already in the pipe is read first.
        setImmediate(() => {
          this.#pipes.releaseReadable();
          this.pty?.[releasePty]();
        });
      }, wait);
      if (!this.#ref) this.#drainTimer.unref();
    }
    this.#maybeClose();
  }

  /** Node's flushStdio: the output streams (pipes, or the terminal) nobody reads are resumed, so they reach their end. */
  #flushOutput(): void {
    this.#pipes.flush();
    this.pty?.[flushPty]();
  }

  #maybeClose(): void {
    if (this.#closed || !this.#empty || this.#pipes.openReadable > 0 || this.pty?.[ptyPending]) return;
    this.#closed = true;
    for (const t of [this.#timer, this.#idleTimer, this.#drainTimer]) if (t) clearTimeout(t);
    this.#timer = null;
    this.#idleTimer = null;
    this.#drainTimer = null;
    this.#removeAbortListener();
    this.#owner.release(this);
    this.emit('close', this.exitCode, this.signalCode);
  }

  #collect(run: ResolvedRun): Promise<RunResult<string | Buffer>> {
    if (this.pty) {
      if (run.input !== undefined || run.closeStdin) typeInput(this.pty, run.input);
    } else if (this.stdin) {
      if (run.input !== undefined) this.stdin.end(run.input);
      else if (run.closeStdin) this.stdin.end();
    }
    return new Promise((resolve, reject) => {
      if (this.#spawnError) {
        reject(this.#spawnError);
        return;
      }
      this.#rejectDone = reject;
      const settle = (): void => {
        if (this.#spawnError || !this.#settleDone) return;
        this.#settleDone = null;
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
              usage: this.#usage ?? usageSoFar(this.cgroup, Math.max(1, this.#remaining.length)),
              jobId: this.jobId,
              remaining: this.#remaining,
            },
            this.#output,
            run.encoding,
          ),
        );
        // Delivered: what comes later is the job's (its ring), not the result's.
        this.#output.stopCollecting();
      };
      this.#settleDone = settle;
      // A background call's result is its start.
      if (this.#opts.background) this.once('spawn', settle);
      this.once('close', settle);
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
