// What a call holds besides its public fields: the bits of its life in one
// number, the state most live calls never need (made when a part of it is
// first set), and the symbols through which its supervisor, the server and
// its streams reach it.
import type { ReadyWait } from '../ready';
import type { ByteTail, CallOutput } from '../output';
import type { ProcessInfo, ReadyState, ResourceUsage, Verification } from '../types';
import type { CallLadder, CallTimers } from './ladder';
import type { CallDone } from './result';

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

/** How the tree is proved empty, as two bits of the flags ('none' until it started). */
export function verifiedOf(flags: number): Verification {
  return VERIFICATIONS[(flags & VERIFIED_MASK) >> VERIFIED_SHIFT];
}

export function withVerified(flags: number, v: Verification): number {
  const i = VERIFICATIONS.indexOf(v);
  return (flags & ~VERIFIED_MASK) | ((i < 0 ? 0 : i) << VERIFIED_SHIFT);
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
  cpuBase: readonly [number, number] | undefined = undefined;
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
  /** The ladder's report waits for the leaf's listeners ('cleanup' and 'close' wait for it). */
  heldCheck = false;
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
