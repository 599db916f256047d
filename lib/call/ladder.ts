// A call's ladder and what asks for it: terminate(), the timeout, the idle
// timeout, the abort signal, a supervisor's shutdown (the ladder on many
// calls at once). One ladder per call: every later ask gets its report.
import { performance } from 'node:perf_hooks';

import { binding } from '../binding';
import { AbortError } from '../errors';
import { releasePty } from '../pty';
import type { CleanupReason, CleanupReport } from '../types';
import { knowStart } from './exec';
import { emptyReport } from './report';
import { drop, emitError, emitSpawn, releaseReadable, removeAbortListener } from './result';
import { PauseControl } from './pause';
import { ABORTED, CallLadder, type CallState, EMPTY, EXITED, STARTED, TIMED_OUT, UNREF } from './state';

/**
 * How long pipes may stay open once the tree is verified empty. Every
 * process that could write to them is gone, so what is left is data already
 * in the pipe (read within this time) or a process outside the tree that was
 * handed our pipe (fd passing over a unix socket): it must not hang 'close'.
 */
export const STDIO_DRAIN_MS = 100;

/** How long a ladder (or a whole shutdown's) waits for exec reports not in yet (ms): a normal exec takes one or two. */
const STOP_EXEC_WAIT_MS = 20;

/** The ladder's report, starting the ladder unless one ran; a call still queued never starts, and its report is empty. */
export function ladderFor(s: CallState, reason: CleanupReason, grace: number): Promise<CleanupReport> {
  if (!s.flag(STARTED)) {
    // Still queued: it will never start, and that is no error.
    drop(s, new AbortError('The call was stopped before it started'), false);
    return Promise.resolve(emptyReport(reason, s.call.confinement, s.verified));
  }
  startLadder(s, reason, grace, reason !== 'leftovers');
  return s.x?.ladder?.promise ?? Promise.resolve(emptyReport(reason, s.call.confinement, s.verified));
}

/** Starts the ladder once; returns whether it will signal a live tree. */
export function startLadder(s: CallState, reason: CleanupReason, grace: number, kills: boolean): boolean {
  if (!prepareLadder(s, reason)) return false;
  return ladderStarted(s, binding.terminate(s.id, grace, s.opts.killSignal, reason), kills);
}

/** Whether a ladder may start now; if so, its promise exists from here. */
function prepareLadder(s: CallState, reason: CleanupReason, stopBy = performance.now() + STOP_EXEC_WAIT_MS): boolean {
  if (s.x?.ladder) return false;
  // A command held before its exec (its subtree frozen by someone) must
  // not hold a shutdown for long: the ladder stops its tree either way.
  knowStart(s, Math.max(0, Math.floor(stopBy - performance.now())));
  if (!s.live) return false;
  // The ladder thaws a paused tree after its signals.
  s.x?.pause?.ended();
  s.extras().ladder = new CallLadder(reason);
  return true;
}

function ladderStarted(s: CallState, reporting: boolean, kills: boolean): boolean {
  if (!reporting) {
    // The tree emptied before any ladder ran: nothing to stop.
    s.x?.ladder?.endEmpty(s.call.confinement, s.verified);
    return false;
  }
  if (kills) s.call.killed = true;
  return true;
}

/**
 * The ladder on many calls at once (a supervisor's shutdown): one call into
 * the addon, whose ladders share a few milliseconds of each turn of the loop
 * for their starts and signal passes, so that stopping a hundred calls does
 * not block the loop.
 */
export function terminateMany(calls: readonly CallState[], reason: CleanupReason, grace: number): Promise<CleanupReport[]> {
  const ready: CallState[] = [];
  // One wait for every exec report not in yet, not one each.
  const stopBy = performance.now() + STOP_EXEC_WAIT_MS;
  for (const s of calls) {
    if (s.flag(STARTED) && prepareLadder(s, reason, stopBy)) ready.push(s);
  }
  const reporting = ready.length
    ? binding.terminateGroup(ready.map((s) => s.id), ready.map((s) => s.opts.killSignal), grace, reason)
    : [];
  ready.forEach((s, i) => ladderStarted(s, reporting[i] === true, true));
  return Promise.all(calls.map((s) => ladderFor(s, reason, grace)));
}

/** options.timeout ran out. */
export function onTimeout(s: CallState): void {
  if (s.x?.timers) s.x.timers.timeout = null;
  s.setFlag(TIMED_OUT, true);
  if (s.flag(EMPTY)) {
    // pgroup: the visible tree is gone but something still holds our
    // pipes, maybe an escapee we cannot see: the timeout ends the wait.
    releaseReadable(s);
    s.call.pty?.[releasePty]();
    return;
  }
  void startLadder(s, 'timeout', s.opts.grace, true);
}

/** options.idleTimeout ran out: no output for that long. */
export function onIdle(s: CallState): void {
  if (s.x?.timers) s.x.timers.idle = null;
  void startLadder(s, 'idle', s.opts.grace, true);
}

/** The timers of a started call. */
export function startTimers(s: CallState): void {
  const { timeout, idleTimeout } = s.opts;
  if (timeout > 0) s.timers().timeout = setTimeout(onTimeout, timeout, s);
  if (idleTimeout > 0) s.timers().idle = setTimeout(onIdle, idleTimeout, s);
}

/**
 * Node listens to options.signal from spawn() on; so do we, which also lets
 * an abort take a queued call out of the queue.
 */
export function watchSignal(s: CallState): void {
  const signal = s.opts.signal;
  if (!signal) return;
  const onAbort = () => abort(s, signal.reason);
  s.extras().onAbort = onAbort;
  if (signal.aborted) process.nextTick(onAbort);
  else signal.addEventListener('abort', onAbort, { once: true });
}

function abort(s: CallState, reason: unknown): void {
  if (!s.x?.onAbort) return;
  removeAbortListener(s);
  const err = new AbortError(undefined, { cause: reason });
  if (!s.flag(STARTED)) {
    // Queued: it never starts. Node would have killed it; the caller
    // asked to stop it, and gets the same AbortError.
    drop(s, err, true);
    return;
  }
  knowStart(s);
  if (s.failed || s.flag(EXITED)) return;
  // As in Node, 'spawn' comes before the abort's 'error': a clone of a
  // burst's later calls (or one held before its exec) reports after the
  // tick that would have emitted it, and is known only now.
  if (s.pid !== undefined) emitSpawn(s);
  s.setFlag(ABORTED, true);
  // As Node's abortChildProcess: 'error' only when the signal was delivered.
  if (startLadder(s, 'abort', s.opts.grace, true)) emitError(s, err);
}

/** The call's pause()/resume() control, made when first asked for. */
export function pauseControl(s: CallState): PauseControl {
  const x = s.extras();
  x.pause ??= new PauseControl({
    runningId: () => {
      knowStart(s);
      return s.live && !s.x?.ladder ? s.id : null;
    },
    confinement: s.call.confinement,
    pausedChanged: (paused) => pausedChanged(s, paused),
  });
  return x.pause;
}

/** idleTimeout counts the command's silence, which a paused tree cannot help: its timer stops, and starts afresh on resume. */
function pausedChanged(s: CallState, paused: boolean): void {
  const x = s.extras();
  if (paused) {
    const idle = x.timers?.idle;
    if (!idle || !x.timers) return;
    clearTimeout(idle);
    x.timers.idle = null;
    x.idlePaused = true;
    return;
  }
  if (!x.idlePaused) return;
  x.idlePaused = false;
  if (s.flag(EMPTY) || s.opts.idleTimeout <= 0) return;
  const idle = setTimeout(onIdle, s.opts.idleTimeout, s);
  if (s.flag(UNREF)) idle.unref();
  s.timers().idle = idle;
}
