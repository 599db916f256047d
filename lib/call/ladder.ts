// A call's ladder and what triggers it: the one ladder a call runs (its
// promise, its reason, its report), the timers that start it (the timeout,
// the idle timeout) or end the wait for the pipes after it (the drain), and
// the ladder on many calls at once (a supervisor's shutdown).
import type { CleanupReason, CleanupReport, Confinement, Verification } from '../types';
import { emptyReport } from './result';

/**
 * How long pipes may stay open once the tree is verified empty. Every
 * process that could write to them is gone, so what is left is data already
 * in the pipe (read within this time) or a process outside the tree that was
 * handed our pipe (fd passing over a unix socket): it must not hang 'close'.
 */
export const STDIO_DRAIN_MS = 100;

/** How long a ladder (or a whole shutdown's) waits for exec reports not in yet (ms): a normal exec takes one or two. */
export const STOP_EXEC_WAIT_MS = 20;

/**
 * The one ladder of a call, from the moment it is asked for: every
 * terminate() gets its promise. `report` is the addon's, once it came; a
 * ladder that found nothing to stop resolves with an empty report and
 * keeps none (the call's `cleanupReport` stays null).
 */
export class CallLadder {
  readonly promise: Promise<CleanupReport>;
  report: CleanupReport | null = null;
  #resolve: (r: CleanupReport) => void = () => {};

  /** `reason`: why it was asked for, what its report says even when the tree was gone before it ran. */
  constructor(readonly reason: CleanupReason) {
    this.promise = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  /** Whether it was asked for and has not reported. */
  get running(): boolean {
    return this.report === null;
  }

  /** Its report is delivered: terminate()'s promises resolve with it. */
  deliver(report: CleanupReport): void {
    this.#resolve(report);
  }

  /** Nothing was there to stop (the tree emptied, or the call ended without a process). */
  endEmpty(confinement: Confinement, verified: Verification): void {
    this.#resolve(emptyReport(this.reason, confinement, verified));
  }
}

/** The timers of a call, made when the first is set. */
export class CallTimers {
  /** options.timeout: the whole tree (and, where emptiness is not proved, its pipes). */
  timeout: NodeJS.Timeout | null = null;
  /** options.idleTimeout: refreshed by each chunk of output. */
  idle: NodeJS.Timeout | null = null;
  /** After the tree is empty: how long its pipes may stay open. */
  drain: NodeJS.Timeout | null = null;

  /** The command's own time is over (it left a job, or the job is ready): timeout and idle stop. */
  stopCommand(): void {
    if (this.timeout) clearTimeout(this.timeout);
    if (this.idle) clearTimeout(this.idle);
    this.timeout = null;
    this.idle = null;
  }

  stopAll(): void {
    this.stopCommand();
    if (this.drain) clearTimeout(this.drain);
    this.drain = null;
  }

  /** Whether they keep the event loop alive, as the call does. */
  ref(on: boolean): void {
    for (const t of [this.timeout, this.idle, this.drain]) {
      if (on) t?.ref();
      else t?.unref();
    }
  }
}
