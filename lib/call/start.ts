// What a call's start needs: the settings it keeps from its options, the
// spec the binding is handed (SpawnSpec, with the executable's candidate
// paths and the helper's path), which start errors Node throws instead of
// emitting, and how long the ticks after spawn() wait for exec reports.
import path from 'node:path';
import { performance } from 'node:perf_hooks';

import type { NativeErrorShape, NativeSpawnSpec } from '../binding/contract';
import { helperPath } from '../capabilities';
import { isDefaultOutput, type ResolvedSpawn } from '../options';
import type { Confinement } from '../types';

/** What a call reads of its options all its life. */
export type Settings = Pick<
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

export function settingsFor(o: ResolvedSpawn): CallSettings {
  if (o.signal !== undefined || !isDefaultOutput(o.output)) return new CallSettings(o);
  if (sharedSettings === null || !sharedSettings.sameAs(o)) sharedSettings = new CallSettings(o);
  return sharedSettings;
}

// execvpe's search, done in the parent when the call starts (a queued or
// live call holds no list of paths); the child execs the first candidate
// that exists (relative entries resolve against the new cwd).
export function candidatesFor(file: string, env: readonly string[] | null): string[] {
  // Windows (the portable binding): child_process searches PATH and PATHEXT itself.
  if (file.includes('/') || process.platform === 'win32') return [file];
  const entry = env === null ? process.env.PATH : env.find((e) => e.startsWith('PATH='))?.slice(5);
  const searchPath = entry !== undefined ? entry : '/usr/local/bin:/usr/bin:/bin';
  return searchPath.split(':').map((dir) => (dir === '' ? file : path.posix.join(dir, file)));
}

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

// A start that Node reports by throwing from spawn() rather than by 'error':
// the uid/gid steps (EPERM when not privileged, EINVAL for a bad id).
export function throwsLikeNode(err: NativeErrorShape): boolean {
  return err.syscall === 'setuid' || err.syscall === 'setgid' || err.syscall === 'setgroups';
}

let helper: string | undefined;

/** The spec of a call's start: `stdio` is what the child gets (stdio.ts's takeForChild). */
export function spawnSpec(
  group: string,
  opts: ResolvedSpawn,
  stdio: NativeSpawnSpec['stdio'],
  tier: Confinement,
  pty: { cols: number; rows: number } | null,
): NativeSpawnSpec {
  helper ??= helperPath();
  const spec = new SpawnSpec(group, candidatesFor(opts.file, opts.env), opts.argv, opts.env, stdio, tier, helper) as NativeSpawnSpec;
  // Optional fields only when given: the addon tells them by presence.
  if (opts.cwd !== undefined) spec.cwd = opts.cwd;
  if (opts.uid !== undefined) spec.uid = opts.uid;
  if (opts.gid !== undefined) spec.gid = opts.gid;
  if (pty) spec.pty = { cols: pty.cols, rows: pty.rows };
  // Portable binding on Windows only (shell: cmd.exe's quoting); the addon never reads it.
  if (opts.windowsVerbatimArguments) spec.windowsVerbatimArguments = true;
  return spec;
}

/**
 * What the ticks after spawn() may wait for exec reports, together (ms): as
 * in Node, 'spawn' comes in the tick after spawn() (before 'error' of an
 * aborted signal, before any output), so that tick asks for the report. A
 * spawner thread made the clone, and calls spawned in the same synchronous
 * run exec side by side, so one wait covers them all; a child held before
 * its exec (its subtree frozen by someone) costs this once per run of ticks,
 * not per call, and its 'spawn' comes with its report.
 */
const SPAWN_TICK_WAIT_MS = 20;
/** When the current run of spawn ticks stops waiting (performance.now()), or 0 outside one. */
let spawnTicksUntil = 0;
function endSpawnTicks(): void {
  spawnTicksUntil = 0;
}

/** What the tick after a spawn() may still wait for its exec report (ms): the run of ticks shares one budget. */
export function spawnTickBudget(): number {
  const now = performance.now();
  if (spawnTicksUntil === 0) {
    spawnTicksUntil = now + SPAWN_TICK_WAIT_MS;
    setImmediate(endSpawnTicks);
  }
  return Math.max(0, Math.floor(spawnTicksUntil - now));
}
