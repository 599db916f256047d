// The one file that loads the addon, and the exact shape of what it exports.
import path from 'node:path';

import type { ProcessInfo } from './types';

/** What the command gets as fd i: 'close' = no fd i; 'pty' (0..2 only) = the call's terminal. */
export type NativeStdio = 'pipe' | 'ignore' | 'inherit' | 'close' | 'pty' | number;

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
  tier: 'cgroup' | 'systemd' | 'pidns' | 'subreaper' | 'pgroup';
  /** The proctree-helper executable: the shim of pidns and subreaper, and the guardian. */
  helper: string;
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
  cgroup: string;
  method: 'clone3' | 'clone' | 'clone+pidfd_open';
  tier: 'cgroup' | 'systemd' | 'pidns' | 'subreaper' | 'pgroup';
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
  verified: 'cgroup.events' | 'pidns' | 'subreaper' | 'none';
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
  /** memory.peak, where the memory controller is delegated. */
  memoryPeakBytes?: number;
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
}

export type NativeEventCallback = (
  kind: NativeEventKind,
  a?: number | null | NativeReport | NativeErrorShape | NativeUsage,
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
  >;
}

export interface NativeBinding {
  probe(helperPath: string): NativeProbes;
  spawn(spec: NativeSpawnSpec, onEvent: NativeEventCallback): NativeSpawned | { error: NativeErrorShape };
  terminate(id: number, graceMs: number, signal: number, reason: string): boolean;
  /** The ladder on many calls at once, one freeze per shared subtree: per call, whether a cleanup event will come. */
  terminateGroup(ids: readonly number[], signals: readonly number[], graceMs: number, reason: string): boolean[];
  kill(id: number, signal: number): number;
  members(id: number): number[];
  processInfo(pids: readonly number[]): NativeProcessInfo[];
  shutdown(waitMs: number): void;
  pipe(): [number, number];
  setRef(id: number, ref: boolean): void;
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
}

// node-gyp-build looks in build/Release first, then prebuilds/<platform>-<arch>.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const load = require('node-gyp-build') as ((dir: string) => NativeBinding) & { path(dir: string): string };

export const packageRoot = path.resolve(__dirname, '..', '..');
/** The .node file that was loaded; helper executables ship next to it. */
export const nativePath: string = load.path(packageRoot);
export const native: NativeBinding = load(packageRoot);
