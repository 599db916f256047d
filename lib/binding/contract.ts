// The binding contract: what the addon (native/binding.cc and native/binding/) exports and the
// portable binding (portable.ts) implements, type for type. It imports
// neither: the loader (index.ts) picks one, and both implementations and
// every caller read their shapes from here. The addon builds ProcessInfo
// objects itself, in the public shape (types.ts).
import type { PassThrough } from 'node:stream';

import type { Confinement, ProcessInfo, Verification } from '../types';

/**
 * A 'pipe' entry of the portable binding, which cannot make pipe pairs:
 * child_process makes the pipe when the command starts, and the binding
 * connects the child's end to `stream` (our side, which exists from the
 * call's creation on) and sets `connected`.
 */
export interface PortablePipe {
  readonly stream: PassThrough;
  /** fd 0 is written by us; every other pipe is read. */
  readonly readable: boolean;
  connected: boolean;
}

/**
 * What the command gets as fd i: 'close' = no fd i; 'pty' (0..2 only) = the
 * call's terminal; a PortablePipe only with the portable binding.
 */
export type NativeStdio = 'pipe' | 'ignore' | 'inherit' | 'close' | 'pty' | number | PortablePipe;

/** Limits as the addon takes them (validated by lib/limits.ts): each field set is a limit. */
export interface NativeLimits {
  memoryBytes?: number;
  pids?: number;
  cpu?: number;
}

export interface NativeSpawnSpec {
  group: string;
  candidates: string[];
  argv: string[];
  /** null: the command gets this process's own environment (the main thread's `environ`). */
  env: string[] | null;
  cwd?: string;
  /** At least 3 entries; entry i becomes fd i of the command. */
  stdio: NativeStdio[];
  /** The terminal's size when stdio[0..2] are 'pty'. */
  pty?: { cols: number; rows: number };
  /** A sealed call (the cgroup tier only): its shim as init of new user, PID, mount and cgroup namespaces. */
  seal?: boolean;
  /**
   * The cgroup tier: hand the clone to a spawner thread and return before
   * the child exists (no `pid` yet, `execPending`): `settle(id)` gives the
   * pid. Asked past the budget of clones one synchronous run may make.
   */
  defer?: boolean;
  uid?: number;
  gid?: number;
  tier: Confinement;
  /** Windows (the portable binding only): pass the arguments unquoted, as Node's option. */
  windowsVerbatimArguments?: boolean;
  /** The proctree-helper executable: the shim of pidns and subreaper, and the guardian. */
  helper: string;
  /** The call's limits, on its leaf (the cgroup tier only; lib/limits.ts). */
  limits?: NativeLimits;
  /** Its supervisor's limits, on the subtree: the total of all its calls. */
  groupLimits?: NativeLimits;
}

export interface NativeErrorShape extends Error {
  code: string;
  errno: number;
  syscall: string;
  path?: string;
}

export interface NativeSpawned {
  id: number;
  /** The command's pid; absent while `pending`, or while a deferred clone (`defer`) is `execPending`. */
  pid?: number;
  /** pidns/subreaper: the shim reports the command's pid later (a Started or StartFailed event). */
  pending?: true;
  /**
   * The command was cloned (`pid` is its) and may not have exec'd yet: a
   * Started or StartFailed event says how its exec went, and `settle(id)`
   * asks at once (waiting for it a bounded time).
   */
  execPending?: true;
  cgroup: string;
  method: 'clone3' | 'clone' | 'clone+pidfd_open' | 'child_process';
  /** How this call's tree will be proved empty: what its reports' `verified` say. */
  verified: Verification;
  /** One per stdio entry, when an entry was 'pipe': our end of a 'pipe', else -1. */
  stdio?: number[];
  /** The terminal's master side (non-blocking, close-on-exec) when stdio asked for 'pty'. */
  ptyMaster?: number;
  /** A subtree was made now and the guardian could not be started. */
  guardianError?: NativeErrorShape;
}

export interface NativeReport {
  reason: string;
  signaled: number;
  killed: number;
  escaped: number;
  verified: Verification;
  /**
   * Alive after the whole ladder: the addon gives their pids, and the
   * report's reader asks what /proc says of them off the JavaScript thread
   * (a member that outlived SIGKILL may be stuck in the kernel, and so would
   * a read of its cmdline); the portable binding describes them itself.
   */
  leftoverPids?: number[];
  leftovers?: ProcessInfo[];
  durationMs: number;
}

/** What the Empty event carries: the whole tree's usage, as far as the tier can see it. */
export interface NativeUsage {
  /** The most processes seen in the tree at once (members() and the ladder's reads). */
  peakProcesses: number;
  /** Absent when the tier could not tell. */
  userMs?: number;
  systemMs?: number;
  /** 'cgroup': cpu.stat of the call's cgroup; 'rusage': what the main process (pgroup) or the shim (pidns, subreaper) reaped. */
  source?: 'cgroup' | 'rusage';
  /** memory.peak, where the memory controller is delegated (in a reused leaf: only when it grew past the earlier calls'). */
  memoryPeakBytes?: number;
  /** pids.peak, where the pids controller is delegated (6.1+; the same rule). */
  pidsPeak?: number;
  /** memory.events oom_kill of the leaf grew during the call. */
  oomKilled?: true;
  /** pids.events max of the leaf grew during the call: a fork was refused at pids.max. */
  pidsLimited?: true;
}

export const enum NativeEventKind {
  Exit = 0,
  Cleanup = 1,
  Empty = 2,
  Error = 3,
  /** The shim (or the systemd tier's broker) started the command: a = its pid, b = its cgroup (systemd tier). */
  Started = 4,
  /** The shim could not start the command: a = the error. */
  StartFailed = 5,
  /** cgroup.events shows the state pause() (a = true) or resume() (a = false) asked for (10: the addon's CallEvent::kFrozen). */
  Frozen = 10,
}

/** What the addon calls with a call's events, positionally (see NativeEventKind); nativeEvent() reads them. */
export type NativeEventCallback = (
  kind: NativeEventKind,
  a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
  b?: number | string,
) => void;

/** A call's event as a typed record. */
export type NativeEvent =
  | { kind: NativeEventKind.Exit; code: number | null; signal: number }
  | { kind: NativeEventKind.Cleanup; report: NativeReport }
  | { kind: NativeEventKind.Empty; usage: NativeUsage | undefined }
  | { kind: NativeEventKind.Error; error: NativeErrorShape }
  | { kind: NativeEventKind.Started; pid: number; cgroup: string | undefined }
  | { kind: NativeEventKind.StartFailed; error: NativeErrorShape }
  | { kind: NativeEventKind.Frozen; frozen: boolean };

/** The record of what a binding passed positionally. */
export function nativeEvent(
  kind: NativeEventKind,
  a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
  b?: number | string,
): NativeEvent {
  switch (kind) {
    case NativeEventKind.Exit:
      return { kind, code: a as number | null, signal: (b as number | undefined) ?? 0 };
    case NativeEventKind.Cleanup:
      return { kind, report: a as NativeReport };
    case NativeEventKind.Empty:
      return { kind, usage: (a ?? undefined) as NativeUsage | undefined };
    case NativeEventKind.Started:
      return { kind, pid: a as number, cgroup: typeof b === 'string' ? b : undefined };
    case NativeEventKind.Frozen:
      return { kind, frozen: a === true };
    default:
      return { kind, error: a as NativeErrorShape };
  }
}

export interface NativeLocation {
  mount: string;
  own: string;
  ownPath: string;
}

export interface NativeProbe {
  ok: boolean;
  errno?: string;
  syscall?: string;
  detail?: string;
}

export interface NativeProbes {
  location: NativeLocation | null;
  probes: Record<
    | 'cgroup2'
    | 'delegation'
    | 'clone3'
    | 'cloneIntoCgroup'
    | 'pidfd'
    | 'pidfdSendSignal'
    | 'waitidPidfd'
    | 'freeze'
    | 'cgroupKill'
    | 'pidns'
    | 'userns'
    | 'subreaper'
    | 'helper'
    | 'userManager',
    NativeProbe
  > & {
    /** Only the portable binding says these: the addon's pgroup tier is always there, its 'none' never. */
    pgroup?: NativeProbe;
    /** Only the addon says this: a sealed call's namespaces and mounts, tried in a throwaway child. */
    seal?: NativeProbe;
    none?: NativeProbe;
  };
}

/** One listener as the addon reports it (kernel/sockets.h): port 0 for unix, pid -1 when unknown. */
export interface NativeListener {
  protocol: string;
  address: string;
  port: number;
  pid: number;
}

/** Kinds of streamOpen(): 0 run()'s output, 1 read, 2 written, 3 both. */
export type StreamKind = 0 | 1 | 2 | 3;
/**
 * A stream's events: (0, chunk) a chunk read; (1, null | error) the end of
 * reading; (2, null | error) the oldest write not completed yet is in the pipe.
 */
export type StreamEventCallback = (kind: 0 | 1 | 2, value: Buffer | NativeErrorShape | null) => void;

export interface NativeBinding {
  probe(helperPath: string): NativeProbes;
  spawn(spec: NativeSpawnSpec, onEvent: NativeEventCallback): NativeSpawned | { error: NativeErrorShape };
  terminate(id: number, graceMs: number, signal: number, reason: string): boolean;
  /** The ladder on many calls at once, sharing each turn's time: per call, whether a cleanup event will come. */
  terminateGroup(ids: readonly number[], signals: readonly number[], graceMs: number, reason: string): boolean[];
  kill(id: number, signal: number): number;
  members(id: number): number[];
  /**
   * What the call's tree (a call id) or a cgroup2 directory and the ones
   * below it (a path: proctree ps) listens on, asked off the JavaScript
   * thread (the addon's ports thread): onDone(error, null) or onDone(null,
   * listeners) in a later turn; an unknown or finished call, a cgroup that
   * is gone: []. Bigint cgroup ids (the inode numbers of cgroup2
   * directories): the sockets made in those cgroups, whoever holds them
   * now, even once the cgroups are removed (no pids). The portable binding
   * has none.
   */
  ports?(target: number | string | readonly bigint[], onDone: (err: NativeErrorShape | null, listeners: NativeListener[] | null) => void): void;
  /**
   * What /proc (or the process table) says of those of pids still there.
   * With pgid: of the first of them in that process group only (the native
   * binding then reads the command line of that one alone).
   */
  processInfo(pids: readonly number[], pgid?: number): ProcessInfo[];
  /**
   * processInfo(pids) read off the JavaScript thread (the addon's ports
   * thread): onDone(error, null) or onDone(null, infos) in a later turn. The
   * portable binding has none (its processInfo reads one table).
   */
  describe?(pids: readonly number[], onDone: (err: NativeErrorShape | null, infos: ProcessInfo[] | null) => void): void;
  shutdown(waitMs: number): void;
  pipe(): [number, number];
  /**
   * A pipe (a socketpair for kind 3) whose end the addon reads or writes
   * (native/loop/streams.h): kind 0 run()'s stdout or stderr (always read),
   * 1 the child writes, 2 the child reads (stdin), 3 both. Returns [its id,
   * the child's end, our end's number (for ioctls and for handing it to
   * another call; never read, written or closed but through the stream)].
   */
  streamOpen(kind: StreamKind, onEvent: StreamEventCallback): [number, number, number];
  /** A pty master, the addon's from now on (closed by it, also when this throws): its stream id. */
  streamAdopt(fd: number, onEvent: StreamEventCallback): number;
  /** Whether chunks are wanted (a Readable with room) or not. */
  streamRead(id: number, reading: boolean): void;
  /** false: all in the pipe; true: an event 2 follows; an error: nothing was or will be written. */
  streamWrite(id: number, chunk: Buffer): boolean | NativeErrorShape;
  /** No more writes: a pipe's write end closes, a socket's write side shuts down. */
  streamShutdown(id: number): NativeErrorShape | undefined;
  /** Stops waiting for EOF: what the pipe holds now still comes, then the end (on a later turn). */
  streamEnd(id: number): void;
  /**
   * What JavaScript has yet to get of a stream it reads: the bytes in the
   * pipe and in a chunk on its way, and whether its end follows them.
   * Absent in the portable binding.
   */
  streamBacklog?(id: number): [number, boolean];
  /** Closed now: no more events. */
  streamClose(id: number): void;
  /** Whether the stream keeps the loop alive while it reads or writes. */
  streamRef(id: number, ref: boolean): void;
  setRef(id: number, ref: boolean): void;
  /**
   * The call's cgroup leaf names a job: no later call gets it. Returns the
   * leaf's cpu.stat user and system µs when the call began (a leaf a finished
   * call handed on carries that call's counters; 0 for a new one).
   */
  retire(id: number): [number, number, number?];
  /**
   * Waits for an `execPending` call's exec report, `waitMs` at most (default:
   * the addon's bound, past which the command counts as started): its pid
   * (or true where it has none of its own) once the command exec'd or counts
   * as started, false when a shorter wait ended first, else the step that
   * failed. `quiet`: a pid answered is the start's only word (no Started
   * event follows it), for an asker that emits 'spawn' itself.
   */
  settle(id: number, waitMs?: number, quiet?: boolean): number | boolean | NativeErrorShape;
  closeFd(fd: number): void;
  ptyResize(masterFd: number, cols: number, rows: number): void;
  /** One cgroup2 mount per hierarchy, of /proc/self/mountinfo (or of the text given). */
  cgroup2Hierarchies(mountinfo?: string): Array<{ mount: string; root: string }>;
  /** Every pid in a cgroup and the cgroups below it; [] when it is gone. */
  cgroupMembers(path: string): number[];
  /** The terminal's foreground process group, or -1. */
  ptyForeground(masterFd: number): number;
  /** `proctree-<pid>-<12 hex digits>`: drawn once per process, shared by its workers. */
  subtreePrefix(): string;
  /**
   * The call's leaf frozen (true) or thawed (false) through its
   * cgroup.freeze; a Frozen event follows once cgroup.events shows it. The
   * error: ENOTSUP (not a cgroup tier, no freezer, a tracer attached to the
   * harness), ESRCH (the tree is gone or being stopped). The portable
   * binding has none.
   */
  pause?(id: number, paused: boolean): NativeErrorShape | undefined;
  /**
   * Where this harness's subtrees go and which limits their leaves can have
   * there (native/kernel/limits.h limits_reach); reason: why not the others,
   * and the fix. The portable binding has none.
   */
  limitsProbe?():
    | { parent: string; available: { memory: boolean; pids: boolean; cpu: boolean }; reason: string }
    | { error: NativeErrorShape };
}

/** Why the portable binding runs instead of the addon, and how it reads the process table. */
export interface PortableMode {
  /** `not on Linux (darwin)`, or `PROCTREE_PORTABLE=1`. */
  reason: string;
  /** /proc (Linux), ps(1) (macOS, the BSDs; on Linux with PROCTREE_PORTABLE=ps), or Windows' process list. */
  processTable: 'proc' | 'ps' | 'windows';
}
