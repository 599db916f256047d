// The one file that loads the addon, and the exact shape of what it exports.
import path from 'node:path';

import type { ProcessInfo } from './types';

export type NativeStdio = 'pipe' | 'ignore' | 'inherit' | number;

export interface NativeSpawnSpec {
  group: string;
  candidates: string[];
  argv: string[];
  env: string[];
  cwd?: string;
  /** Entry i becomes fd i of the child (3 or more entries; those >= 3 without FD_CLOEXEC). */
  stdio: NativeStdio[];
  uid?: number;
  gid?: number;
  tier: 'cgroup' | 'pidns' | 'subreaper' | 'pgroup';
  /** The proctree-helper executable: the shim of pidns and subreaper. */
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
  /** Absent while `pending`: the command's pid comes with a Started event. */
  pid?: number;
  /** pidns/subreaper: the shim reports the command's start later (Started or StartFailed). */
  pending?: boolean;
  cgroup: string;
  method: 'clone3' | 'clone' | 'clone+pidfd_open';
  tier: 'cgroup' | 'pidns' | 'subreaper' | 'pgroup';
  /** pidns/subreaper: the shim's pid (pid is the command's). */
  shim?: number;
  /** One per spec.stdio entry: our end of a pipe the addon made, else -1. */
  stdio: number[];
}

/** The addon builds ProcessInfo objects itself (native/binding.cc). */
export type NativeProcessInfo = ProcessInfo;

export interface NativeReport {
  reason: string;
  signaled: number;
  killed: number;
  escaped: number;
  froze: boolean;
  verified: 'cgroup.events' | 'pidns' | 'subreaper' | 'none';
  leftovers: NativeProcessInfo[];
  durationMs: number;
}

export const enum NativeEventKind {
  Exit = 0,
  Cleanup = 1,
  Empty = 2,
  Error = 3,
  /** The command of a pending start runs: a = its pid. */
  Started = 4,
  /** The command of a pending start could not start: a = the error. */
  StartFailed = 5,
}

export type NativeEventCallback = (
  kind: NativeEventKind,
  a?: number | null | NativeReport | NativeErrorShape,
  b?: number,
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
    | 'freeze'
    | 'cgroupKill'
    | 'pidns'
    | 'userns'
    | 'subreaper'
    | 'helper',
    NativeProbe
  >;
}

export interface NativeBinding {
  probe(helperPath: string): NativeProbes;
  spawn(spec: NativeSpawnSpec, onEvent: NativeEventCallback): NativeSpawned | { error: NativeErrorShape };
  terminate(id: number, graceMs: number, signal: number, reason: string): boolean;
  kill(id: number, signal: number): number;
  members(id: number): number[];
  processInfo(pids: readonly number[]): NativeProcessInfo[];
  shutdown(waitMs: number): void;
  pipe(): [number, number];
  setRef(id: number, ref: boolean): void;
  closeFd(fd: number): void;
  ensureGuardian(helperPath: string, prefix: string): { pid: number; startedNow: boolean };
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
