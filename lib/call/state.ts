// What a call holds besides its public fields (CallState): the bits of its
// life in one number, the state most live calls never need (CallExtras, made
// when a part of it is first set), what the call's files see of the public
// ToolCall (CallSurface) and of its supervisor (CallOwner), and the symbols
// through which the supervisor, the server and the streams reach a call.
import { AsyncResource } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import type { Readable, Writable } from 'node:stream';

import type { NativeEvent, NativeLimits } from '../binding/contract';
import type { ResolvedSpawn } from '../options';
import type { ByteTail, CallOutput, outputNow } from '../output';
import type { PtyStream } from '../pty';
import type { ReadyWait } from '../ready';
import type { ChildSide } from '../stdio';
import type {
  CleanupReason,
  CleanupReport,
  Confinement,
  EventCallback,
  Listener,
  ProcessInfo,
  ReadyState,
  ResourceUsage,
  RunResult,
  ToolCallEvents,
  Verification,
} from '../types';
import type { PauseControl } from './pause';
import { emptyReport } from './report';

// The bits of a call's flags.
export const STARTED = 1;
export const EXITED = 2;
export const EMPTY = 4;
export const CLOSED = 8;
export const TIMED_OUT = 16;
export const ABORTED = 32;
export const UNREF = 64;
/** SIGKILL went to the whole tree: members seen after the main process exits are no leftovers. */
export const KILLED_ALL = 128;
/** Inside the constructor's admit(): a start error Node throws is thrown from there. */
export const CONSTRUCTING = 256;
/** Two bits: the index of the call's Verification in VERIFICATIONS. */
const VERIFIED_SHIFT = 9;
const VERIFIED_MASK = 3 << VERIFIED_SHIFT;
const VERIFICATIONS: readonly Verification[] = ['none', 'cgroup.events', 'pidns', 'subreaper'];
/** Holds one of its supervisor's slots (maxConcurrent). */
export const HOLDS_SLOT = 2048;
/** Cloned, its exec not reported yet: `pid` waits for the report. */
export const EXEC_PENDING = 4096;
/** 'spawn' was emitted (by the tick after spawn(), or by the exec's report when it came later). */
export const SPAWN_EMITTED = 8192;
/** Started sealed (options.seal): `call.sealed` turns true when the shim reports the command's exec. */
export const SEALING = 16384;

/** How the tree is proved empty, as two bits of the flags ('none' until it started). */
export function verifiedOf(flags: number): Verification {
  return VERIFICATIONS[(flags & VERIFIED_MASK) >> VERIFIED_SHIFT];
}

export function withVerified(flags: number, v: Verification): number {
  const i = VERIFICATIONS.indexOf(v);
  return (flags & ~VERIFIED_MASK) | ((i < 0 ? 0 : i) << VERIFIED_SHIFT);
}

/** What a call reads of its options all its life. */
export type Settings = Pick<
  ResolvedSpawn,
  'background' | 'grace' | 'idleTimeout' | 'killSignal' | 'leftovers' | 'output' | 'signal' | 'timeout'
>;

/** The public ToolCall, as the call's files see it. */
export interface CallSurface {
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: Array<Readable | Writable | null>;
  readonly pty: PtyStream | null;
  readonly confinement: Confinement;
  readonly spawnfile: string;
  readonly spawnargs: string[];
  readonly pid: number | undefined;
  exitCode: number | null;
  signalCode: NodeJS.Signals | null;
  killed: boolean;
  cgroup: string | null;
  jobId: string | null;
  sealed: boolean;
  ports(): Promise<Listener[]>;
  emit<E extends keyof ToolCallEvents>(event: E, ...args: ToolCallEvents[E]): boolean;
  once<E extends keyof ToolCallEvents>(event: E, listener: EventCallback<ToolCallEvents[E]>): this;
  listenerCount(event: keyof ToolCallEvents): number;
  /** A tapped stream's first chunk (or end): the CallOutput it goes to. */
  [outputNow](): CallOutput;
}

/**
 * What a call needs from the supervisor that owns it: where its cgroup goes,
 * when it may start (maxConcurrent), and where errors nobody listens to go.
 * `C`: what the owner knows its calls as (a Supervisor: ToolCall). @internal
 */
export interface CallOwner<C = CallSurface> {
  readonly group: string;
  /** The supervisor's limits: the total of all its calls, kept by its subtree. */
  readonly limits: NativeLimits | null;
  /** Calls start() now or later (FIFO), never twice; a background call starts now and takes no slot. */
  admit(call: C, start: () => void, background: boolean): void;
  /** A queued call that will never start leaves the queue. */
  dequeue(call: C): void;
  /** The call has settled ('close', or it could not start): its slot is free. */
  release(call: C): void;
  /** The call's ladder reported (before the call's own 'cleanup' listeners hear of it). */
  cleanup(call: C, report: CleanupReport): void;
  /** An 'error' the call has no listener for. */
  unhandledError(call: C, err: Error): void;
  /** The call is a job now (its id is set): list it, and free its slot. `startedAt`: when the call started (ms since the epoch). */
  adoptJob(call: C, ring: ByteTail, startedAt: number): void;
}

/**
 * What a call holds only once it needs it: a live call with default options
 * that wrote nothing and was asked nothing has none of it, and a harness
 * holds many such calls. Its parts that go together (the ladder, the
 * timers, `done`) are objects of their own, made when first needed.
 */
export class CallExtras {
  spawnError: Error | null = null;
  ladder: CallLadder | null = null;
  timers: CallTimers | null = null;
  done: CallDone | null = null;
  onAbort: (() => void) | null = null;
  /** Made with the call when it has output streams and something arrives, else when asked. */
  output: CallOutput | null = null;
  /** A job's output, from the start of the call (only for calls that can become jobs). */
  ring: ByteTail | null = null;
  usage: ResourceUsage | null = null;
  /** What a job's command left running when it exited; null until then. */
  remaining: ProcessInfo[] | null = null;
  /** A job's leaf: its cpu.stat [user, system] µs when the call began (a reused leaf carries earlier calls'). */
  cpuBase: readonly [number, number, number?] | undefined = undefined;
  /** When a call that can become a job started, in ms since the epoch: the job's startedAt, however much later it became one. */
  startedAtEpoch = 0;
  /** options.ready's wait, or null without the option. */
  readyWait: ReadyWait | null = null;
  /** What made the call ready, once it was (result.ready). */
  readyState: ReadyState | null = null;
  /**
   * The leaf's cgroup id, once the call may listen (a job, `ready`, ports()
   * asked): the ladder's report says what sockets made there still listen
   * with the tree gone (the leaf itself may be removed by then).
   */
  leafId: bigint | null = null;
  /** The exit and the events after it, while the exit waits for the output in the pipes (backlog.ts). */
  heldEvents: NativeEvent[] | null = null;
  /** The ladder's report waits for the leaf's listeners ('cleanup' and 'close' wait for it). */
  heldCheck = false;
  /** What the main process left is being read from /proc in slices of the loop ('close' waits for it). */
  describing = false;
  /** pause()/resume(), once either was asked for. */
  pause: PauseControl | null = null;
  /** idleTimeout's timer was stopped by pause(): resume() starts it again. */
  idlePaused = false;
  /** The kernel's verdicts, from the Empty event: the OOM killer killed a member; a fork was refused at pids.max. */
  oomKilled = false;
  pidsLimited = false;
}

/**
 * The one ladder of a call, from the moment it is asked for: every
 * terminate() gets its promise. `report` is the addon's, once it came; a
 * ladder that found nothing to stop resolves with an empty report and
 * keeps none (the call's `cleanupReport` stays null).
 */
export class CallLadder {
  readonly promise: Promise<CleanupReport>;
  report: CleanupReport | null = null;
  #resolve: (r: CleanupReport) => void = () => {};

  /** `reason`: why it was asked for, what its report says even when the tree was gone before it ran. */
  constructor(readonly reason: CleanupReason) {
    this.promise = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  /** Whether it was asked for and has not reported. */
  get running(): boolean {
    return this.report === null;
  }

  /** Its report is delivered: terminate()'s promises resolve with it. */
  deliver(report: CleanupReport): void {
    this.#resolve(report);
  }

  /** Nothing was there to stop (the tree emptied, or the call ended without a process). */
  endEmpty(confinement: Confinement, verified: Verification): void {
    this.#resolve(emptyReport(this.reason, confinement, verified));
  }
}

/** The timers of a call, made when the first is set. */
export class CallTimers {
  /** options.timeout: the whole tree (and, where emptiness is not proved, its pipes). */
  timeout: NodeJS.Timeout | null = null;
  /** options.idleTimeout: refreshed by each chunk of output. */
  idle: NodeJS.Timeout | null = null;
  /** After the tree is empty: how long its pipes may stay open. */
  drain: NodeJS.Timeout | null = null;

  /** The command's own time is over (it left a job, or the job is ready): timeout and idle stop. */
  stopCommand(): void {
    if (this.timeout) clearTimeout(this.timeout);
    if (this.idle) clearTimeout(this.idle);
    this.timeout = null;
    this.idle = null;
  }

  stopAll(): void {
    this.stopCommand();
    if (this.drain) clearTimeout(this.drain);
    this.drain = null;
  }

  /** Whether they keep the event loop alive, as the call does. */
  ref(on: boolean): void {
    for (const t of [this.timeout, this.idle, this.drain]) {
      if (on) t?.ref();
      else t?.unref();
    }
  }
}

function ignore(): void {}

/**
 * `done` of a call, made when somebody asks (run(), `done`) or when the call
 * could become a job (its result is taken when it does): a call nobody asks
 * builds none.
 */
export class CallDone {
  promise: Promise<RunResult<string | Buffer>> | null = null;
  encoding: BufferEncoding | 'buffer' = 'utf8';
  /** The result the promise settled with, once it has. */
  settled: RunResult<string | Buffer> | null = null;
  /** When 'close' came: the end of the result's duration, for a result built later. */
  closedAt = 0;
  #resolve: ((r: RunResult<string | Buffer>) => void) | null = null;
  #reject: ((err: Error) => void) | null = null;

  /** Whether the promise waits to be settled. */
  get waiting(): boolean {
    return this.#resolve !== null;
  }

  /**
   * The promise, made on first use: rejected at once for a call that could
   * not start, resolved at once (with `build()`) for one that closed.
   */
  make(spawnError: Error | null, closed: boolean, build: () => RunResult<string | Buffer>): Promise<RunResult<string | Buffer>> {
    if (this.promise) return this.promise;
    let done: Promise<RunResult<string | Buffer>>;
    if (spawnError) {
      done = Promise.reject(spawnError);
    } else if (closed) {
      done = Promise.resolve(build());
    } else {
      done = new Promise((resolve, reject) => {
        this.#resolve = resolve;
        this.#reject = reject;
      });
    }
    // 'done' carries a failed start; do not also crash on it.
    done.catch(ignore);
    this.promise = done;
    return done;
  }

  /** Resolves the promise, if it waits, with `build()`. */
  settle(build: () => RunResult<string | Buffer>): void {
    const resolve = this.#resolve;
    if (!resolve) return;
    this.#resolve = null;
    this.#reject = null;
    resolve(build());
  }

  reject(err: Error): void {
    const reject = this.#reject;
    this.#resolve = null;
    this.#reject = null;
    reject?.(err);
  }
}

/**
 * A call's own state: what the ToolCall holds privately, and what the
 * functions of call/*.ts work on. One per call, made with it.
 */
export class CallState {
  /** The binding's id of the call; 0 until it started. */
  id = 0;
  /**
   * started, exited, empty, closed, timedOut, aborted, unref'd, killedAll,
   * constructing, …: one field for the flags of the call's life (a harness
   * holds many live calls).
   */
  flags = 0;
  pid: number | undefined = undefined;
  readonly createdAt = performance.now();
  startedAt = 0;
  /** Our readable streams not yet closed (stdio[1…]): 'close' waits for them. */
  openReadable = 0;
  /** What the start hands the child, and the pipe ends ours to close then (stdio.ts): null once started. */
  child: ChildSide | null = null;
  /** The state most live calls never need, made when a part of it is set. */
  x: CallExtras | null = null;
  /**
   * The async context spawn() ran in: the call's events and its streams'
   * data run in it, as a ChildProcess's do (AsyncLocalStorage keeps its
   * store in their listeners). Shared by the call's streams: one per call.
   */
  readonly scope = new AsyncResource('PROCTREE_CALL');

  /**
   * `opts`: what the call reads of its options; until it starts, all of
   * them (its start reads the environment, cwd, stdio, …), from then on only
   * its settings, often shared with other calls.
   */
  constructor(
    readonly call: CallSurface,
    readonly owner: CallOwner,
    public opts: Settings | ResolvedSpawn,
  ) {}

  flag(bit: number): boolean {
    return (this.flags & bit) !== 0;
  }

  setFlag(bit: number, on: boolean): void {
    this.flags = on ? this.flags | bit : this.flags & ~bit;
  }

  get verified(): Verification {
    return verifiedOf(this.flags);
  }

  extras(): CallExtras {
    this.x ??= new CallExtras();
    return this.x;
  }

  timers(): CallTimers {
    return (this.extras().timers ??= new CallTimers());
  }

  done(): CallDone {
    return (this.extras().done ??= new CallDone());
  }

  /** Whether it could not start (its 'error' is due or emitted). */
  get failed(): boolean {
    return this.x !== null && this.x.spawnError !== null;
  }

  /** Whether its tree is there to signal: started, not failed, not empty. */
  get live(): boolean {
    return this.id !== 0 && !this.flag(EMPTY) && !this.failed;
  }
}

/** Runs the ladder on many calls at once (ToolCall[terminateMany]). @internal */
export const terminateMany = Symbol('proctree.terminateMany');
/** Ends a call that is still queued, quietly: it never starts. @internal */
export const dropQueued = Symbol('proctree.dropQueued');
/** Whether the ladder runs and whether the call closed, for its job's state. @internal */
export const callPhase = Symbol('proctree.callPhase');
/** What remains of a kept call's tree and what it used so far: its result's `remaining` and `usage`. @internal */
export const jobOutcome = Symbol('proctree.jobOutcome');
/** The encoding of the call's result (`done`): set before it settles (the server's bytes). @internal */
export const resultEncoding = Symbol('proctree.resultEncoding');
/** The result `done` settled with, once it has: read synchronously at 'close', or when the call became a job. @internal */
export const settledResult = Symbol('proctree.settledResult');
/** @internal `proctree run --ready-port`: the ready wait on a call that is no job ('ready' and result.ready; 'not-ready' past its timeout). */
export const watchReady = Symbol('proctree.watchReady');
/**
 * Whether the call holds one of its supervisor's slots (maxConcurrent): a
 * bit of the call's flags, not an entry per call in a set of the
 * supervisor's. @internal
 */
export const callSlot = Symbol('proctree.callSlot');

/**
 * Runs `fn` once the pipes have had one more whole poll phase, so output
 * already in them at a main process's exit has been read: a check phase
 * later, and another, since 'exit' may be delivered inside a poll phase
 * after the pipes were polled (or before their reading started). When a
 * kept call's result (and the server's job event) is made. @internal
 */
export function afterPipesPolled(fn: () => void): void {
  setImmediate(() => setImmediate(fn));
}
