// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
//
// This file is the call's lifecycle (queued, started, exited, empty, closed)
// and the ladder it asks the addon for; its pipes live in stdio.ts, the
// collection of its output in output.ts, what it ends with in result.ts, and
// what a job is in jobs.ts.
import { EventEmitter } from 'node:events';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Readable, Writable } from 'node:stream';

import { AbortError, proctreeError, spawnError, spawnThrow } from './errors';
import { native, NativeEventKind, type NativeErrorShape, type NativeReport, type NativeUsage, type NativeSpawnSpec } from './native';
import { candidatesFor, checkGrace, isDefaultOutput, type ResolvedRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import { helperPath, tierFor, warnNoGuardian } from './capabilities';
import type { CallPhase } from './jobs';
import { type Listener, normalizeListeners, type ReadyState, type ResolvedReady } from './ports';
import { ReadyWait } from './ready';
import { PauseControl } from './pause';
import { controllersOf, limitsRefusedHere, limitsUnavailable, type ResolvedLimits } from './limits';
import { ByteTail, CallOutput, type LinesOptions, outputNow, tapLater } from './output';
import { attachMaster, flushPty, noTerminal, PtyStream, ptyPending, ptyTreeEmpty, releasePty, setPtyRef, typeInput } from './pty';
import { cleanupReport, emptyReport, finalUsage, leftoversError, runResult, usageSoFar } from './result';
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
  /** The supervisor's limits: the total of all its calls, kept by its subtree. */
  readonly limits: ResolvedLimits | null;
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

function ignore(): void {}

// The bits of ToolCall's flags.
const STARTED = 1;
const EXITED = 2;
const EMPTY = 4;
const CLOSED = 8;
const TIMED_OUT = 16;
const ABORTED = 32;
const UNREF = 64;
const KILLED_ALL = 128;
const CONSTRUCTING = 256;
/** Two bits: the index of the call's Verification in VERIFICATIONS. */
const VERIFIED_SHIFT = 9;
const VERIFIED_MASK = 3 << VERIFIED_SHIFT;
const VERIFICATIONS: readonly Verification[] = ['none', 'cgroup.events', 'pidns', 'subreaper'];
const HOLDS_SLOT = 2048;
/** Cloned, its exec not reported yet: `pid` waits for the report (see ToolCall#pid). */
const EXEC_PENDING = 4096;
/** 'spawn' was emitted (by the tick after spawn(), or by the exec's report when it came later). */
const SPAWN_EMITTED = 8192;
/**
 * What the ticks after spawn() may wait for exec reports, together (ms): as
 * in Node, 'spawn' comes in the tick after spawn() (before 'error' of an
 * aborted signal, before any output), so that tick asks for the report. A
 * spawner thread made the clone, and calls spawned in the same synchronous
 * run exec side by side, so one wait covers them all; a child held before
 * its exec (its subtree frozen by someone) costs this once per run of ticks,
 * not per call, and its 'spawn' comes with its report.
 */
const SPAWN_TICK_WAIT_MS = 500;
/** When the current run of spawn ticks stops waiting (performance.now()), or 0 outside one. */
let spawnTicksUntil = 0;
function endSpawnTicks(): void {
  spawnTicksUntil = 0;
}
/** How long a ladder (or a whole shutdown's) waits for exec reports not in yet (ms): a normal exec takes one or two. */
const STOP_EXEC_WAIT_MS = 20;

/** What a call reads of its options all its life. */
type Settings = Pick<
  ResolvedSpawn,
  'background' | 'grace' | 'idleTimeout' | 'killSignal' | 'leftovers' | 'output' | 'signal' | 'timeout'
>;

/**
 * What a call reads of its options after its start (its file and argv are
 * its spawnfile and spawnargs). Calls with the same settings share one
 * object: see settingsFor().
 */
class CallSettings implements Settings {
  readonly background: boolean;
  readonly grace: number;
  readonly idleTimeout: number;
  readonly killSignal: number;
  readonly leftovers: ResolvedSpawn['leftovers'];
  readonly output: ResolvedSpawn['output'];
  readonly signal: AbortSignal | undefined;
  readonly timeout: number;

  constructor(o: ResolvedSpawn) {
    this.background = o.background;
    this.grace = o.grace;
    this.idleTimeout = o.idleTimeout;
    this.killSignal = o.killSignal;
    this.leftovers = o.leftovers;
    this.output = o.output;
    this.signal = o.signal;
    this.timeout = o.timeout;
  }

  /** Whether a call with options `o` reads the same as this. */
  sameAs(o: ResolvedSpawn): boolean {
    return (
      this.background === o.background &&
      this.grace === o.grace &&
      this.idleTimeout === o.idleTimeout &&
      this.killSignal === o.killSignal &&
      this.leftovers === o.leftovers &&
      this.output === o.output &&
      this.signal === o.signal &&
      this.timeout === o.timeout
    );
  }
}

/**
 * The settings last made for a call without a signal and with the default
 * output settings: the next such call with the same options shares them (a
 * harness holds many alike). Only those are kept here, so that this holds
 * nothing of the harness's (a signal, an onOutput callback) once its calls
 * are gone.
 */
let sharedSettings: CallSettings | null = null;

function settingsFor(o: ResolvedSpawn): CallSettings {
  if (o.signal !== undefined || !isDefaultOutput(o.output)) return new CallSettings(o);
  if (sharedSettings === null || !sharedSettings.sameAs(o)) sharedSettings = new CallSettings(o);
  return sharedSettings;
}

/**
 * What a call holds only once it needs it: a live call with default options
 * that wrote nothing and was asked nothing has none of it, and a harness
 * holds many such calls.
 */
class CallExtras {
  spawnError: Error | null = null;
  report: CleanupReport | null = null;
  ladder: Promise<CleanupReport> | null = null;
  resolveLadder: ((r: CleanupReport) => void) | null = null;
  timer: NodeJS.Timeout | null = null;
  idleTimer: NodeJS.Timeout | null = null;
  drainTimer: NodeJS.Timeout | null = null;
  onAbort: (() => void) | null = null;
  /**
   * The result, made when somebody asks (run(), `done`) or when the call
   * could become a job (its result is taken when it does); a call nobody
   * asks builds none.
   */
  done: Promise<RunResult<string | Buffer>> | null = null;
  doneEncoding: BufferEncoding | 'buffer' = 'utf8';
  resolveDone: ((r: RunResult<string | Buffer>) => void) | null = null;
  rejectDone: ((err: Error) => void) | null = null;
  /** When 'close' came: the end of the result's duration, for a result built later. */
  closedAt = 0;
  /** Made with the call when it has output streams and something arrives, else when asked. */
  output: CallOutput | null = null;
  /** A job's output, from the start of the call (only for calls that can become jobs). */
  ring: ByteTail | null = null;
  usage: ResourceUsage | null = null;
  /** What a job's command left running when it exited; null until then. */
  remaining: ProcessInfo[] | null = null;
  /** Why the ladder was asked for: what its report says even when the tree was gone before it ran. */
  ladderReason: CleanupReason = 'terminate';
  /** The result `done` settled with, once it has. */
  settled: RunResult<string | Buffer> | null = null;
  /** A job's leaf: its cpu.stat [user, system] µs when the call began (a reused leaf carries earlier calls'). */
  cpuBase: readonly [number, number, number?] | undefined = undefined;
  /** When a call that can become a job started, in ms since the epoch: the job's startedAt, however much later it became one. */
  startedAtEpoch = 0;
  /** options.ready's wait, or null without the option. */
  readyWait: ReadyWait | null = null;
  /** What made the call ready, once it was (result.ready). */
  readyState: ReadyState | null = null;
  /** pause()/resume(), once either was asked for. */
  pause: PauseControl | null = null;
  /** idleTimeout's timer was stopped by pause(): resume() starts it again. */
  idlePaused = false;
  /** The kernel's verdicts, from the Empty event: the OOM killer killed a member; a fork was refused at pids.max. */
  oomKilled = false;
  pidsLimited = false;
}

/**
 * A start error that Node throws from spawn() (see throwsLikeNode), carried
 * from #start() out of the constructor that admitted the call: construction
 * is synchronous, so one slot serves every call.
 */
let throwFromConstructor: Error | null = null;

let helper: string | undefined;

/**
 * What the addon is handed to start a call. A class whose prototype chain
 * ends at once (no Object.prototype): the addon reads optional fields (uid,
 * gid, cwd) by name, and a polluted Object.prototype.uid must not reach
 * them; a fixed shape, where an object without a prototype is a dictionary.
 */
class SpawnSpec {
  constructor(
    readonly group: string,
    readonly candidates: string[],
    readonly argv: string[],
    readonly env: string[] | null,
    readonly stdio: NativeSpawnSpec['stdio'],
    readonly tier: Confinement,
    readonly helper: string,
  ) {}
}
Object.setPrototypeOf(SpawnSpec.prototype, null);

/** A refusal of limits before the addon is asked, in the shape of its own (syscall 'limits'). */
function limitsRefusal(why: string): NativeErrorShape {
  const err = new Error(why) as NativeErrorShape;
  err.code = 'ENOTSUP';
  err.errno = 95;
  err.syscall = 'limits';
  err.path = why;
  return err;
}

// A start that Node reports by throwing from spawn() rather than by 'error':
// the uid/gid steps (EPERM when not privileged, EINVAL for a bad id).
function throwsLikeNode(err: NativeErrorShape): boolean {
  return err.syscall === 'setuid' || err.syscall === 'setgid' || err.syscall === 'setgroups';
}

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

  // The fields of CallExtras, read as if they were the call's own: unset
  // (null) costs no object.
  get #spawnError(): Error | null {
    return this.#x?.spawnError ?? null;
  }
  set #spawnError(v: Error | null) {
    if (v !== null || this.#x) this.#extras().spawnError = v;
  }
  get #report(): CleanupReport | null {
    return this.#x?.report ?? null;
  }
  set #report(v: CleanupReport | null) {
    if (v !== null || this.#x) this.#extras().report = v;
  }
  get #ladder(): Promise<CleanupReport> | null {
    return this.#x?.ladder ?? null;
  }
  set #ladder(v: Promise<CleanupReport> | null) {
    if (v !== null || this.#x) this.#extras().ladder = v;
  }
  get #resolveLadder(): ((r: CleanupReport) => void) | null {
    return this.#x?.resolveLadder ?? null;
  }
  set #resolveLadder(v: ((r: CleanupReport) => void) | null) {
    if (v !== null || this.#x) this.#extras().resolveLadder = v;
  }
  get #timer(): NodeJS.Timeout | null {
    return this.#x?.timer ?? null;
  }
  set #timer(v: NodeJS.Timeout | null) {
    if (v !== null || this.#x) this.#extras().timer = v;
  }
  get #idleTimer(): NodeJS.Timeout | null {
    return this.#x?.idleTimer ?? null;
  }
  set #idleTimer(v: NodeJS.Timeout | null) {
    if (v !== null || this.#x) this.#extras().idleTimer = v;
  }
  get #drainTimer(): NodeJS.Timeout | null {
    return this.#x?.drainTimer ?? null;
  }
  set #drainTimer(v: NodeJS.Timeout | null) {
    if (v !== null || this.#x) this.#extras().drainTimer = v;
  }
  get #onAbort(): (() => void) | null {
    return this.#x?.onAbort ?? null;
  }
  set #onAbort(v: (() => void) | null) {
    if (v !== null || this.#x) this.#extras().onAbort = v;
  }
  get #done(): Promise<RunResult<string | Buffer>> | null {
    return this.#x?.done ?? null;
  }
  set #done(v: Promise<RunResult<string | Buffer>> | null) {
    if (v !== null || this.#x) this.#extras().done = v;
  }
  get #doneEncoding(): BufferEncoding | 'buffer' {
    return this.#x?.doneEncoding ?? 'utf8';
  }
  set #doneEncoding(v: BufferEncoding | 'buffer') {
    this.#extras().doneEncoding = v;
  }
  get #resolveDone(): ((r: RunResult<string | Buffer>) => void) | null {
    return this.#x?.resolveDone ?? null;
  }
  set #resolveDone(v: ((r: RunResult<string | Buffer>) => void) | null) {
    if (v !== null || this.#x) this.#extras().resolveDone = v;
  }
  get #rejectDone(): ((err: Error) => void) | null {
    return this.#x?.rejectDone ?? null;
  }
  set #rejectDone(v: ((err: Error) => void) | null) {
    if (v !== null || this.#x) this.#extras().rejectDone = v;
  }
  get #closedAt(): number {
    return this.#x?.closedAt ?? 0;
  }
  set #closedAt(v: number) {
    this.#extras().closedAt = v;
  }
  get #output(): CallOutput | null {
    return this.#x?.output ?? null;
  }
  set #output(v: CallOutput | null) {
    if (v !== null || this.#x) this.#extras().output = v;
  }
  get #ring(): ByteTail | null {
    return this.#x?.ring ?? null;
  }
  set #ring(v: ByteTail | null) {
    if (v !== null || this.#x) this.#extras().ring = v;
  }
  get #usage(): ResourceUsage | null {
    return this.#x?.usage ?? null;
  }
  set #usage(v: ResourceUsage | null) {
    if (v !== null || this.#x) this.#extras().usage = v;
  }
  get #ladderReason(): CleanupReason {
    return this.#x?.ladderReason ?? 'terminate';
  }
  set #ladderReason(v: CleanupReason) {
    if (v !== 'terminate' || this.#x) this.#extras().ladderReason = v;
  }
  get #settled(): RunResult<string | Buffer> | null {
    return this.#x?.settled ?? null;
  }
  set #settled(v: RunResult<string | Buffer> | null) {
    if (v !== null || this.#x) this.#extras().settled = v;
  }
  get #startedAtEpoch(): number {
    return this.#x?.startedAtEpoch ?? 0;
  }
  set #startedAtEpoch(v: number) {
    this.#extras().startedAtEpoch = v;
  }
  get #remaining(): ProcessInfo[] | null {
    return this.#x?.remaining ?? null;
  }
  set #remaining(v: ProcessInfo[] | null) {
    if (v !== null || this.#x) this.#extras().remaining = v;
  }

  #flag(bit: number): boolean {
    return (this.#flags & bit) !== 0;
  }

  #setFlag(bit: number, on: boolean): void {
    this.#flags = on ? this.#flags | bit : this.#flags & ~bit;
  }

  get #started(): boolean {
    return this.#flag(STARTED);
  }
  set #started(on: boolean) {
    this.#setFlag(STARTED, on);
  }
  get #exited(): boolean {
    return this.#flag(EXITED);
  }
  set #exited(on: boolean) {
    this.#setFlag(EXITED, on);
  }
  get #empty(): boolean {
    return this.#flag(EMPTY);
  }
  set #empty(on: boolean) {
    this.#setFlag(EMPTY, on);
  }
  get #closed(): boolean {
    return this.#flag(CLOSED);
  }
  set #closed(on: boolean) {
    this.#setFlag(CLOSED, on);
  }
  get #timedOut(): boolean {
    return this.#flag(TIMED_OUT);
  }
  set #timedOut(on: boolean) {
    this.#setFlag(TIMED_OUT, on);
  }
  get #aborted(): boolean {
    return this.#flag(ABORTED);
  }
  set #aborted(on: boolean) {
    this.#setFlag(ABORTED, on);
  }
  /** Whether the call keeps the event loop alive (ref(), the default) or not (unref()). */
  get #ref(): boolean {
    return !this.#flag(UNREF);
  }
  set #ref(on: boolean) {
    this.#setFlag(UNREF, !on);
  }
  get #killedAll(): boolean {
    return this.#flag(KILLED_ALL);
  }
  set #killedAll(on: boolean) {
    this.#setFlag(KILLED_ALL, on);
  }
  /** How the tree is proved empty, as the addon says for this call's tier ('none' until it started): two bits of the flags. */
  get #verified(): Verification {
    return VERIFICATIONS[(this.#flags & VERIFIED_MASK) >> VERIFIED_SHIFT];
  }
  set #verified(v: Verification) {
    const i = VERIFICATIONS.indexOf(v);
    this.#flags = (this.#flags & ~VERIFIED_MASK) | ((i < 0 ? 0 : i) << VERIFIED_SHIFT);
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
    const res = waitMs === undefined ? native.settle(this.#id) : native.settle(this.#id, waitMs);
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
    const now = performance.now();
    if (spawnTicksUntil === 0) {
      spawnTicksUntil = now + SPAWN_TICK_WAIT_MS;
      setImmediate(endSpawnTicks);
    }
    call.#knowStart(Math.max(0, Math.floor(spawnTicksUntil - now)));
    if (!call.#flag(EXEC_PENDING) && call.#pid !== undefined && !call.#spawnError) ToolCall.#emitSpawn(call);
  }

  get #constructing(): boolean {
    return this.#flag(CONSTRUCTING);
  }
  set #constructing(on: boolean) {
    this.#setFlag(CONSTRUCTING, on);
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
      this.#ring = ring;
      this.#out().subscribe((chunk) => ring.write(chunk));
    }
    if (opts.ready) this.#readyWait(opts.ready);
    if (opts.idleTimeout > 0) this.#out().subscribe(() => this.#idleTimer?.refresh());
    if (run) this.#feedInput(run);
    // A call that can become a job takes its result when it does.
    if (run) this.#doneEncoding = run.encoding;
    if (run || opts.background || opts.leftovers === 'keep') this.#donePromise();
    // run() reads the streams itself (nobody else can) and wants the result.
    if (run) {
      this.#out().resultWanted();
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
    this.#knowStart();
    if (this.#spawnError || this.#exited) return;
    this.#aborted = true;
    // As Node's abortChildProcess: 'error' only when the signal was delivered.
    if (this.#startLadder('abort', this.#opts.grace, true)) this.#emitError(err);
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#startedAt = performance.now();
    // Its start is the one reader of the whole options: from here on, its settings.
    const opts = this.#opts as ResolvedSpawn;
    this.#opts = settingsFor(opts);
    // A job's startedAt, in ms since the epoch (only a call with a ring can become one).
    if (this.#ring) this.#startedAtEpoch = Date.now();
    let res;
    try {
      helper ??= helperPath();
      const spec = new SpawnSpec(
        this.#owner.group,
        candidatesFor(opts.file, opts.env),
        opts.argv,
        opts.env,
        takeForChild(this.#child),
        this.confinement,
        helper,
      ) as NativeSpawnSpec;
      // Optional fields only when given: the addon tells them by presence.
      if (opts.cwd !== undefined) spec.cwd = opts.cwd;
      if (opts.uid !== undefined) spec.uid = opts.uid;
      if (opts.gid !== undefined) spec.gid = opts.gid;
      if (this.pty) spec.pty = { cols: this.pty.cols, rows: this.pty.rows };
      // Portable binding on Windows only (shell: cmd.exe's quoting); the addon never reads it.
      if (opts.windowsVerbatimArguments) spec.windowsVerbatimArguments = true;
      if (opts.limits) spec.limits = opts.limits;
      if (this.#owner.limits) spec.groupLimits = this.#owner.limits;
      const refused = limitsRefusedHere([...controllersOf(opts.limits), ...controllersOf(this.#owner.limits)]);
      res = refused ? { error: limitsRefusal(refused) } : native.spawn(spec, ToolCall.#nativeEvent.bind(this));
    } catch (err) {
      res = { error: err as NativeErrorShape };
    }
    this.#closeChildEnds();
    if ('error' in res) {
      if (this.#constructing && throwsLikeNode(res.error)) throwFromConstructor = spawnThrow(res.error);
      else if (res.error.syscall === 'limits') this.#fail(limitsUnavailable(res.error.path ?? ''));
      else this.#fail(spawnError(res.error, opts.file, opts.argv));
      this.#publishPid();
      return;
    }
    this.#id = res.id;
    this.#verified = res.verified;
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

    if (opts.timeout > 0) this.#timer = setTimeout(() => this.#onTimeout(), opts.timeout);
    if (opts.idleTimeout > 0) this.#idleTimer = setTimeout(() => this.#onIdle(), opts.idleTimeout);
    if (opts.background) this.#becomeJob();
    this.#x?.readyWait?.start(this.#startedAt);
    if (!this.#ref) this.#applyRef();
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
    if (this.started && !this.#spawnError && !this.#empty) wait.start(this.#startedAt);
  }

  /** options.ready held: the call is a job now, and its result (run()) is due. */
  #onReady(state: ReadyState): void {
    this.#extras().readyState = state;
    if (!this.#ring) {
      // Not a call that can be a job (watchReady): it is only told.
      this.emit('ready', state);
      return;
    }
    if (!this.#opts.background) {
      // As when a command exits leaving a job: the job's time is not the command's.
      for (const t of [this.#timer, this.#idleTimer]) if (t) clearTimeout(t);
      this.#timer = null;
      this.#idleTimer = null;
      if (!this.#empty) this.#remaining = native.processInfo(native.members(this.#id));
    }
    this.#becomeJob();
    this.emit('ready', state);
    this.#settle();
  }

  #onIdle(): void {
    this.#idleTimer = null;
    void this.#startLadder('idle', this.#opts.grace, true);
  }

  /** From now on the call is a job: listed by its supervisor, its output flowing to the ring whoever reads. */
  #becomeJob(): void {
    if (this.jobId !== null || !this.#ring) return;
    // The id `proctree ps` reads from the kernel: the leaf's name, which is
    // the id of the call that made it when a leaf serves again. A job's
    // leaf never serves another call, so no two jobs share one.
    this.jobId = this.confinement === 'cgroup' && this.cgroup ? path.basename(this.cgroup) : `c${this.#id}`;
    this.#extras().cpuBase = native.retire(this.#id);
    this.#out().flowAlways();
    this.#owner.adoptJob(this, this.#ring, this.#startedAtEpoch);
  }

  #onTimeout(): void {
    this.#timer = null;
    this.#timedOut = true;
    if (this.#empty) {
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
    this.#spawnError = err;
    const errno = (err as { errno?: unknown }).errno;
    if (typeof errno === 'number') this.exitCode = errno;
    this.#end(err, true);
  }

  /** Ends a call that has no process: `emitError` says whether 'error' is due. */
  #end(err: Error, emitError: boolean): void {
    this.#spawnError ??= err;
    this.#x?.readyWait?.stop();
    this.#rejectDone?.(err);
    this.#removeAbortListener();
    this.#closeChildEnds();
    this.stdin?.destroy();
    this.pty?.[releasePty]();
    process.nextTick(() => {
      this.#owner.release(this);
      if (emitError) this.#emitError(err);
      if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport(this.#ladderReason, this.confinement, this.#verified));
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
    this.#knowStart();
    return this.#id && !this.#empty ? native.members(this.#id) : [];
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
    if (!this.#id || this.#empty || this.#spawnError) return Promise.resolve([]);
    const ask = native.ports?.bind(native);
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
   * Freezes the whole tree (its cgroup leaf's cgroup.freeze): no member
   * runs, forks or exits until resume(). Settles once cgroup.events shows
   * `frozen 1`. `idleTimeout` does not run while paused; `timeout` (wall
   * time) does. terminate() still works (the ladder thaws the tree after
   * its signals). Rejects with ERR_PROCTREE_PAUSE_UNSUPPORTED outside the
   * cgroup and systemd tiers, ERR_PROCTREE_NOT_RUNNING when the tree is not
   * running (queued, gone, being stopped).
   */
  pause(): Promise<void> {
    return this.#pauseControl().request(true);
  }

  /** Thaws what pause() froze; settles once cgroup.events shows `frozen 0`. */
  resume(): Promise<void> {
    return this.#pauseControl().request(false);
  }

  /** Whether the tree is paused: pause() settled, and neither resume() nor a ladder thawed it since. */
  get paused(): boolean {
    return this.#x?.pause?.paused ?? false;
  }

  #pauseControl(): PauseControl {
    const x = this.#extras();
    x.pause ??= new PauseControl({
      runningId: () => {
        this.#knowStart();
        return this.#id && !this.#empty && !this.#spawnError && !this.#ladder ? this.#id : null;
      },
      confinement: this.confinement,
      pausedChanged: (paused) => this.#pausedChanged(paused),
    });
    return x.pause;
  }

  /** idleTimeout counts the command's silence, which a paused tree cannot help: its timer stops, and starts afresh on resume. */
  #pausedChanged(paused: boolean): void {
    const x = this.#extras();
    if (paused) {
      if (!this.#idleTimer) return;
      clearTimeout(this.#idleTimer);
      this.#idleTimer = null;
      x.idlePaused = true;
      return;
    }
    if (!x.idlePaused) return;
    x.idlePaused = false;
    if (this.#empty || this.#opts.idleTimeout <= 0) return;
    this.#idleTimer = setTimeout(() => this.#onIdle(), this.#opts.idleTimeout);
    if (!this.#ref) this.#idleTimer.unref();
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
    setPipesRef(this.stdio, this.#ref);
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
    this.#out().resultWanted();
    this.#flushOutput();
    return this.#donePromise() as Promise<RunResult>;
  }

  /** What the whole tree used; null until it is empty ('empty', then 'close'). */
  get usage(): ResourceUsage | null {
    return this.#usage;
  }

  /** The kernel's OOM killer killed a process of the tree (see RunResult#oomKilled); known at 'empty'. */
  get oomKilled(): boolean {
    return this.#x?.oomKilled ?? false;
  }

  /** A fork of the tree was refused at a pids limit (see RunResult#pidsLimited); known at 'empty'. */
  get pidsLimited(): boolean {
    return this.#x?.pidsLimited ?? false;
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
    this.#doneEncoding = encoding;
  }

  /** @internal */
  [settledResult](): RunResult<string | Buffer> | null {
    // A call that closed settles `done` at 'close'; nobody made it yet: it is made now, as it would have been then.
    if (!this.#settled && this.#closed && !this.#done && !this.#spawnError) this.#donePromise();
    return this.#settled;
  }

  /** @internal */
  [jobOutcome](): { remaining: ProcessInfo[]; usage: ResourceUsage } {
    const remaining = this.#remaining ?? [];
    return { remaining, usage: this.#usage ?? usageSoFar(this.cgroup, Math.max(1, remaining.length), this.#x?.cpuBase) };
  }

  /** @internal */
  [callPhase](): CallPhase {
    return { stopping: this.#ladder !== null && this.#report === null, empty: this.#empty, closed: this.#closed };
  }

  #ladderFor(reason: CleanupReason, grace: number): Promise<CleanupReport> {
    if (!this.#started) {
      // Still queued: it will never start, and that is no error.
      this[dropQueued](new AbortError('The call was stopped before it started'));
      return Promise.resolve(emptyReport(reason, this.confinement, this.#verified));
    }
    this.#startLadder(reason, grace, reason !== 'leftovers');
    return this.#ladder ?? Promise.resolve(this.#report ?? emptyReport(reason, this.confinement, this.#verified));
  }

  /** Starts the ladder once; returns whether it will signal a live tree. */
  #startLadder(reason: CleanupReason, grace: number, kills: boolean): boolean {
    if (!this.#prepareLadder(reason)) return false;
    return this.#ladderStarted(native.terminate(this.#id, grace, this.#opts.killSignal, reason), reason, kills);
  }

  /** Whether a ladder may start now; if so, its promise exists from here. */
  #prepareLadder(reason: CleanupReason, stopBy = performance.now() + STOP_EXEC_WAIT_MS): boolean {
    if (this.#report || this.#ladder) return false;
    // A command held before its exec (its subtree frozen by someone) must
    // not hold a shutdown for long: the ladder stops its tree either way.
    this.#knowStart(Math.max(0, Math.floor(stopBy - performance.now())));
    if (!this.#id || this.#empty || this.#spawnError) return false;
    this.#ladderReason = reason;
    // The ladder thaws a paused tree after its signals.
    this.#x?.pause?.ended();
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
    // One wait for every exec report not in yet, not one each.
    const stopBy = performance.now() + STOP_EXEC_WAIT_MS;
    for (const c of calls) {
      if (!c.#started) continue;
      if (c.#prepareLadder(reason, stopBy)) ready.push(c);
    }
    const reporting = ready.length
      ? native.terminateGroup(ready.map((c) => c.#id), ready.map((c) => c.#opts.killSignal), grace, reason)
      : [];
    ready.forEach((c, i) => c.#ladderStarted(reporting[i] === true, reason, true));
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
    a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
    b?: number | string,
  ): void {
    this.#onNative(kind, a, b);
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

  #onNative(kind: NativeEventKind, a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage, b?: number | string): void {
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
        // A pending exec that `pid` already settled keeps what it found.
        if (this.#flag(EXEC_PENDING) || this.#pid === undefined) this.#pid = a as number;
        this.#setFlag(EXEC_PENDING, false);
        this.#publishPid();
        // The systemd tier learns its leaf from the broker.
        if (typeof b === 'string') this.cgroup = b;
        ToolCall.#emitSpawn(this);
        break;
      case NativeEventKind.Frozen:
        this.#x?.pause?.shown(a === true);
        break;
      case NativeEventKind.StartFailed:
        // Already failed when `pid` settled the exec synchronously.
        if (this.#spawnError) break;
        this.#setFlag(EXEC_PENDING, false);
        this.#pid = undefined;
        this.#publishPid();
        this.#fail(spawnError(a as NativeErrorShape, this.spawnfile, this.spawnargs));
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
    // start reading. (Nothing to flush without output streams.)
    if (this.#openReadable > 0 || this.pty) process.nextTick(ToolCall.#flushLater, this);
    if (this.#ladder || this.#empty || this.#killedAll) return;
    const pids = native.members(this.#id);
    if (pids.length === 0) return;
    const infos = native.processInfo(pids);
    if (infos.length > 0 && this.#opts.leftovers === 'keep') {
      // What the command left running is a job now, not part of the
      // command's time: its timers stop (a background call's bound the job
      // from the start, and keep running). The result comes once output
      // already in the pipes has been read.
      this.#remaining = infos;
      if (!this.#opts.background) {
        for (const t of [this.#timer, this.#idleTimer]) if (t) clearTimeout(t);
        this.#timer = null;
        this.#idleTimer = null;
      }
      this.#becomeJob();
      afterPipesPolled(() => {
        // Waiting for options.ready: the result comes with it (or at 'close').
        if (!this.#resolveDone || this.#x?.readyWait?.pending) return;
        // Read again: a process caught between fork and exec at 'exit' shows its command by now.
        const now = this.#empty ? [] : native.processInfo(native.members(this.#id));
        if (now.length > 0) this.#remaining = now;
        this.#settle();
      });
    }
    if (infos.length > 0) this.emit('leftover', infos);
    if (this.#opts.leftovers === 'kill') this.#startLadder('leftovers', this.#opts.grace, false);
  }

  #onCleanup(r: NativeReport): void {
    const report = cleanupReport(r, this.confinement);
    this.#report = report;
    this.#resolveLadder?.(report);
    // The supervisor's 'cleanup' first, as when it was the call's first listener.
    this.#owner.cleanup(this, report);
    this.emit('cleanup', report);
    const err = leftoversError(report);
    if (err) this.#emitError(err);
  }

  #onEmpty(usage: NativeUsage | undefined): void {
    if (this.#empty || this.#spawnError) return;
    this.#empty = true;
    this.#x?.readyWait?.stop();
    this.#usage = finalUsage(usage);
    if (usage?.oomKilled) this.#extras().oomKilled = true;
    if (usage?.pidsLimited) this.#extras().pidsLimited = true;
    this.#x?.pause?.ended();
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
    if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport(this.#ladderReason, this.confinement, this.#verified));
    this.stdin?.destroy();
    this.emit('empty');
    this.pty?.[ptyTreeEmpty]();
    this.#flushOutput();
    if (this.#openReadable > 0 || this.pty?.[ptyPending]) {
      // Every writer in the tree is gone; one outside it (handed our pipe)
      // must not hang 'close'. Unverified tiers wait `grace` for escapees.
      const wait = unverified ? this.#opts.grace : STDIO_DRAIN_MS;
      this.#drainTimer = setTimeout(() => {
        // After one more poll phase: data already in the pipe is read first.
        setImmediate(() => {
          this.#releaseReadable();
          this.pty?.[releasePty]();
        });
      }, wait);
      if (!this.#ref) this.#drainTimer.unref();
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
    if (this.#closed || !this.#empty || this.#openReadable > 0 || this.pty?.[ptyPending]) return;
    this.#closed = true;
    this.#closedAt = performance.now();
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    if (this.#drainTimer) clearTimeout(this.#drainTimer);
    this.#timer = null;
    this.#idleTimer = null;
    this.#drainTimer = null;
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
    this.#output ??= new CallOutput(this.#sources(), this.#opts.output, canResume);
    return this.#output;
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
    if (this.#done) return this.#done;
    let done: Promise<RunResult<string | Buffer>>;
    if (this.#spawnError) {
      done = Promise.reject(this.#spawnError);
    } else if (this.#closed) {
      done = Promise.resolve(this.#result());
    } else {
      done = new Promise((resolve, reject) => {
        this.#resolveDone = resolve;
        this.#rejectDone = reject;
      });
      // A background call's result is its start.
      if (this.#opts.background && !this.#x?.readyWait) this.once('spawn', () => this.#settle());
    }
    // 'done' carries a failed start; do not also crash on it.
    done.catch(ignore);
    this.#done = done;
    return done;
  }

  /** Resolves `done`, if anybody made it, with what is known now (at 'close', or when the call became a job). */
  #settle(): void {
    const resolve = this.#resolveDone;
    if (this.#spawnError || !resolve) return;
    this.#resolveDone = null;
    this.#rejectDone = null;
    resolve(this.#result());
  }

  #result(): RunResult<string | Buffer> {
    const output = this.#out();
    const result = runResult(
      {
        exitCode: this.exitCode,
        signal: this.signalCode,
        timedOut: this.#timedOut,
        aborted: this.#aborted,
        createdAt: this.#createdAt,
        startedAt: this.#startedAt,
        endedAt: this.#closed ? this.#closedAt : performance.now(),
        cleanup: this.#report,
        pid: this.pid,
        cgroup: this.cgroup,
        confinement: this.confinement,
        ...this[jobOutcome](),
        jobId: this.jobId,
        oomKilled: this.#x?.oomKilled ?? false,
        pidsLimited: this.#x?.pidsLimited ?? false,
      },
      output,
      this.#doneEncoding,
    );
    if (this.#x?.readyWait) result.ready = this.#x.readyState;
    this.#settled = result;
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
