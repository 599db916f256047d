// Whether the command exec'd: the binding clones the command without waiting
// for its exec, and reports how the exec went later (an event) or when asked
// (settle). `pid` and 'spawn' come from that report, as Node's come after
// its synchronous spawn: a command that could not start has no pid, and
// gets 'error' instead of 'spawn'.
import { binding } from '../binding';
import type { NativeErrorShape } from '../binding/contract';
import { sealStepFailed, sealUnavailable } from '../capabilities';
import { spawnError } from '../errors';
import { emitSpawn, fail } from './result';
import { type CallState, EXEC_PENDING, SEALING } from './state';

/**
 * `pid` as Node has it once known: an own, enumerable data property
 * (Object.keys, spread, util.inspect show it), shadowing the getter that
 * waits for a pending exec report.
 */
export function publishPid(s: CallState): void {
  Object.defineProperty(s.call, 'pid', { value: s.pid, writable: true, enumerable: true, configurable: true });
}

/**
 * Whether the command started is known from here on (a signal or a ladder
 * needs it: a command that never ran gets neither). `quiet`: for an asker
 * that emits 'spawn' itself, a pid answered is the start's only word (no
 * Started event follows it).
 */
export function knowStart(s: CallState, waitMs?: number, quiet = false): void {
  if (s.flag(EXEC_PENDING)) settleExec(s, waitMs, quiet);
}

/**
 * Asks for the exec report now (it also comes as an event), waiting for it
 * up to `waitMs` (default: the addon's bound, past which the command
 * counts as started). A command that could not start fails now: 'error' on
 * the next tick, then 'close'. A shorter wait that ends first leaves the
 * report to its event.
 */
function settleExec(s: CallState, waitMs?: number, quiet = false): void {
  const res = binding.settle(s.id, waitMs, quiet);
  if (res === false) return;
  s.setFlag(EXEC_PENDING, false);
  const started = typeof res === 'number' || res === true;
  // A deferred clone learns its pid here (the others knew it at spawn()).
  if (typeof res === 'number') s.pid = res;
  else if (!started) s.pid = undefined;
  // Settled before its event came (its output was read first, say): a
  // sealed command runs only once its shim has sealed, as execStarted says.
  if (typeof res === 'number' && s.flag(SEALING)) s.call.sealed = true;
  publishPid(s);
  if (!started) fail(s, spawnError(res, s.call.spawnfile, s.call.spawnargs));
}


/** The exec report came as an event: the command runs as `pid`. */
export function execStarted(s: CallState, pid: number): void {
  // A pending exec that `pid` already settled keeps what it found.
  if (s.flag(EXEC_PENDING) || s.pid === undefined) s.pid = pid;
  s.setFlag(EXEC_PENDING, false);
  // The shim sealed its namespaces, then the command exec'd without a capability.
  if (s.flag(SEALING)) s.call.sealed = true;
  publishPid(s);
  emitSpawn(s);
}

/** The exec report came as an event: the command could not start. */
export function execFailed(s: CallState, err: NativeErrorShape): void {
  // Already failed when `pid` settled the exec synchronously.
  if (s.failed) return;
  s.setFlag(EXEC_PENDING, false);
  s.pid = undefined;
  publishPid(s);
  // The shim could not seal (a mount refused, no cgroup namespace): the
  // command never ran, and never runs unsealed.
  if (s.flag(SEALING) && sealStepFailed(err.syscall, err.code)) {
    fail(s, sealUnavailable(`${err.syscall}: ${err.code ?? 'failed'}${err.path ? ` (${err.path})` : ''}`));
    return;
  }
  fail(s, spawnError(err, s.call.spawnfile, s.call.spawnargs));
}
