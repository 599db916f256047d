// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
//
// This file is the call's lifecycle (queued, started, exited, empty, closed)
// and its public surface; what it starts with is in call/start.ts, its
// ladder and timers in call/ladder.ts, its flags and lazily made state in
// call/state.ts, its result in call/result.ts, its pipes in stdio.ts, the
// collection of its output in output.ts, and what a job is in jobs.ts.
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Readable, Writable } from 'node:stream';

import { binding } from './binding';
import {
  type NativeErrorShape,
  type NativeEvent,
  nativeEvent,
  NativeEventKind,
  type NativeReport,
  type NativeUsage,
} from './binding/contract';
import { CallLadder, CallTimers, STDIO_DRAIN_MS, STOP_EXEC_WAIT_MS } from './call/ladder';
import { CallDone, cleanupReport, emptyReport, finalUsage, leftoversError, runResult, usageSoFar } from './call/result';
import { settingsFor, type Settings, spawnSpec, spawnTickBudget, throwsLikeNode } from './call/start';
import {
  ABORTED,
  afterPipesPolled,
  CallExtras,
  callPhase,
  callSlot,
  CLOSED,
  CONSTRUCTING,
  dropQueued,
  EMPTY,
  EXEC_PENDING,
  EXITED,
  HOLDS_SLOT,
  jobOutcome,
  KILLED_ALL,
  resultEncoding,
  settledResult,
  SPAWN_EMITTED,
  STARTED,
  terminateMany,
  TIMED_OUT,
  UNREF,
  verifiedOf,
  watchReady,
  withVerified,
} from './call/state';
import { tierFor, warnNoGuardian } from './capabilities';
import { AbortError, proctreeError, spawnError, spawnThrow } from './errors';
import type { CallPhase } from './jobs';
import { checkGrace, type ResolvedRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import { ByteTail, CallOutput, type LinesOptions, outputNow, tapLater } from './output';
import { normalizeListeners, type ResolvedReady } from './ports';
import { attachMaster, flushPty, noTerminal, PtyStream, ptyPending, ptyTreeEmpty, releasePty, setPtyRef, typeInput } from './pty';
import { ReadyWait } from './ready';
import {
  type CallPipes,
  type ChildSide,
  closeChildEnds,
  destroyPipes,
  flushPipes,
  isUsedAsStdio,
  makePipes,
  releaseReadable,
  setPipesRef,
  stdioClosed,
  takeForChild,
} from './stdio';
import type { CleanupReason, CleanupReport, Confinement, Listener, ProcessInfo, ReadyState, ResourceUsage, RunResult } from './types';

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
  /** The call's ladder reported (before the call's own 'cleanup' listeners hear of it). */
  cleanup(call: ToolCall, report: CleanupReport): void;
  /** An 'error' the call has no listener for. */
  unhandledError(call: ToolCall, err: Error): void;
  /** The call is a job now (its id is set): list it, and free its slot. `startedAt`: when the call started (ms since the epoch). */
  adoptJob(call: ToolCall, ring: ByteTail, startedAt: number): void;
}

export interface ToolCallEvents {
  spawn: [];
  exit: [code: number | null, signal: NodeJS.Signals | null];
  leftover: [processes: ProcessInfo[]];
  cleanup: [report: CleanupReport];
  empty: [];
  close: [code: number | null, signal: NodeJS.Signals | null];
  error: [err: Error];
  /** options.ready held: what was seen (also `result.ready`). */
  ready: [state: ReadyState];
}

/** Whether reading a stream is ours to start (not one handed to another call as its stdio). */
function canResume(s: Readable): boolean {
  return !isUsedAsStdio(s);
}

/**
 * A start error that Node throws from spawn() (see throwsLikeNode), carried
 * from #start() out of the constructor that admitted the call: construction
 * is synchronous, so one slot serves every call.
 */
let throwFromConstructor: Error | null = null;

export class ToolCall extends EventEmitter {
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
  /**
   * Absolute path of the call's cgroup leaf; null while queued, when it could not start, or in a tier other than
   * `cgroup`. The call's until 'close'; then the leaf may serve a later call of the harness (see README, spawn).
   */
  cgroup: string | null = null;
  /** The executable (the shell's path with `shell`), as ChildProcess#spawnfile. */
  readonly spawnfile: string;
  /** argv, argv[0] included, as ChildProcess#spawnargs. */
  readonly spawnargs: string[];
  /**
   * `c<N>`, the name of its cgroup leaf, once the call is a job of its supervisor (`background: true`
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
  /**
   * The options a call reads all its life: until it starts, all of them
   * (its start reads the environment, cwd, stdio, …); from then on only its
   * settings, often shared with other calls.
   */
  #opts: Settings;
  readonly #owner: CallOwner;
  readonly #createdAt = performance.now();
  #startedAt = 0;
  /**
   * started, exited, empty, closed, timedOut, aborted, unref'd, killedAll,
   * constructing: one field for the flags of the call's life (a harness
   * holds many live calls), read and written through the accessors below.
   */
  #flags = 0;
  #pid: number | undefined = undefined;
  /** What the start hands the child, and the pipe ends ours to close then (stdio.ts): null once started. */
  #child: ChildSide | null;
  /** Our readable streams not yet closed (stdio[1…]): 'close' waits for them. */
  #openReadable: number;
  /** The state most live calls never need, made when a part of it is set (see CallExtras). */
  #x: CallExtras | null = null;

  #extras(): CallExtras {
    this.#x ??= new CallExtras();
    return this.#x;
  }

  #timers(): CallTimers {
    return (this.#extras().timers ??= new CallTimers());
  }

  #doneState(): CallDone {
    return (this.#extras().done ??= new CallDone());
  }

  #flag(bit: number): boolean {
    return (this.#flags & bit) !== 0;
  }

  #setFlag(bit: number, on: boolean): void {
    this.#flags = on ? this.#flags | bit : this.#flags & ~bit;
  }

  /**
   * Pid of the main process (the command, as this process numbers it, in
   * every tier: for pidns and subreaper it is the shim's child, not the
   * shim); undefined while queued, until a pidns/subreaper start is
   * confirmed, or when it could not start.
   */
  get pid(): number | undefined {
    // The command is cloned without waiting for its exec: asked before the
    // tick that reports it, the answer waits for the exec, so a command that
    // could not start has none, as Node's.
    this.#knowStart();
    return this.#pid;
  }

  /**
   * `pid` as Node has it once known: an own, enumerable data property
   * (Object.keys, spread, util.inspect show it), shadowing the getter that
   * waits for a pending exec report.
   */
  #publishPid(): void {
    Object.defineProperty(this, 'pid', { value: this.#pid, writable: true, enumerable: true, configurable: true });
  }

  /** Whether the command started is known from here on (a signal or a ladder needs it: a command that never ran gets neither). */
  #knowStart(waitMs?: number): void {
    if (this.#flag(EXEC_PENDING)) this.#settleExec(waitMs);
  }

  /**
   * Asks for the exec report now (it also comes as an event), waiting for it
   * up to `waitMs` (default: the addon's bound, past which the command
   * counts as started). A command that could not start fails now: 'error' on
   * the next tick, then 'close'. A shorter wait that ends first leaves the
   * report to its event.
   */
  #settleExec(waitMs?: number): void {
    const res = waitMs === undefined ? binding.settle(this.#id) : binding.settle(this.#id, waitMs);
    if (res === false) return;
    this.#setFlag(EXEC_PENDING, false);
    if (res !== true) this.#pid = undefined;
    this.#publishPid();
    if (res !== true) this.#fail(spawnError(res, this.spawnfile, this.spawnargs));
  }

  /** 'spawn', once. */
  static #emitSpawn(call: ToolCall): void {
    if (call.#flag(SPAWN_EMITTED)) return;
    call.#setFlag(SPAWN_EMITTED, true);
    call.emit('spawn');
  }

  /**
   * The tick after spawn(), where Node emits 'spawn': the report is asked
   * for, within what this run of ticks may still wait (SPAWN_TICK_WAIT_MS);
   * a report not in by then emits 'spawn' (or 'error') when it comes.
   */
  static #spawnTick(call: ToolCall): void {
    call.#knowStart(spawnTickBudget());
    if (!call.#flag(EXEC_PENDING) && call.#pid !== undefined && !call.#x?.spawnError) ToolCall.#emitSpawn(call);
  }


  /** @internal use spawn() or Supervisor#spawn() */
  constructor(opts: ResolvedSpawn, owner: CallOwner, run?: ResolvedRun) {
    super();
    this.#opts = opts;
    this.#owner = owner;
    this.spawnfile = opts.file;
    this.spawnargs = opts.argv;
    // Before anything is created: an explicit tier this host cannot run throws
    // here; probes that ran out of fds (EMFILE) are this spawn's 'error', as Node's.
    const { tier, shortage } = tierFor(opts.confinement);
    this.confinement = tier;

    let stdioError: NativeErrorShape | null = null;
    let pipes: CallPipes;
    try {
      if (shortage) throw shortage;
      pipes = makePipes(opts.stdio, this, run && !opts.pty ? { input: run.input !== undefined } : undefined);
    } catch (err) {
      // Out of fds (EMFILE) while making the pipes: as Node, an 'error', not a throw.
      stdioError = err as NativeErrorShape;
      pipes = makePipes(opts.stdio.map(() => ({ kind: 'ignore' as const })), this);
    }
    this.#child = pipes.child;
    this.#openReadable = pipes.openReadable;
    const streams = pipes.streams;
    this.stdio = streams;
    this.stdin = (streams[0] as Writable | null | undefined) ?? null;
    this.stdout = (streams[1] as Readable | null | undefined) ?? null;
    this.stderr = (streams[2] as Readable | null | undefined) ?? null;
    this.pty = opts.pty ? new PtyStream(opts.pty, () => this.#maybeClose(), () => this.members()) : null;
    // Output is collected from the first byte, so `done` read late loses
    // nothing: streams are tapped now, and the CallOutput is made when the
    // first chunk arrives or something asks for it.
    if ((this.pty || this.stdout || this.stderr) && !tapLater(this.#sources(), this)) this.#out();
    if (opts.background || opts.leftovers === 'keep') {
      const ring = new ByteTail(opts.jobBuffer);
      this.#extras().ring = ring;
      this.#out().subscribe((chunk) => ring.write(chunk));
    }
    if (opts.ready) this.#readyWait(opts.ready);
    if (opts.idleTimeout > 0) this.#out().subscribe(() => this.#x?.timers?.idle?.refresh());
    if (run) this.#feedInput(run);
    // A call that can become a job takes its result when it does.
    if (run) this.#doneState().encoding = run.encoding;
    if (run || opts.background || opts.leftovers === 'keep') this.#donePromise();
    // run() reads the streams itself (nobody else can) and wants the result.
    if (run) {
      this.#out().resultWanted();
      this.#flushOutput();
    }
    if (stdioError) {
      this.#setFlag(STARTED, true);
      this.#fail(spawnError(stdioError, opts.file, opts.argv));
      return;
    }
    this.#setFlag(CONSTRUCTING, true);
    owner.admit(this, () => this.#start(), opts.background);
    this.#setFlag(CONSTRUCTING, false);
    const thrown = throwFromConstructor;
    throwFromConstructor = null;
    // After admit: an already aborted signal acts a tick after 'spawn' was queued, as in Node.
    if (!thrown) this.#watchSignal();
    if (thrown) {
      this.#removeAbortListener();
      this.#closeChildEnds();
      destroyPipes(this.stdio, null);
      owner.release(this);
      throw thrown;
    }
  }

  // Node listens from spawn() on; so do we, which also lets an abort
  // take a queued call out of the queue.
  #watchSignal(): void {
    const signal = this.#opts.signal;
    if (!signal) return;
    const onAbort = () => this.#abort(signal.reason);
    this.#extras().onAbort = onAbort;
    if (signal.aborted) process.nextTick(onAbort);
    else signal.addEventListener('abort', onAbort, { once: true });
  }

  #removeAbortListener(): void {
    if (this.#x?.onAbort) this.#opts.signal?.removeEventListener('abort', this.#x?.onAbort);
    if (this.#x) this.#x.onAbort = null;
  }

  #abort(reason: unknown): void {
    if (!this.#x?.onAbort) return;
    this.#removeAbortListener();
    const err = new AbortError(undefined, { cause: reason });
    if (!this.#flag(STARTED)) {
      // Queued: it never starts. Node would have killed it; the caller
      // asked to stop it, and gets the same AbortError.
      this.#drop(err, true);
      return;
    }
    this.#knowStart();
    if (this.#x?.spawnError || this.#flag(EXITED)) return;
    this.#setFlag(ABORTED, true);
    // As Node's abortChildProcess: 'error' only when the signal was delivered.
    if (this.#startLadder('abort', this.#opts.grace, true)) this.#emitError(err);
  }

  #start(): void {
    if (this.#flag(STARTED)) return;
    this.#setFlag(STARTED, true);
    this.#startedAt = performance.now();
    // Its start is the one reader of the whole options: from here on, its settings.
    const opts = this.#opts as ResolvedSpawn;
    this.#opts = settingsFor(opts);
    // A job's startedAt, in ms since the epoch (only a call with a ring can become one).
    if (this.#x?.ring) this.#extras().startedAtEpoch = Date.now();
    let res;
    try {
      const spec = spawnSpec(this.#owner.group, opts, takeForChild(this.#child), this.confinement, this.pty);
      res = binding.spawn(spec, ToolCall.#nativeEvent.bind(this));
    } catch (err) {
      res = { error: err as NativeErrorShape };
    }
    this.#closeChildEnds();
    if ('error' in res) {
      if (this.#flag(CONSTRUCTING) && throwsLikeNode(res.error)) throwFromConstructor = spawnThrow(res.error);
      else this.#fail(spawnError(res.error, opts.file, opts.argv));
      this.#publishPid();
      return;
    }
    this.#id = res.id;
    this.#flags = withVerified(this.#flags, res.verified);
    if (res.ptyMaster !== undefined) this.pty?.[attachMaster](res.ptyMaster);
    this.cgroup = res.cgroup === '' ? null : res.cgroup;
    if (res.guardianError) warnNoGuardian(res.guardianError);
    if (!res.pending) {
      this.#pid = res.pid;
      if (res.execPending) {
        this.#setFlag(EXEC_PENDING, true);
        process.nextTick(ToolCall.#spawnTick, this);
      } else {
        this.#publishPid();
        process.nextTick(ToolCall.#emitSpawn, this);
      }
    }

    if (opts.timeout > 0) this.#timers().timeout = setTimeout(() => this.#onTimeout(), opts.timeout);
    if (opts.idleTimeout > 0) this.#timers().idle = setTimeout(() => this.#onIdle(), opts.idleTimeout);
    if (opts.background) this.#becomeJob();
    this.#x?.readyWait?.start(this.#startedAt);
    if (!!this.#flag(UNREF)) this.#applyRef();
  }

  #readyWait(ready: ResolvedReady): ReadyWait {
    const wait = new ReadyWait(ready, {
      ports: () => this.ports(),
      reached: (state) => this.#onReady(state),
      expired: () => void this.#startLadder('not-ready', this.#opts.grace, true),
    });
    this.#extras().readyWait = wait;
    if (ready.output !== null) this.#out().subscribe((chunk) => wait.output(chunk));
    return wait;
  }

  /** @internal see watchReady */
  [watchReady](ready: ResolvedReady): void {
    if (this.#x?.readyWait) return;
    const wait = this.#readyWait(ready);
    if (this.started && !this.#x?.spawnError && !this.#flag(EMPTY)) wait.start(this.#startedAt);
  }

  /** options.ready held: the call is a job now, and its result (run()) is due. */
  #onReady(state: ReadyState): void {
    this.#extras().readyState = state;
    if (!this.#x?.ring) {
      // Not a call that can be a job (watchReady): it is only told.
      this.emit('ready', state);
      return;
    }
    if (!this.#opts.background) {
      // As when a command exits leaving a job: the job's time is not the command's.
      this.#x?.timers?.stopCommand();
      if (!this.#flag(EMPTY)) this.#extras().remaining = binding.processInfo(binding.members(this.#id));
    }
    this.#becomeJob();
    this.emit('ready', state);
    this.#settle();
  }

  #onIdle(): void {
    if (this.#x?.timers) this.#x.timers.idle = null;
    void this.#startLadder('idle', this.#opts.grace, true);
  }

  /**
   * Keeps the leaf's cgroup id for the report (see CallExtras.leafId): on
   * cgroup2 a directory's inode number is the id sock_diag filters on.
   */
  #watchPorts(): void {
    if (!this.cgroup || this.#x?.leafId) return;
    try {
      this.#extras().leafId = fs.statSync(this.cgroup, { bigint: true }).ino;
    } catch {
      // Gone already: the tree is too.
    }
  }

  /** From now on the call is a job: listed by its supervisor, its output flowing to the ring whoever reads. */
  #becomeJob(): void {
    if (this.jobId !== null || !this.#x?.ring) return;
    // The id `proctree ps` reads from the kernel: the leaf's name, which is
    // the id of the call that made it when a leaf serves again. A job's
    // leaf never serves another call, so no two jobs share one.
    this.jobId = this.confinement === 'cgroup' && this.cgroup ? path.basename(this.cgroup) : `c${this.#id}`;
    this.#watchPorts();
    this.#extras().cpuBase = binding.retire(this.#id);
    this.#out().flowAlways();
    this.#owner.adoptJob(this, this.#x?.ring, this.#x?.startedAtEpoch);
  }

  #onTimeout(): void {
    if (this.#x?.timers) this.#x.timers.timeout = null;
    this.#setFlag(TIMED_OUT, true);
    if (this.#flag(EMPTY)) {
      // pgroup: the visible tree is gone but something still holds our
      // pipes, maybe an escapee we cannot see: the timeout ends the wait.
      this.#releaseReadable();
      this.pty?.[releasePty]();
      return;
    }
    void this.#startLadder('timeout', this.#opts.grace, true);
  }

  /** The call never ran: 'error', then its streams end and 'close' follows; its slot is freed. */
  #fail(err: Error): void {
    this.#extras().spawnError = err;
    const errno = (err as { errno?: unknown }).errno;
    if (typeof errno === 'number') this.exitCode = errno;
    this.#end(err, true);
  }

  /** Ends a call that has no process: `emitError` says whether 'error' is due. */
  #end(err: Error, emitError: boolean): void {
    this.#extras().spawnError ??= err;
    this.#x?.readyWait?.stop();
    this.#x?.done?.reject(err);
    this.#removeAbortListener();
    this.#closeChildEnds();
    this.stdin?.destroy();
    this.pty?.[releasePty]();
    process.nextTick(() => {
      this.#owner.release(this);
      if (emitError) this.#emitError(err);
      if (this.#x?.ladder?.running) this.#x.ladder.endEmpty(this.confinement, verifiedOf(this.#flags));
      this.#setFlag(EMPTY, true);
      this.#flushOutput();
      this.#maybeClose();
    });
  }

  /** A queued call that will never start: out of the queue, closed. */
  #drop(err: Error, emitError: boolean): void {
    if (this.#flag(STARTED)) return;
    this.#setFlag(STARTED, true);
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
    this.#knowStart();
    return this.#id && !this.#flag(EMPTY) ? binding.members(this.#id) : [];
  }

  /**
   * What the whole tree listens on now (escapees included, nothing outside
   * it): listening TCP sockets (IPv4 and IPv6), bound UDP sockets and
   * listening unix stream sockets, each with the member holding it. Asked
   * off the JavaScript thread (the /proc reads take a few ms); [] for a call
   * not started yet or whose tree is gone.
   */
  ports(): Promise<Listener[]> {
    this.#knowStart();
    if (!this.#id || this.#flag(EMPTY) || this.#x?.spawnError) return Promise.resolve([]);
    this.#watchPorts();
    const ask = binding.ports?.bind(binding);
    if (!ask) {
      return Promise.reject(
        proctreeError('ERR_PROCTREE_PORTS_UNSUPPORTED', 'ports() needs the Linux addon, and this process runs the portable binding'),
      );
    }
    const id = this.#id;
    return new Promise((resolve, reject) => {
      ask(id, (err, list) => {
        if (err) reject(err);
        else resolve(normalizeListeners(list ?? []));
      });
    });
  }

  /**
   * Sends one signal to every process of the tree (escapees included), with
   * no escalation. Returns whether at least one process got it, and sets
   * `killed` then, as ChildProcess#kill does. `0` only probes.
   */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const num = signalNumber(signal);
    this.#knowStart();
    if (!this.#id || this.#flag(EMPTY) || this.#x?.spawnError) return false;
    const n = binding.kill(this.#id, num);
    if (n > 0) this.killed = true;
    // SIGKILL goes through cgroup.kill: the whole tree is already dying, so
    // members seen after the main process exits are not leftovers.
    if (n > 0 && num === signalNumber('SIGKILL')) this.#setFlag(KILLED_ALL, true);
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

  /** `using call = spawn(…)`: stops the whole tree when the scope ends, unless it was already signalled. */
  [Symbol.dispose](): void {
    if (!this.killed && !this.#flag(CLOSED)) void this.terminate().catch(() => {});
  }

  /** `await using call = spawn(…)`: stops the whole tree and waits for 'close'. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#flag(CLOSED)) return;
    const closed = new Promise<void>((resolve) => this.once('close', () => resolve()));
    await this.terminate();
    await closed;
  }

  /**
   * Lets the harness exit while the call runs, like ChildProcess#unref().
   * The call is still stopped then: the exit hook kills every live call.
   */
  unref(): this {
    this.#setFlag(UNREF, true);
    this.#applyRef();
    return this;
  }

  /** Undoes unref(): the call keeps the event loop alive again (the default). */
  ref(): this {
    this.#setFlag(UNREF, false);
    this.#applyRef();
    return this;
  }

  #applyRef(): void {
    setPipesRef(this.stdio, !this.#flag(UNREF));
    this.pty?.[setPtyRef](!this.#flag(UNREF));
    this.#x?.timers?.ref(!this.#flag(UNREF));
    if (this.#id && !this.#flag(EMPTY)) binding.setRef(this.#id, !this.#flag(UNREF));
  }

  /** Whether `timeout` ran out and stopped the call. */
  get timedOut(): boolean {
    return this.#flag(TIMED_OUT);
  }

  /** Whether `signal` was aborted and stopped the call. */
  get aborted(): boolean {
    return this.#flag(ABORTED);
  }

  /** The report of the ladder, once one ran; null before (or when none was needed). */
  get cleanupReport(): CleanupReport | null {
    return this.#x?.ladder?.report ?? null;
  }

  /** Whether the call has started (false while it waits for a slot). */
  get started(): boolean {
    return this.#flag(STARTED) && !this.#x?.spawnError;
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
    this.#out().resultWanted();
    this.#flushOutput();
    return this.#donePromise() as Promise<RunResult>;
  }

  /** What the whole tree used; null until it is empty ('empty', then 'close'). */
  get usage(): ResourceUsage | null {
    return this.#x?.usage ?? null;
  }

  /**
   * stdout and stderr merged in the order they arrived, with `all: true`
   * (else null). The stream starts where it is first read from.
   */
  get all(): Readable | null {
    return this.#opts.output.all ? this.#out().allStream() : null;
  }

  /**
   * `for await (const line of call.lines())`: the lines of stdout (or
   * `{ stream: 'stderr' | 'all' }`) from now on, until the streams end.
   * Call it before the output you want arrives (right after spawn()).
   */
  lines(options?: LinesOptions): AsyncIterableIterator<string> {
    return this.#out().lines(options);
  }

  /** @internal */
  [resultEncoding](encoding: BufferEncoding | 'buffer'): void {
    this.#doneState().encoding = encoding;
  }

  /** @internal */
  [settledResult](): RunResult<string | Buffer> | null {
    // A call that closed settles `done` at 'close'; nobody made it yet: it is made now, as it would have been then.
    const done = this.#x?.done;
    if (!done?.settled && this.#flag(CLOSED) && !done?.promise && !this.#x?.spawnError) this.#donePromise();
    return this.#x?.done?.settled ?? null;
  }

  /** @internal */
  [jobOutcome](): { remaining: ProcessInfo[]; usage: ResourceUsage } {
    const remaining = this.#x?.remaining ?? [];
    return { remaining, usage: this.#x?.usage ?? usageSoFar(this.cgroup, Math.max(1, remaining.length), this.#x?.cpuBase) };
  }

  /** @internal */
  [callPhase](): CallPhase {
    return { stopping: this.#x?.ladder?.running === true, empty: this.#flag(EMPTY), closed: this.#flag(CLOSED) };
  }

  #ladderFor(reason: CleanupReason, grace: number): Promise<CleanupReport> {
    if (!this.#flag(STARTED)) {
      // Still queued: it will never start, and that is no error.
      this[dropQueued](new AbortError('The call was stopped before it started'));
      return Promise.resolve(emptyReport(reason, this.confinement, verifiedOf(this.#flags)));
    }
    this.#startLadder(reason, grace, reason !== 'leftovers');
    return this.#x?.ladder?.promise ?? Promise.resolve(emptyReport(reason, this.confinement, verifiedOf(this.#flags)));
  }

  /** Starts the ladder once; returns whether it will signal a live tree. */
  #startLadder(reason: CleanupReason, grace: number, kills: boolean): boolean {
    if (!this.#prepareLadder(reason)) return false;
    return this.#ladderStarted(binding.terminate(this.#id, grace, this.#opts.killSignal, reason), kills);
  }

  /** Whether a ladder may start now; if so, its promise exists from here. */
  #prepareLadder(reason: CleanupReason, stopBy = performance.now() + STOP_EXEC_WAIT_MS): boolean {
    if (this.#x?.ladder) return false;
    // A command held before its exec (its subtree frozen by someone) must
    // not hold a shutdown for long: the ladder stops its tree either way.
    this.#knowStart(Math.max(0, Math.floor(stopBy - performance.now())));
    if (!this.#id || this.#flag(EMPTY) || this.#x?.spawnError) return false;
    this.#extras().ladder = new CallLadder(reason);
    return true;
  }

  #ladderStarted(reporting: boolean, kills: boolean): boolean {
    if (!reporting) {
      // The tree emptied before any ladder ran: nothing to stop.
      this.#x?.ladder?.endEmpty(this.confinement, verifiedOf(this.#flags));
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
    // One wait for every exec report not in yet, not one each.
    const stopBy = performance.now() + STOP_EXEC_WAIT_MS;
    for (const c of calls) {
      if (!c.#flag(STARTED)) continue;
      if (c.#prepareLadder(reason, stopBy)) ready.push(c);
    }
    const reporting = ready.length
      ? binding.terminateGroup(ready.map((c) => c.#id), ready.map((c) => c.#opts.killSignal), grace, reason)
      : [];
    ready.forEach((c, i) => c.#ladderStarted(reporting[i] === true, true));
    return Promise.all(calls.map((c) => c.#ladderFor(reason, grace)));
  }

  /**
   * What the addon calls with the call's events, bound to the call: a bound
   * function is smaller than a closure and the context it keeps, and the
   * addon holds one per live call.
   */
  static readonly #nativeEvent = function (
    this: ToolCall,
    kind: NativeEventKind,
    a?: number | null | NativeReport | NativeErrorShape | NativeUsage,
    b?: number | string,
  ): void {
    this.#onNative(nativeEvent(kind, a, b));
  };

  /** @internal sets whether the call holds a slot of its supervisor's; returns whether it held one before. */
  [callSlot](hold: boolean): boolean {
    const held = this.#flag(HOLDS_SLOT);
    this.#setFlag(HOLDS_SLOT, hold);
    return held;
  }

  /** @internal one of its readable streams closed */
  [stdioClosed](): void {
    this.#openReadable--;
    this.#maybeClose();
  }

  /** The child holds its own copies once it started (or never will): ours would keep the pipes open. */
  #closeChildEnds(): void {
    const child = this.#child;
    this.#child = null;
    closeChildEnds(child);
  }

  /** Closes our ends of the readable pipes still open (a holder outside the tree keeps them from EOF). */
  #releaseReadable(): void {
    if (this.#openReadable > 0) releaseReadable(this.stdio);
  }

  #onNative(ev: NativeEvent): void {
    switch (ev.kind) {
      case NativeEventKind.Exit:
        this.#onExit(ev.code, ev.signal);
        break;
      case NativeEventKind.Cleanup:
        this.#onCleanup(ev.report);
        break;
      case NativeEventKind.Empty:
        this.#onEmpty(ev.usage);
        break;
      case NativeEventKind.Error:
        this.#emitError(ev.error);
        break;
      case NativeEventKind.Started:
        // A pending exec that `pid` already settled keeps what it found.
        if (this.#flag(EXEC_PENDING) || this.#pid === undefined) this.#pid = ev.pid;
        this.#setFlag(EXEC_PENDING, false);
        this.#publishPid();
        // The systemd tier learns its leaf from the broker.
        if (ev.cgroup !== undefined) this.cgroup = ev.cgroup;
        ToolCall.#emitSpawn(this);
        break;
      case NativeEventKind.StartFailed:
        // Already failed when `pid` settled the exec synchronously.
        if (this.#x?.spawnError) break;
        this.#setFlag(EXEC_PENDING, false);
        this.#pid = undefined;
        this.#publishPid();
        this.#fail(spawnError(ev.error, this.spawnfile, this.spawnargs));
        break;
    }
  }

  #onExit(code: number | null, signal: number): void {
    if (this.#x?.spawnError) return;
    this.#setFlag(EXITED, true);
    this.exitCode = code;
    this.signalCode = signalName(signal);
    // As Node: the abort listener goes at 'exit' (a long-lived signal must
    // not collect listeners), and so does our end of stdin.
    this.#removeAbortListener();
    this.stdin?.destroy();
    this.emit('exit', this.exitCode, this.signalCode);
    // Node's flushStdio, a tick later: the listeners of 'exit' may still
    // start reading. (Nothing to flush without output streams.)
    if (this.#openReadable > 0 || this.pty) process.nextTick(ToolCall.#flushLater, this);
    if (this.#x?.ladder || this.#flag(EMPTY) || this.#flag(KILLED_ALL)) return;
    const pids = binding.members(this.#id);
    if (pids.length === 0) return;
    const infos = binding.processInfo(pids);
    if (infos.length > 0 && this.#opts.leftovers === 'keep') {
      // What the command left running is a job now, not part of the
      // command's time: its timers stop (a background call's bound the job
      // from the start, and keep running). The result comes once output
      // already in the pipes has been read.
      this.#extras().remaining = infos;
      if (!this.#opts.background) {
        this.#x?.timers?.stopCommand();
      }
      this.#becomeJob();
      afterPipesPolled(() => {
        // Waiting for options.ready: the result comes with it (or at 'close').
        if (!this.#x?.done?.waiting || this.#x.readyWait?.pending) return;
        // Read again: a process caught between fork and exec at 'exit' shows its command by now.
        const now = this.#flag(EMPTY) ? [] : binding.processInfo(binding.members(this.#id));
        if (now.length > 0) this.#extras().remaining = now;
        this.#settle();
      });
    }
    if (infos.length > 0) this.emit('leftover', infos);
    if (this.#opts.leftovers === 'kill') this.#startLadder('leftovers', this.#opts.grace, false);
  }

  #onCleanup(r: NativeReport): void {
    const report = cleanupReport(r, this.confinement);
    // A ladder the addon ran on its own (none was asked for here) reports too.
    const ladder = (this.#extras().ladder ??= new CallLadder(report.reason));
    ladder.report = report;
    // A call that listened (a job, `ready`, or ports() asked): whatever its
    // leaf's sockets still listen on with the tree gone is held by a process
    // outside it (a socket handed away), and the report says so. The
    // kernel is asked off the JS thread; the report and 'close' wait for it.
    const ask = binding.ports?.bind(binding);
    const leafId = this.#x?.leafId;
    if (ask && leafId) {
      const x = this.#extras();
      x.heldCheck = true;
      ask([leafId], (err, list) => {
        if (!err && list && list.length > 0) report.heldOutside = normalizeListeners(list);
        x.heldCheck = false;
        this.#reportReady(report);
        this.#maybeClose();
      });
      return;
    }
    this.#reportReady(report);
  }

  #reportReady(report: CleanupReport): void {
    this.#x?.ladder?.deliver(report);
    // The supervisor's 'cleanup' first, as when it was the call's first listener.
    this.#owner.cleanup(this, report);
    this.emit('cleanup', report);
    const err = leftoversError(report);
    if (err) this.#emitError(err);
  }

  #onEmpty(usage: NativeUsage | undefined): void {
    if (this.#flag(EMPTY) || this.#x?.spawnError) return;
    this.#setFlag(EMPTY, true);
    this.#x?.readyWait?.stop();
    this.#extras().usage = finalUsage(usage);
    const timers = this.#x?.timers;
    if (timers?.idle) clearTimeout(timers.idle);
    if (timers) timers.idle = null;
    const unverified = verifiedOf(this.#flags) === 'none';
    // The timeout covers the whole tree; where emptiness is not proven
    // (pgroup), it also covers the pipes until 'close'.
    if (timers?.timeout && !unverified) {
      clearTimeout(timers.timeout);
      timers.timeout = null;
    }
    // A ladder asked for while the empty event was on its way.
    if (this.#x?.ladder?.running) this.#x.ladder.endEmpty(this.confinement, verifiedOf(this.#flags));
    this.stdin?.destroy();
    this.emit('empty');
    this.pty?.[ptyTreeEmpty]();
    this.#flushOutput();
    if (this.#openReadable > 0 || this.pty?.[ptyPending]) {
      // Every writer in the tree is gone; one outside it (handed our pipe)
      // must not hang 'close'. Unverified tiers wait `grace` for escapees.
      const wait = unverified ? this.#opts.grace : STDIO_DRAIN_MS;
      const drain = setTimeout(() => {
        // After one more poll phase: data already in the pipe is read first.
        setImmediate(() => {
          this.#releaseReadable();
          this.pty?.[releasePty]();
        });
      }, wait);
      if (this.#flag(UNREF)) drain.unref();
      this.#timers().drain = drain;
    }
    this.#maybeClose();
  }

  static #flushLater(call: ToolCall): void {
    call.#flushOutput();
  }

  /** Node's flushStdio: the output streams (pipes, or the terminal) nobody reads are resumed, so they reach their end. */
  #flushOutput(): void {
    if (this.#openReadable > 0) flushPipes(this.stdio);
    this.pty?.[flushPty]();
  }

  #maybeClose(): void {
    if (this.#flag(CLOSED) || !this.#flag(EMPTY) || this.#openReadable > 0 || this.pty?.[ptyPending] || this.#x?.heldCheck) return;
    this.#setFlag(CLOSED, true);
    // Kept for a result built later (the server asks at its own time).
    this.#doneState().closedAt = performance.now();
    this.#x?.timers?.stopAll();
    this.#removeAbortListener();
    this.#owner.release(this);
    // The result first, as the first listener of 'close' it always was.
    this.#settle();
    this.emit('close', this.exitCode, this.signalCode);
  }

  /** The output streams: a terminal is one stream for both, and what it shows is stdout. */
  #sources(): { stdout: Readable | null; stderr: Readable | null } {
    return this.pty ? { stdout: this.pty, stderr: this.pty } : { stdout: this.stdout, stderr: this.stderr };
  }

  /** The call's CallOutput, made now if it was not. */
  #out(): CallOutput {
    const x = this.#extras();
    x.output ??= new CallOutput(this.#sources(), this.#opts.output, canResume);
    return x.output;
  }

  /** @internal a tapped stream's first chunk (or end): the CallOutput it goes to. */
  [outputNow](): CallOutput {
    return this.#out();
  }

  /** run()'s input, or stdin closed. */
  #feedInput(run: ResolvedRun): void {
    if (this.pty) {
      if (run.input !== undefined || run.closeStdin) typeInput(this.pty, run.input);
    } else if (this.stdin) {
      if (run.input !== undefined) this.stdin.end(run.input);
      else if (run.closeStdin) this.stdin.end();
    }
  }

  /** `done`, made on first use: settled already when the call failed or closed before. */
  #donePromise(): Promise<RunResult<string | Buffer>> {
    const state = this.#doneState();
    if (state.promise) return state.promise;
    const done = state.make(this.#x?.spawnError ?? null, this.#flag(CLOSED), () => this.#result());
    // A background call's result is its start.
    if (state.waiting && this.#opts.background && !this.#x?.readyWait) this.once('spawn', () => this.#settle());
    return done;
  }

  /** Resolves `done`, if anybody made it, with what is known now (at 'close', or when the call became a job). */
  #settle(): void {
    if (!this.#x?.spawnError) this.#x?.done?.settle(() => this.#result());
  }

  #result(): RunResult<string | Buffer> {
    const output = this.#out();
    const result = runResult(
      {
        exitCode: this.exitCode,
        signal: this.signalCode,
        timedOut: this.#flag(TIMED_OUT),
        aborted: this.#flag(ABORTED),
        createdAt: this.#createdAt,
        startedAt: this.#startedAt,
        endedAt: this.#flag(CLOSED) ? this.#x?.done?.closedAt ?? 0 : performance.now(),
        cleanup: this.#x?.ladder?.report ?? null,
        pid: this.pid,
        cgroup: this.cgroup,
        confinement: this.confinement,
        ...this[jobOutcome](),
        jobId: this.jobId,
      },
      output,
      this.#x?.done?.encoding ?? 'utf8',
    );
    if (this.#x?.readyWait) result.ready = this.#x.readyState;
    if (this.#x?.done) this.#x.done.settled = result;
    // Delivered: what comes later is the job's (its ring), not the result's.
    output.stopCollecting();
    return result;
  }
}

// Typed overloads for the events, so listeners are checked.
export interface ToolCall {
  on<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  once<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  off<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  emit<E extends keyof ToolCallEvents>(event: E, ...args: ToolCallEvents[E]): boolean;
}

// Node's ChildProcess has data properties only, and code that drives one
// adds its own to the instance (execa sets `subprocess.all` to its merged
// stream): an assignment to one of ToolCall's getters makes an own property
// there, as on a ChildProcess, instead of throwing in strict mode.
for (const [name, d] of Object.entries(Object.getOwnPropertyDescriptors(ToolCall.prototype))) {
  if (!d.get || d.set) continue;
  Object.defineProperty(ToolCall.prototype, name, {
    ...d,
    set(this: ToolCall, value: unknown) {
      Object.defineProperty(this, name, { value, writable: true, enumerable: true, configurable: true });
    },
  });
}
