// What the portable binding (portable.ts) knows of one call, how long its
// polls and ladder wait, and the POSIX-and-Windows helpers it signals and
// reports errors with.
import type { ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';

import type { NativeErrorShape, NativeEventCallback, NativeSpawnSpec, PortableMode } from './contract';
import type { ProcessRow } from './process-table';

export const SIGKILL = osConstants.signals.SIGKILL;
// Windows has no SIGCONT (and no stopped processes to continue).
export const SIGCONT: number | undefined = (osConstants.signals as Record<string, number | undefined>).SIGCONT;

/** How long the ladder waits for the tree to go after SIGKILL before it reports leftovers. */
export const KILL_WAIT_MS = 3000;
/** The ladder's polls: from 2 ms, doubling, to this. */
export const LADDER_POLL_MS = 50;
/** After the main exit, how often the call is checked for emptiness at most (doubling from 0 to this). */
export const WATCH_POLL_MS = 250;
/**
 * After the main exit, the process table is read once; from then on the
 * members that read found are checked cheaply (one /proc file each, or
 * kill(pid, 0)), and the table is read again only when every one of them is
 * gone — at most this often, per source: a read costs about 2 ms through
 * /proc and 17 ms through ps here (a few hundred processes), and a large
 * fraction of a second through PowerShell.
 */
export const SCAN_SOON_MS: Readonly<Record<PortableMode['processTable'], number>> = { proc: 10, ps: 50, windows: 1000 };
/**
 * kill(pid, 0) cannot tell a zombie, or a process that reused the pid, from
 * the member it was: where that is the only cheap check (ps, Windows), the
 * table is read again this often however alive the members look.
 */
export const RESCAN_MS = 5000;

export interface PortableCall {
  readonly id: number;
  readonly tier: 'pgroup' | 'none';
  readonly child: ChildProcess;
  readonly onEvent: NativeEventCallback;
  pid: number;
  /** pgroup: the group every signal goes to (the main pid: setsid made it leader); 0 in 'none'. */
  pgid: number;
  exited: boolean;
  /** Date.now() at the exit: on Windows, a child of the dead main started before it. */
  exitedAt: number;
  empty: boolean;
  ladder: boolean;
  watching: boolean;
  ref: boolean;
  peak: number;
  /** performance.now() of the last read of the process table, and of the exit. */
  lastScan: number;
  exitedPerf: number;
  /** Members the last read found (pgroup: those in the group): one still alive means not empty. */
  known: ProcessRow[];
  /** A read after the exit found nothing: empty for good (zombies cannot fork). */
  drained: boolean;
  /**
   * The tree as read in this synchronous turn, until its microtasks run: at
   * the main process's exit the call reads members() and then asks for the
   * ladder, which takes the same snapshot instead of reading the whole table
   * again. Only then: a caller's own members() before terminate() may have
   * caught a child between fork and setsid.
   */
  fresh: ProcessRow[] | null;
  readonly timers: Set<NodeJS.Timeout>;
  /** The child's pipe ends, which keep the loop alive like the process does. */
  readonly handles: Array<{ ref?: () => void; unref?: () => void }>;
}

export function sysError(code: string, syscall: string, where?: string, message?: string): NativeErrorShape {
  const err = new Error(message ?? `${syscall} ${code}`) as NativeErrorShape;
  err.code = code;
  err.errno = (osConstants.errno as Record<string, number | undefined>)[code] ?? 0;
  err.syscall = syscall;
  if (where !== undefined) err.path = where;
  return err;
}

/** Sends `sig` to a pid (or a group, negative); whether it was delivered. */
export function signal(target: number, sig: number): boolean {
  try {
    process.kill(target, sig);
    return true;
  } catch {
    return false; // gone (ESRCH), not ours (EPERM), or a signal Windows lacks (ENOSYS)
  }
}

/** Whether process group `pgid` has any member, zombies included. */
export function groupExists(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code !== 'ESRCH';
  }
}

export function envObject(env: string[] | null): NodeJS.ProcessEnv {
  if (env === null) return process.env;
  const out: NodeJS.ProcessEnv = {};
  for (const pair of env) {
    // Windows keeps per-drive directories in names that start with '='.
    const eq = pair.indexOf('=', 1);
    if (eq > 0) out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

// What child_process threw or emitted, shaped as the addon's errors: `syscall`
// is the step that failed (errors.ts turns it into the SpawnError's `step`).
export function fromNodeError(err: unknown, spec: NativeSpawnSpec, file: string): NativeErrorShape {
  const e = err as { code?: unknown; message?: string };
  const code = typeof e.code === 'string' ? e.code : 'EINVAL';
  if (code === 'EPERM' && (spec.uid !== undefined || spec.gid !== undefined)) {
    return sysError(code, spec.gid !== undefined ? 'setgid' : 'setuid');
  }
  const exec = ['ENOENT', 'EACCES', 'ENOEXEC', 'E2BIG', 'ETXTBSY', 'ELOOP', 'ENAMETOOLONG'].includes(code);
  return sysError(code, exec ? 'execve' : 'spawn', exec ? file : undefined, e.message);
}
