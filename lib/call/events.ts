// What the binding tells a call, as typed records (contract.ts's
// nativeEvent()): the command exited, the exec report came, the ladder
// reported, the tree is empty. Each moves the call's life on: leftovers,
// jobs, the drain of its pipes, 'close'.
import { binding } from '../binding';
import {
  type NativeErrorShape,
  type NativeEvent,
  nativeEvent,
  NativeEventKind,
  type NativeReport,
  type NativeUsage,
} from '../binding/contract';
import { signalName } from '../options';
import { ptyPending, ptyTreeEmpty, releasePty } from '../pty';
import type { CleanupReport, ProcessInfo } from '../types';
import { awaitPipeBacklog } from './backlog';
import { describe } from './describe';
import { execFailed, execStarted } from './exec';
import { becomeJob, checkHeldOutside } from './job';
import { STDIO_DRAIN_MS, startLadder } from './ladder';
import { cleanupReport, finalUsage, leftoversError } from './report';
import { emitError, flushOutput, maybeClose, releaseOutputs, releaseReadable, removeAbortListener, settle } from './result';
import { afterPipesPolled, CallLadder, type CallState, EMPTY, EXITED, KILLED_ALL, UNREF } from './state';

/**
 * What the binding calls with a call's events, bound to its state: a bound
 * function is smaller than a closure and the context it keeps, and the
 * addon holds one per live call.
 */
export function onNativeEvent(
  this: CallState,
  kind: NativeEventKind,
  a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
  b?: number | string,
): void {
  this.scope.runInAsyncScope(dispatchNative, null, this, kind, a, b);
}

function dispatchNative(
  s: CallState,
  kind: NativeEventKind,
  a?: number | boolean | null | NativeReport | NativeErrorShape | NativeUsage,
  b?: number | string,
): void {
  dispatch(s, nativeEvent(kind, a, b));
}

function dispatch(s: CallState, ev: NativeEvent): void {
  // The exit waits for the output already in the pipes (backlog.ts), and
  // whatever comes after it waits with it, in order.
  const held = s.x?.heldEvents;
  if (held) {
    held.push(ev);
    return;
  }
  if (ev.kind === NativeEventKind.Exit && s.openReadable > 0 && !s.failed) {
    const queue = [ev];
    if (awaitPipeBacklog(s, () => s.scope.runInAsyncScope(releaseHeld, null, s, queue))) {
      s.extras().heldEvents = queue;
      return;
    }
  }
  deliver(s, ev);
}

/**
 * The held events, in order, each taken off the queue before it is
 * delivered: a listener that throws is the harness's uncaught exception (as
 * when the addon delivers), and the events after it still come, a turn
 * later. Events that arrive meanwhile join the queue.
 */
function releaseHeld(s: CallState, queue: NativeEvent[]): void {
  for (let ev = queue.shift(); ev !== undefined; ev = queue.shift()) {
    if (queue.length === 0) s.extras().heldEvents = null;
    try {
      deliver(s, ev);
    } catch (err) {
      if (queue.length > 0) setImmediate(() => s.scope.runInAsyncScope(releaseHeld, null, s, queue));
      throw err;
    }
  }
}

function deliver(s: CallState, ev: NativeEvent): void {
  switch (ev.kind) {
    case NativeEventKind.Exit:
      onExit(s, ev.code, ev.signal);
      break;
    case NativeEventKind.Cleanup:
      onCleanup(s, ev.report);
      break;
    case NativeEventKind.Empty:
      onEmpty(s, ev.usage);
      break;
    case NativeEventKind.Error:
      emitError(s, ev.error);
      break;
    case NativeEventKind.Started:
      // The systemd tier learns its leaf from the broker.
      if (ev.cgroup !== undefined) s.call.cgroup = ev.cgroup;
      execStarted(s, ev.pid);
      break;
    case NativeEventKind.StartFailed:
      execFailed(s, ev.error);
      break;
    case NativeEventKind.Frozen:
      s.x?.pause?.shown(ev.frozen);
      break;
  }
}

function onExit(s: CallState, code: number | null, signal: number): void {
  if (s.failed) return;
  const c = s.call;
  s.setFlag(EXITED, true);
  c.exitCode = code;
  c.signalCode = signalName(signal);
  // As Node: the abort listener goes at 'exit' (a long-lived signal must
  // not collect listeners), and so does our end of stdin.
  removeAbortListener(s);
  c.stdin?.destroy();
  // Ran without a 'spawn' (a sealed command whose shim did not report it):
  // its output goes out now, as an exit is the end of waiting for one.
  releaseOutputs(s);
  c.emit('exit', c.exitCode, c.signalCode);
  // Node's flushStdio, a tick later: the listeners of 'exit' may still
  // start reading. (Nothing to flush without output streams.)
  if (s.openReadable > 0 || c.pty) process.nextTick(flushOutput, s);
  if (s.x?.ladder || s.flag(EMPTY) || s.flag(KILLED_ALL)) return;
  const pids = binding.members(s.id);
  if (pids.length === 0) return;
  describe(s, pids, (infos) => {
    if (s.failed) return;
    if (infos.length > 0 && s.opts.leftovers === 'keep') keepLeftovers(s, infos);
    if (infos.length > 0) c.emit('leftover', infos);
    // Unless something stopped the tree (or it ended) while it was read.
    if (s.opts.leftovers === 'kill' && !s.x?.ladder && !s.flag(EMPTY)) startLadder(s, 'leftovers', s.opts.grace, false);
  });
}

/**
 * What the command left running is a job now, not part of the command's
 * time: its timers stop (a background call's bound the job from the start,
 * and keep running). The result comes once output already in the pipes has
 * been read.
 */
function keepLeftovers(s: CallState, infos: ProcessInfo[]): void {
  s.extras().remaining = infos;
  if (!s.opts.background) s.x?.timers?.stopCommand();
  becomeJob(s);
  afterPipesPolled(() => {
    // Waiting for options.ready: the result comes with it (or at 'close').
    if (!s.x?.done?.waiting || s.x.readyWait?.pending) return;
    // Read again: a process caught between fork and exec at 'exit' shows its command by now.
    describe(s, s.flag(EMPTY) ? [] : binding.members(s.id), (now) => {
      if (now.length > 0) s.extras().remaining = now;
      settle(s);
    });
  });
}

function onCleanup(s: CallState, r: NativeReport): void {
  const pids = r.leftoverPids ?? [];
  if (pids.length === 0) {
    deliverReport(s, cleanupReport(r, s.call.confinement));
    return;
  }
  // Members that outlived SIGKILL: always described off this thread, where
  // a read that waits on one stuck in the kernel holds no harness.
  describe(s, pids, (infos) => deliverReport(s, cleanupReport(r, s.call.confinement, infos)), true);
}

function deliverReport(s: CallState, report: CleanupReport): void {
  // A ladder the addon ran on its own (none was asked for here) reports too.
  const ladder = (s.extras().ladder ??= new CallLadder(report.reason));
  ladder.report = report;
  // The report and 'close' wait for what the leaf's sockets still listen on.
  // 'close' then comes in a later turn, as it does after a report that did
  // not wait: `await call.terminate()` resumes before it (the tree may have
  // been reported empty while the kernel was asked).
  const asked = checkHeldOutside(s, report, () => {
    reportReady(s, report);
    setImmediate(maybeClose, s);
  });
  if (!asked) reportReady(s, report);
}

function reportReady(s: CallState, report: CleanupReport): void {
  s.x?.ladder?.deliver(report);
  // The supervisor's 'cleanup' first, as when it was the call's first listener.
  s.owner.cleanup(s.call, report);
  s.call.emit('cleanup', report);
  const err = leftoversError(report);
  if (err) emitError(s, err);
}

function onEmpty(s: CallState, usage: NativeUsage | undefined): void {
  if (s.flag(EMPTY) || s.failed) return;
  const c = s.call;
  s.setFlag(EMPTY, true);
  s.x?.readyWait?.stop();
  s.extras().usage = finalUsage(usage);
  if (usage?.oomKilled) s.extras().oomKilled = true;
  if (usage?.pidsLimited) s.extras().pidsLimited = true;
  s.x?.pause?.ended();
  const timers = s.x?.timers;
  if (timers?.idle) clearTimeout(timers.idle);
  if (timers) timers.idle = null;
  const unverified = s.verified === 'none';
  // The timeout covers the whole tree; where emptiness is not proven
  // (pgroup), it also covers the pipes until 'close'.
  if (timers?.timeout && !unverified) {
    clearTimeout(timers.timeout);
    timers.timeout = null;
  }
  // A ladder asked for while the empty event was on its way.
  if (s.x?.ladder?.running) s.x.ladder.endEmpty(c.confinement, s.verified);
  c.stdin?.destroy();
  c.emit('empty');
  c.pty?.[ptyTreeEmpty]();
  flushOutput(s);
  if (s.openReadable > 0 || c.pty?.[ptyPending]) {
    // Every writer in the tree is gone; one outside it (handed our pipe)
    // must not hang 'close'. Unverified tiers wait `grace` for escapees.
    const wait = unverified ? s.opts.grace : STDIO_DRAIN_MS;
    const drain = setTimeout(() => {
      // After one more poll phase: data already in the pipe is read first.
      setImmediate(() => {
        releaseReadable(s);
        c.pty?.[releasePty]();
      });
    }, wait);
    if (s.flag(UNREF)) drain.unref();
    s.timers().drain = drain;
  }
  maybeClose(s);
}
