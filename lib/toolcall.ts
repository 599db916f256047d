// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code. This file is its public
// surface; its life is in call/: start.ts (set-up, admission, start),
// exec.ts (the exec report: pid and 'spawn'), events.ts (what the binding
// reports), ladder.ts (what stops it), job.ts (jobs, ports, ready),
// result.ts ('close' and `done`), state.ts (what it holds).
import { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';

import { binding } from './binding';
import type { NativeErrorShape } from './binding/contract';
import { knowStart } from './call/exec';
import { ports, watchReady as watchReadyOf } from './call/job';
import { ladderFor, pauseControl, terminateMany as terminateAll } from './call/ladder';
import { donePromise, flushOutput, jobOutcome as outcomeOf, maybeClose, output } from './call/result';
import { admitCall, applyRef, prepareCall } from './call/start';
import {
  ABORTED,
  callPhase,
  callSlot,
  CallState,
  type CallOwner,
  CLOSED,
  dropQueued,
  EMPTY,
  HOLDS_SLOT,
  jobOutcome,
  KILLED_ALL,
  resultEncoding,
  settledResult,
  STARTED,
  terminateMany,
  TIMED_OUT,
  UNREF,
  watchReady,
} from './call/state';
import { drop } from './call/result';
import { tierFor } from './capabilities';
import type { CallPhase } from './jobs';
import { checkGrace, type ResolvedRun, type ResolvedSpawn, signalNumber } from './options';
import { type CallOutput, type LinesOptions, outputNow } from './output';
import type { ResolvedReady } from './ports';
import { noTerminal, PtyStream } from './pty';
import { type CallPipes, makePipes, stdioClosed } from './stdio';
import type { CleanupReason, CleanupReport, Confinement, EventCallback, Listener, ProcessInfo, ResourceUsage, RunResult, ToolCallEvents } from './types';

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
  /**
   * True once a call started with `seal: true` runs sealed: its shim made the
   * namespaces and the command exec'd without a capability (README "Sealed
   * calls"). False otherwise, and for a sealed call that could not start.
   */
  sealed = false;
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

  /** The call's own state, which call/*.ts works on. */
  readonly #s: CallState;

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
    knowStart(this.#s);
    return this.#s.pid;
  }

  /** @internal use spawn() or Supervisor#spawn() */
  constructor(opts: ResolvedSpawn, owner: CallOwner<ToolCall>, run?: ResolvedRun) {
    super();
    const s = new CallState(this, owner, opts);
    this.#s = s;
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
      pipes = makePipes(opts.stdio, this, s.scope, run && !opts.pty ? { input: run.input !== undefined } : undefined);
    } catch (err) {
      // Out of fds (EMFILE) while making the pipes: as Node, an 'error', not a throw.
      stdioError = err as NativeErrorShape;
      pipes = makePipes(opts.stdio.map(() => ({ kind: 'ignore' as const })), this, s.scope);
    }
    s.child = pipes.child;
    s.openReadable = pipes.openReadable;
    const streams = pipes.streams;
    this.stdio = streams;
    this.stdin = (streams[0] as Writable | null | undefined) ?? null;
    this.stdout = (streams[1] as Readable | null | undefined) ?? null;
    this.stderr = (streams[2] as Readable | null | undefined) ?? null;
    this.pty = opts.pty ? new PtyStream(opts.pty, () => maybeClose(s), () => this.members(), s.scope) : null;
    prepareCall(s, opts, run);
    admitCall(s, opts, stdioError);
  }

  /** Live pids of the whole tree now: from the cgroup, the shim's descendants, or the session (pgroup). */
  members(): number[] {
    knowStart(this.#s);
    return this.#s.id && !this.#s.flag(EMPTY) ? binding.members(this.#s.id) : [];
  }

  /**
   * What the whole tree listens on now (escapees included, nothing outside
   * it): listening TCP sockets (IPv4 and IPv6), bound UDP sockets and
   * listening unix stream sockets, each with the member holding it. Asked
   * off the JavaScript thread (the /proc reads take a few ms); [] for a call
   * not started yet or whose tree is gone.
   */
  ports(): Promise<Listener[]> {
    return ports(this.#s);
  }

  /**
   * Sends one signal to every process of the tree (escapees included), with
   * no escalation. Returns whether at least one process got it, and sets
   * `killed` then, as ChildProcess#kill does. `0` only probes.
   */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const num = signalNumber(signal);
    const s = this.#s;
    knowStart(s);
    if (!s.live) return false;
    const n = binding.kill(s.id, num);
    if (n > 0) this.killed = true;
    // SIGKILL goes through cgroup.kill: the whole tree is already dying, so
    // members seen after the main process exits are not leftovers.
    if (n > 0 && num === signalNumber('SIGKILL')) s.setFlag(KILLED_ALL, true);
    return n > 0;
  }

  /**
   * Stops the whole tree: freeze, the graceful signal once to every member,
   * thaw, `grace` ms, cgroup.kill, verified empty. Idempotent: every call
   * gets the report of the one ladder. A call still queued never starts,
   * and its report is empty.
   */
  terminate(options: { grace?: number } = {}): Promise<CleanupReport> {
    const grace = checkGrace(options?.grace, this.#s.opts.grace);
    return ladderFor(this.#s, 'terminate', grace);
  }

  /**
   * Freezes the whole tree (its cgroup leaf's cgroup.freeze): no member
   * runs, forks or exits until resume(). Settles once cgroup.events shows
   * `frozen 1`. `idleTimeout` does not run while paused; `timeout` (wall
   * time) does. terminate() still works (the ladder thaws the tree after
   * its signals). Rejects with ERR_PROCTREE_PAUSE_UNSUPPORTED outside the
   * cgroup and systemd tiers, ERR_PROCTREE_NOT_RUNNING when the tree is not
   * running (queued, gone, being stopped).
   */
  pause(): Promise<void> {
    return pauseControl(this.#s).request(true);
  }

  /** Thaws what pause() froze; settles once cgroup.events shows `frozen 0`. */
  resume(): Promise<void> {
    return pauseControl(this.#s).request(false);
  }

  /** Whether the tree is paused: pause() settled, and neither resume() nor a ladder thawed it since. */
  get paused(): boolean {
    return this.#s.x?.pause?.paused ?? false;
  }

  /** The kernel's OOM killer killed a process of the tree (see RunResult#oomKilled); known at 'empty'. */
  get oomKilled(): boolean {
    return this.#s.x?.oomKilled ?? false;
  }

  /** A fork of the tree was refused at a pids limit (see RunResult#pidsLimited); known at 'empty'. */
  get pidsLimited(): boolean {
    return this.#s.x?.pidsLimited ?? false;
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
    if (!this.killed && !this.#s.flag(CLOSED)) void this.terminate().catch(() => {});
  }

  /** `await using call = spawn(…)`: stops the whole tree and waits for 'close'. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#s.flag(CLOSED)) return;
    const closed = new Promise<void>((resolve) => this.once('close', () => resolve()));
    await this.terminate();
    await closed;
  }

  /**
   * Lets the harness exit while the call runs, like ChildProcess#unref().
   * The call is still stopped then: the exit hook kills every live call.
   */
  unref(): this {
    this.#s.setFlag(UNREF, true);
    applyRef(this.#s);
    return this;
  }

  /** Undoes unref(): the call keeps the event loop alive again (the default). */
  ref(): this {
    this.#s.setFlag(UNREF, false);
    applyRef(this.#s);
    return this;
  }

  /** Whether `timeout` ran out and stopped the call. */
  get timedOut(): boolean {
    return this.#s.flag(TIMED_OUT);
  }

  /** Whether `signal` was aborted and stopped the call. */
  get aborted(): boolean {
    return this.#s.flag(ABORTED);
  }

  /** The report of the ladder, once one ran; null before (or when none was needed). */
  get cleanupReport(): CleanupReport | null {
    return this.#s.x?.ladder?.report ?? null;
  }

  /** Whether the call has started (false while it waits for a slot). */
  get started(): boolean {
    return this.#s.flag(STARTED) && !this.#s.failed;
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
    output(this.#s).resultWanted();
    flushOutput(this.#s);
    return donePromise(this.#s) as Promise<RunResult>;
  }

  /** What the whole tree used; null until it is empty ('empty', then 'close'). */
  get usage(): ResourceUsage | null {
    return this.#s.x?.usage ?? null;
  }

  /**
   * stdout and stderr merged in the order they arrived, with `all: true`
   * (else null). The stream starts where it is first read from.
   */
  get all(): Readable | null {
    return this.#s.opts.output.all ? output(this.#s).allStream() : null;
  }

  /**
   * `for await (const line of call.lines())`: the lines of stdout (or
   * `{ stream: 'stderr' | 'all' }`) from now on, until the streams end.
   * Call it before the output you want arrives (right after spawn()).
   */
  lines(options?: LinesOptions): AsyncIterableIterator<string> {
    return output(this.#s).lines(options);
  }

  /** @internal see call/state.ts */
  [resultEncoding](encoding: BufferEncoding | 'buffer'): void {
    this.#s.done().encoding = encoding;
  }

  /** @internal */
  [settledResult](): RunResult<string | Buffer> | null {
    const s = this.#s;
    // A call that closed settles `done` at 'close'; nobody made it yet: it is made now, as it would have been then.
    const done = s.x?.done;
    if (!done?.settled && s.flag(CLOSED) && !done?.promise && !s.failed) donePromise(s);
    return s.x?.done?.settled ?? null;
  }

  /** @internal */
  [jobOutcome](): { remaining: ProcessInfo[]; usage: ResourceUsage } {
    return outcomeOf(this.#s);
  }

  /** @internal */
  [callPhase](): CallPhase {
    const s = this.#s;
    return { stopping: s.x?.ladder?.running === true, empty: s.flag(EMPTY), closed: s.flag(CLOSED) };
  }

  /** @internal */
  [watchReady](ready: ResolvedReady): void {
    watchReadyOf(this.#s, ready);
  }

  /** @internal a queued call dropped by terminate() or a supervisor shutdown: not an error */
  [dropQueued](err: Error): void {
    drop(this.#s, err, false);
  }

  /** @internal sets whether the call holds a slot of its supervisor's; returns whether it held one before. */
  [callSlot](hold: boolean): boolean {
    const held = this.#s.flag(HOLDS_SLOT);
    this.#s.setFlag(HOLDS_SLOT, hold);
    return held;
  }

  /**
   * @internal one of its readable streams closed. The call's 'close' comes
   * a turn after its last stream's, as a ChildProcess's does (a net.Socket
   * emits 'close' from its handle's close callback, a turn after 'end'):
   * code that reads stdout to its end (`for await`, which ends at the
   * stream's 'close') and then waits for the call's 'close' still gets it
   * when the tree was already gone.
   */
  [stdioClosed](): void {
    if (--this.#s.openReadable === 0) setImmediate(maybeClose, this.#s);
  }

  /** @internal a tapped stream's first chunk (or end): the CallOutput it goes to. */
  [outputNow](): CallOutput {
    return output(this.#s);
  }

  /** @internal the ladder on many calls at once (a supervisor's shutdown) */
  static [terminateMany](calls: readonly ToolCall[], reason: CleanupReason, grace: number): Promise<CleanupReport[]> {
    return terminateAll(
      calls.map((c) => c.#s),
      reason,
      grace,
    );
  }
}

// Typed overloads for the events, so listeners are checked.
export interface ToolCall {
  on<E extends keyof ToolCallEvents>(event: E, listener: EventCallback<ToolCallEvents[E]>): this;
  once<E extends keyof ToolCallEvents>(event: E, listener: EventCallback<ToolCallEvents[E]>): this;
  off<E extends keyof ToolCallEvents>(event: E, listener: EventCallback<ToolCallEvents[E]>): this;
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
