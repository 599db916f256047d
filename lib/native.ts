// The one file that loads the addon, and the exact shape of what it exports.
// Off Linux, or with PROCTREE_PORTABLE set, the same shape is implemented in
// TypeScript on node:child_process (lib/portable.ts) and no addon is loaded.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { PassThrough } from 'node:stream';

import { createPortableBinding } from './portable';
import type { NativeListener } from './ports';
import type { ProcessInfo, Verification } from './types';

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

/** The tiers a binding can run: the addon all but 'none', the portable binding 'pgroup' (POSIX) and 'none'. */
export type NativeTier = 'cgroup' | 'systemd' | 'pidns' | 'subreaper' | 'pgroup' | 'none';

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
  uid?: number;
  gid?: number;
  tier: NativeTier;
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
  /** The command's pid; absent while `pending`. */
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
  tier: NativeTier;
  /** How this call's tree will be proved empty: what its reports' `verified` say. */
  verified: Verification;
  /** One per stdio entry: our end of a 'pipe', else -1. */
  stdio: number[];
  /** The terminal's master side (non-blocking, close-on-exec) when stdio asked for 'pty'. */
  ptyMaster?: number;
  /** A subtree was made now and the guardian could not be started. */
  guardianError?: NativeErrorShape;
}

/** The addon builds ProcessInfo objects itself (native/binding.cc). */
export type NativeProcessInfo = ProcessInfo;

export interface NativeReport {
  reason: string;
  signaled: number;
  killed: number;
  escaped: number;
  verified: Verification;
  leftovers: NativeProcessInfo[];
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

export type NativeEventCallback = (
  kind: NativeEventKind,
  a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
  b?: number | string,
) => void;

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
    none?: NativeProbe;
  };
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
  /** The ladder on many calls at once, one freeze per shared subtree: per call, whether a cleanup event will come. */
  terminateGroup(ids: readonly number[], signals: readonly number[], graceMs: number, reason: string): boolean[];
  kill(id: number, signal: number): number;
  members(id: number): number[];
  /**
   * What the call's tree (a call id) or a cgroup2 directory and the ones
   * below it (a path: proctree ps) listens on, asked off the JavaScript
   * thread (the addon's ports thread): onDone(error, null) or onDone(null,
   * listeners) in a later turn; an unknown or finished call, a cgroup that
   * is gone: []. The portable binding has none.
   */
  ports?(target: number | string, onDone: (err: NativeErrorShape | null, listeners: NativeListener[] | null) => void): void;
  processInfo(pids: readonly number[]): NativeProcessInfo[];
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
   * the addon's bound, past which the command counts as started): true once
   * the command exec'd (or counts as started), false when a shorter wait
   * ended first, else the step that failed.
   */
  settle(id: number, waitMs?: number): boolean | NativeErrorShape;
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

/**
 * PROCTREE_PORTABLE forces the portable binding on Linux (any value but ''
 * and '0'; 'ps' also makes it read the process table with ps(1), as on
 * macOS): how the portable tier is tested here. Off Linux it is the only
 * binding. On Linux without the variable, an addon that does not load is an
 * error, as it always was (`proctree doctor` reports it): the portable tier
 * is far weaker, and falling back to it silently would hide that.
 */
function portableMode(): PortableMode | null {
  const forced = process.env.PROCTREE_PORTABLE;
  const reason =
    process.platform !== 'linux'
      ? `not on Linux (${process.platform})`
      : forced !== undefined && forced !== '' && forced !== '0'
        ? `PROCTREE_PORTABLE=${forced}`
        : null;
  if (reason === null) return null;
  const processTable =
    process.platform === 'win32' ? 'windows' : process.platform === 'linux' && forced !== 'ps' ? 'proc' : 'ps';
  return { reason, processTable };
}

export const packageRoot = path.resolve(__dirname, '..', '..');
/** Set when the portable binding runs the calls (no addon loaded); null with the addon. */
export const portable: PortableMode | null = portableMode();

/** Bun's embedded files (`bun build --compile`): where they are read, and each one's name. */
interface BunRuntime {
  main?: unknown;
  embeddedFiles?: ReadonlyArray<{ name?: string }>;
}

/**
 * Inside a single-file executable of Bun (`bun build --compile`), whose
 * modules live in Bun's embedded file system (`/$bunfs/root/…`): there,
 * node-gyp-build finds no addon, and no helper can be executed from it.
 */
function bunExecutable(): BunRuntime | null {
  const bun = (globalThis as { Bun?: BunRuntime }).Bun;
  return typeof bun?.main === 'string' && bun.main.startsWith('/$bunfs/') ? bun : null;
}

/**
 * The addon in a Bun single-file executable: `bun build --compile` embeds a
 * .node file that is require()d by a literal path (each of these that exists
 * when the executable is built) and extracts it when it is required. Tried in
 * node-gyp-build's order; a prebuild of the other architecture fails to load
 * and the next is tried.
 */
function loadEmbeddedAddon(): { binding: NativeBinding; file: string } {
  // Each literal require directly in a try block: Bun's bundler leaves one
  // whose file does not exist to fail at run time instead of failing the build.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const failed: string[] = [];
  try {
    return { binding: require('../../build/Release/proctree.node') as NativeBinding, file: path.join(packageRoot, 'build/Release/proctree.node') };
  } catch (err) {
    failed.push(`build/Release: ${(err as Error).message}`);
  }
  try {
    const binding = require('../../prebuilds/linux-x64/proctree.glibc.node') as NativeBinding;
    return { binding, file: path.join(packageRoot, 'prebuilds/linux-x64/proctree.glibc.node') };
  } catch (err) {
    failed.push(`prebuilds/linux-x64: ${(err as Error).message}`);
  }
  try {
    const binding = require('../../prebuilds/linux-arm64/proctree.glibc.node') as NativeBinding;
    return { binding, file: path.join(packageRoot, 'prebuilds/linux-arm64/proctree.glibc.node') };
  } catch (err) {
    failed.push(`prebuilds/linux-arm64: ${(err as Error).message}`);
  }
  /* eslint-enable @typescript-eslint/no-require-imports */
  throw new Error(`no proctree addon embedded in this executable loads here (${failed.join('; ')})`);
}

function loadAddon(): { binding: NativeBinding; file: string } {
  if (bunExecutable()) return loadEmbeddedAddon();
  // node-gyp-build looks in build/Release first, then prebuilds/<platform>-<arch>.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const load = require('node-gyp-build') as ((dir: string) => NativeBinding) & { path(dir: string): string };
  return { file: load.path(packageRoot), binding: load(packageRoot) };
}

/**
 * In a Bun single-file executable: the proctree-helper embedded in it (built
 * with the helper as one more entry point, or imported `with { type: 'file' }`),
 * copied out to a file the kernel can execute. Once per content, to
 * `<tmpdir>/proctree-<uid>/<sha256 prefix>/proctree-helper`, when that
 * directory is this user's and no one else can write it; else (someone
 * else's, writable by others, a read-only or full tmpdir) to a private
 * mkdtemp directory of this process, removed at its exit (the guardian and
 * the shims have exec'd it by then). null when no helper is embedded, or it
 * cannot be copied out at all (the helper probe then says why calls run
 * without a guardian), or outside such an executable.
 */
export function embeddedHelper(): string | null {
  const bun = bunExecutable();
  const entry = bun?.embeddedFiles?.find((f) => /^proctree-helper(-[0-9a-z]+)?\.?$/.test(path.basename(f.name ?? '')));
  if (!bun || !entry?.name) return null;
  const bytes = fs.readFileSync(path.join(path.dirname(bun.main as string), path.basename(entry.name)));
  const uid = process.getuid?.() ?? 0;
  try {
    const top = path.join(os.tmpdir(), `proctree-${uid}`);
    fs.mkdirSync(top, { mode: 0o700, recursive: true });
    const st = fs.lstatSync(top);
    if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0) throw new Error(`${top} is not only uid ${uid}'s`);
    const dir = path.join(top, createHash('sha256').update(bytes).digest('hex').slice(0, 16));
    const file = path.join(dir, 'proctree-helper');
    if (fs.existsSync(file) && fs.readFileSync(file).equals(bytes)) return file;
    fs.mkdirSync(dir, { mode: 0o700, recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, bytes, { mode: 0o755 });
    fs.renameSync(tmp, file);
    return file;
  } catch {
    // not a directory to share: a private one
  }
  try {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-helper-'));
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'proctree-helper');
    fs.writeFileSync(file, bytes, { mode: 0o755 });
    return file;
  } catch {
    return null;
  }
}

const loaded = portable ? { binding: createPortableBinding(portable), file: '' } : loadAddon();
/** The .node file that was loaded ('' with the portable binding); helper executables ship next to it. */
export const nativePath: string = loaded.file;
export const native: NativeBinding = loaded.binding;
