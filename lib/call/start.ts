// A call from its creation to its start: what it sets up before it is
// admitted (its output taps, its job ring, the ready wait, run()'s input),
// its admission (now or queued), and its start: the settings it keeps from
// its options, the spec the binding is handed (SpawnSpec, with the
// executable's candidate paths and the helper's path), which start errors
// Node throws instead of emitting, and the tick after spawn() that asks for
// the exec report.
import path from 'node:path';
import { performance } from 'node:perf_hooks';

import { binding } from '../binding';
import type { NativeErrorShape, NativeSpawnSpec } from '../binding/contract';
import { helperPath, sealRefusal, sealStepFailed, sealUnavailable, warnNoGuardian } from '../capabilities';
import { spawnError, spawnThrow } from '../errors';
import { controllersOf, limitsRefusedHere, limitsUnavailable } from '../limits';
import { isDefaultOutput, type ResolvedRun, type ResolvedSpawn } from '../options';
import { ByteTail, tapLater } from '../output';
import { attachMaster, setPtyRef, typeInput } from '../pty';
import { destroyPipes, setPipesRef, takeForChild } from '../stdio';
import type { Confinement } from '../types';
import { knowStart, publishPid } from './exec';
import { onNativeEvent } from './events';
import { becomeJob, readyWait } from './job';
import { startTimers, watchSignal } from './ladder';
import { closeChildEnds, donePromise, emitSpawn, fail, flushOutput, holdOutputs, output, outputSources, removeAbortListener } from './result';
import { type CallState, CONSTRUCTING, EMPTY, EXEC_PENDING, SEALING, type Settings, STARTED, UNREF, withVerified } from './state';

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

// execvpe's search, done in the parent when the call starts (a queued or
// live call holds no list of paths); the child execs the first candidate
// that exists (relative entries resolve against the new cwd).
function candidatesFor(file: string, env: readonly string[] | null): string[] {
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

/** A refusal of limits before the addon is asked, in the shape of its own (syscall 'limits'). */
function limitsRefusal(why: string): NativeErrorShape {
  const err = new Error(why) as NativeErrorShape;
  err.code = 'ENOTSUP';
  err.errno = 95;
  err.syscall = 'limits';
  err.path = why;
  return err;
}

/** A seal refused before the addon is asked, in the shape of its own (syscall 'seal'). */
function sealError(why: string): NativeErrorShape {
  const err = new Error(why) as NativeErrorShape;
  err.code = 'ENOTSUP';
  err.errno = 95;
  err.syscall = 'seal';
  err.path = why;
  return err;
}

// A start that Node reports by throwing from spawn() rather than by 'error':
// the uid/gid steps (EPERM when not privileged, EINVAL for a bad id).
function throwsLikeNode(err: NativeErrorShape): boolean {
  return err.syscall === 'setuid' || err.syscall === 'setgid' || err.syscall === 'setgroups';
}

let helper: string | undefined;

/** The spec of a call's start: `stdio` is what the child gets (stdio.ts's takeForChild). */
function spawnSpec(
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
  if (opts.seal) spec.seal = true;
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

/**
 * The tick after spawn(), where Node emits 'spawn': the report is asked
 * for, within what this run of ticks may still wait (SPAWN_TICK_WAIT_MS);
 * a report not in by then emits 'spawn' (or 'error') when it comes. A
 * deferred clone (no pid yet) is not waited for at all: it was deferred so
 * that this thread would not wait on it.
 */
function spawnTick(s: CallState): void {
  const now = performance.now();
  if (spawnTicksUntil === 0) {
    spawnTicksUntil = now + SPAWN_TICK_WAIT_MS;
    setImmediate(endSpawnTicks);
  }
  // Quiet: a pid answered now is the start's only word (this tick emits
  // 'spawn'), and the addon sends no Started event after it.
  knowStart(s, s.pid === undefined ? 0 : Math.max(0, Math.floor(spawnTicksUntil - now)), true);
  if (!s.flag(EXEC_PENDING) && s.pid !== undefined && !s.failed) emitSpawn(s);
}

/**
 * How long spawn() may clone on this thread in one synchronous run (ms). A
 * clone here waits until the child's exec has started (CLONE_VFORK, for the
 * OOM killer's exemption and no copy of memory), as Node's spawn waits for
 * its exec; a burst of spawns in one run (Promise.all over tool calls)
 * would hold the event loop for every one of those execs, which on a busy
 * machine wait for a CPU. Past this budget the run's later clones go to the
 * addon's spawner threads without being waited for: their pid comes when
 * asked (`pid` waits for it) or with 'spawn'.
 */
const CLONE_BUDGET_MS = 2;
/** What this run's clones took of the budget (ms), or -1 outside a run. */
let cloneRunSpent = -1;
function endCloneRun(): void {
  cloneRunSpent = -1;
}
function chargeCloneRun(ms: number): void {
  if (cloneRunSpent < 0) {
    cloneRunSpent = 0;
    setImmediate(endCloneRun);
  }
  cloneRunSpent += ms;
}

/**
 * What a call sets up before it is admitted. Output is collected from the
 * first byte, so `done` read late loses nothing: streams are tapped now, and
 * the CallOutput is made when the first chunk arrives or something asks for
 * it.
 */
export function prepareCall(s: CallState, opts: ResolvedSpawn, run: ResolvedRun | undefined): void {
  const c = s.call;
  if ((c.pty || c.stdout || c.stderr) && !tapLater(outputSources(s), c)) output(s);
  if (opts.background || opts.leftovers === 'keep') {
    const ring = new ByteTail(opts.jobBuffer);
    s.extras().ring = ring;
    output(s).subscribe((chunk) => ring.write(chunk));
  }
  if (opts.ready) readyWait(s, opts.ready);
  if (opts.idleTimeout > 0) output(s).subscribe(() => s.x?.timers?.idle?.refresh());
  if (run) feedInput(s, run);
  // A call that can become a job takes its result when it does.
  if (run) s.done().encoding = run.encoding;
  if (run || opts.background || opts.leftovers === 'keep') donePromise(s);
  // run() reads the streams itself (nobody else can) and wants the result.
  if (run) {
    output(s).resultWanted();
    flushOutput(s);
  }
}

/** run()'s input, or stdin closed. */
function feedInput(s: CallState, run: ResolvedRun): void {
  const { pty, stdin } = s.call;
  if (pty) {
    if (run.input !== undefined || run.closeStdin) typeInput(pty, run.input);
  } else if (stdin) {
    if (run.input !== undefined) stdin.end(run.input);
    else if (run.closeStdin) stdin.end();
  }
}

/**
 * A start error that Node throws from spawn() (see throwsLikeNode), carried
 * from startCall() out of the constructor that admitted the call:
 * construction is synchronous, so one slot serves every call.
 */
let throwFromConstructor: Error | null = null;

/**
 * The call's admission by its supervisor: it starts now, or when a slot is
 * free. Throws what Node's spawn() throws (see throwsLikeNode), with
 * nothing of the call left behind. `stdioError`: its pipes could not be
 * made (EMFILE): as Node, an 'error', not a throw.
 */
export function admitCall(s: CallState, opts: ResolvedSpawn, stdioError: NativeErrorShape | null): void {
  if (stdioError) {
    s.setFlag(STARTED, true);
    fail(s, spawnError(stdioError, opts.file, opts.argv));
    return;
  }
  s.setFlag(CONSTRUCTING, true);
  s.owner.admit(s.call, () => startCall(s), opts.background);
  s.setFlag(CONSTRUCTING, false);
  const thrown = throwFromConstructor;
  throwFromConstructor = null;
  if (!thrown) {
    // After admit: an already aborted signal acts a tick after 'spawn' was queued, as in Node.
    watchSignal(s);
    return;
  }
  removeAbortListener(s);
  closeChildEnds(s);
  destroyPipes(s.call.stdio, null);
  s.owner.release(s.call);
  throw thrown;
}

function startCall(s: CallState): void {
  if (s.flag(STARTED)) return;
  s.setFlag(STARTED, true);
  s.startedAt = performance.now();
  // Its start is the one reader of the whole options: from here on, its settings.
  const opts = s.opts as ResolvedSpawn;
  s.opts = settingsFor(opts);
  const c = s.call;
  // A job's startedAt, in ms since the epoch (only a call with a ring can become one).
  if (s.x?.ring) s.x.startedAtEpoch = Date.now();
  let res;
  try {
    const spec = spawnSpec(s.owner.group, opts, takeForChild(s.child), c.confinement, c.pty);
    if (opts.limits) spec.limits = opts.limits;
    if (s.owner.limits) spec.groupLimits = s.owner.limits;
    const refused = limitsRefusedHere([...controllersOf(opts.limits), ...controllersOf(s.owner.limits)]);
    // Never run unsealed: refused before anything is made.
    const unsealed = opts.seal ? sealRefusal(c.confinement) : null;
    if (unsealed !== null) res = { error: sealError(unsealed) };
    else if (refused) res = { error: limitsRefusal(refused) };
    else {
      const deferred = cloneRunSpent >= CLONE_BUDGET_MS;
      if (deferred) spec.defer = true;
      const t0 = deferred ? 0 : performance.now();
      res = binding.spawn(spec, onNativeEvent.bind(s));
      if (!deferred) chargeCloneRun(performance.now() - t0);
    }
  } catch (err) {
    res = { error: err as NativeErrorShape };
  }
  closeChildEnds(s);
  if ('error' in res) {
    if (s.flag(CONSTRUCTING) && throwsLikeNode(res.error)) throwFromConstructor = spawnThrow(res.error);
    else if (res.error.syscall === 'limits') fail(s, limitsUnavailable(res.error.path ?? ''));
    else if (res.error.syscall === 'seal') fail(s, sealUnavailable(res.error.path ?? 'only the cgroup tier can seal a call'));
    else if (opts.seal && sealStepFailed(res.error.syscall, res.error.code)) fail(s, sealUnavailable(`${res.error.syscall}: ${res.error.code}`));
    else fail(s, spawnError(res.error, opts.file, opts.argv));
    publishPid(s);
    return;
  }
  s.id = res.id;
  s.flags = withVerified(s.flags, res.verified);
  // The shim reports the sealed command's start (a pending pid).
  if (opts.seal && res.pending) s.setFlag(SEALING, true);
  // A shim (sealed calls, the pidns and subreaper tiers) or the broker
  // reports the command's start and pid later: its output waits for
  // 'spawn', which waits for that report.
  if (res.pending) holdOutputs(s);
  if (res.ptyMaster !== undefined) c.pty?.[attachMaster](res.ptyMaster);
  c.cgroup = res.cgroup === '' ? null : res.cgroup;
  if (res.guardianError) warnNoGuardian(res.guardianError);
  if (!res.pending) {
    s.pid = res.pid;
    if (res.execPending) {
      s.setFlag(EXEC_PENDING, true);
      process.nextTick(spawnTick, s);
    } else {
      publishPid(s);
      process.nextTick(emitSpawn, s);
    }
  }
  startTimers(s);
  if (opts.background) becomeJob(s);
  s.x?.readyWait?.start(s.startedAt);
  if (s.flag(UNREF)) applyRef(s);
}

/** Whether the call keeps the event loop alive: its pipes, terminal, timers and the binding's hold on it. */
export function applyRef(s: CallState): void {
  const ref = !s.flag(UNREF);
  setPipesRef(s.call.stdio, ref);
  s.call.pty?.[setPtyRef](ref);
  s.x?.timers?.ref(ref);
  if (s.id && !s.flag(EMPTY)) binding.setRef(s.id, ref);
}
