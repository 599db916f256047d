// How a call ends: 'close' once the tree is empty and its streams are done,
// `done` and the RunResult it settles with, and the end of a call that never
// had a process (it could not start, or was dropped from the queue).
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';

import { CallOutput } from '../output';
import { holdOutput, releaseOutput } from '../output-hold';
import { PipeStream } from '../pipe-stream';
import { flushPty, ptyPending, releasePty } from '../pty';
import { closeChildEnds as closeChildSide, flushPipes, isUsedAsStdio, releaseReadable as releasePipes } from '../stdio';
import type { ProcessInfo, ResourceUsage, RunResult } from '../types';
import { runResult, usageSoFar } from './report';
import { ABORTED, CLOSED, EMPTY, type CallState, SPAWN_EMITTED, STARTED, TIMED_OUT } from './state';

/** Whether reading a stream is ours to start (not one handed to another call as its stdio). */
function canResume(s: Readable): boolean {
  return !isUsedAsStdio(s);
}

/** The output streams: a terminal is one stream for both, and what it shows is stdout. */
export function outputSources(s: CallState): { stdout: Readable | null; stderr: Readable | null } {
  const c = s.call;
  return c.pty ? { stdout: c.pty, stderr: c.pty } : { stdout: c.stdout, stderr: c.stderr };
}

/** The call's CallOutput, made now if it was not. */
export function output(s: CallState): CallOutput {
  const x = s.extras();
  x.output ??= new CallOutput(outputSources(s), s.opts.output, canResume, s.flag(SPAWN_EMITTED) ? null : () => spawnBeforeOutput(s));
  return x.output;
}

/** 'spawn', once; then the output held for it. */
export function emitSpawn(s: CallState): void {
  if (s.flag(SPAWN_EMITTED)) return;
  s.setFlag(SPAWN_EMITTED, true);
  s.call.emit('spawn');
  releaseOutputs(s);
}

/** The call's own output streams hold what they read until releaseOutputs() (see output-hold.ts). */
export function holdOutputs(s: CallState): void {
  for (const stream of s.call.stdio) if (stream instanceof PipeStream) stream[holdOutput]();
  s.call.pty?.[holdOutput]();
}

/** What the output streams held goes out, in order: 'spawn' is out, or will never be. */
export function releaseOutputs(s: CallState): void {
  for (const stream of s.call.stdio) if (stream instanceof PipeStream) stream[releaseOutput]();
  s.call.pty?.[releaseOutput]();
}

/**
 * Before the first chunk of output: 'spawn', which in Node comes before any
 * output. The exec report may still be on its way (a child held before its
 * exec, let go a moment ago, writes before the spawning thread has said it
 * exec'd): output proves the exec, so `pid` settles it at once (a short wait
 * at most) and 'spawn' goes out here instead of with the report's event.
 */
function spawnBeforeOutput(s: CallState): void {
  if (s.flag(SPAWN_EMITTED) || s.call.pid === undefined || s.failed) return;
  emitSpawn(s);
}

/** Node's flushStdio: the output streams (pipes, or the terminal) nobody reads are resumed, so they reach their end. */
export function flushOutput(s: CallState): void {
  if (s.openReadable > 0) flushPipes(s.call.stdio);
  s.call.pty?.[flushPty]();
}

/** Closes our ends of the readable pipes still open (a holder outside the tree keeps them from EOF). */
export function releaseReadable(s: CallState): void {
  if (s.openReadable > 0) releasePipes(s.call.stdio);
}

/** The child holds its own copies once it started (or never will): ours would keep the pipes open. */
export function closeChildEnds(s: CallState): void {
  const child = s.child;
  s.child = null;
  closeChildSide(child);
}

export function emitError(s: CallState, err: Error): void {
  if (s.call.listenerCount('error') > 0) s.call.emit('error', err);
  else s.owner.unhandledError(s.call, err);
}

export function removeAbortListener(s: CallState): void {
  const onAbort = s.x?.onAbort;
  if (!onAbort) return;
  s.opts.signal?.removeEventListener('abort', onAbort);
  s.extras().onAbort = null;
}

/** 'close', once the tree is empty, the streams are done and the ladder's report is complete. */
export function maybeClose(s: CallState): void {
  if (s.flag(CLOSED) || !s.flag(EMPTY) || s.openReadable > 0 || s.call.pty?.[ptyPending] || s.x?.heldCheck || s.x?.describing) {
    return;
  }
  s.setFlag(CLOSED, true);
  // Kept for a result built later (the server asks at its own time).
  s.done().closedAt = performance.now();
  s.x?.timers?.stopAll();
  removeAbortListener(s);
  s.owner.release(s.call);
  // The result first, as the first listener of 'close' it always was.
  settle(s);
  s.call.emit('close', s.call.exitCode, s.call.signalCode);
}

/** The call never ran: 'error', then its streams end and 'close' follows; its slot is freed. */
export function fail(s: CallState, err: Error): void {
  s.extras().spawnError = err;
  const errno = (err as { errno?: unknown }).errno;
  if (typeof errno === 'number') s.call.exitCode = errno;
  end(s, err, true);
}

/** Ends a call that has no process: `withError` says whether 'error' is due. */
export function end(s: CallState, err: Error, withError: boolean): void {
  s.extras().spawnError ??= err;
  s.x?.readyWait?.stop();
  s.x?.done?.reject(err);
  removeAbortListener(s);
  closeChildEnds(s);
  s.call.stdin?.destroy();
  s.call.pty?.[releasePty]();
  releaseOutputs(s);
  process.nextTick(() => {
    s.owner.release(s.call);
    if (withError) emitError(s, err);
    // 'close' a task later, as Node's comes once the stdio handles closed:
    // code that awaits 'error' and then listens for 'close' gets it, in
    // every runtime's order of ticks and microtasks.
    setImmediate(() => {
      if (s.x?.ladder?.running) s.x.ladder.endEmpty(s.call.confinement, s.verified);
      s.setFlag(EMPTY, true);
      flushOutput(s);
      maybeClose(s);
    });
  });
}

/** A queued call that will never start: out of the queue, closed. */
export function drop(s: CallState, err: Error, withError: boolean): void {
  if (s.flag(STARTED)) return;
  s.setFlag(STARTED, true);
  s.owner.dequeue(s.call);
  end(s, err, withError);
}

/** `done`, made on first use: settled already when the call failed or closed before. */
export function donePromise(s: CallState): Promise<RunResult<string | Buffer>> {
  const state = s.done();
  if (state.promise) return state.promise;
  const done = state.make(s.x?.spawnError ?? null, s.flag(CLOSED), () => buildResult(s));
  // A background call's result is its start.
  if (state.waiting && s.opts.background && !s.x?.readyWait) s.call.once('spawn', () => settle(s));
  return done;
}

/** Resolves `done`, if anybody made it, with what is known now (at 'close', or when the call became a job). */
export function settle(s: CallState): void {
  if (!s.failed) s.x?.done?.settle(() => buildResult(s));
}

/** What remains of a kept call's tree and what it used so far: its result's `remaining` and `usage`. */
export function jobOutcome(s: CallState): { remaining: ProcessInfo[]; usage: ResourceUsage } {
  const remaining = s.x?.remaining ?? [];
  return { remaining, usage: s.x?.usage ?? usageSoFar(s.call.cgroup, Math.max(1, remaining.length), s.x?.cpuBase) };
}

function buildResult(s: CallState): RunResult<string | Buffer> {
  const out = output(s);
  const c = s.call;
  const result = runResult(
    {
      exitCode: c.exitCode,
      signal: c.signalCode,
      timedOut: s.flag(TIMED_OUT),
      aborted: s.flag(ABORTED),
      createdAt: s.createdAt,
      startedAt: s.startedAt,
      endedAt: s.flag(CLOSED) ? s.x?.done?.closedAt ?? 0 : performance.now(),
      cleanup: s.x?.ladder?.report ?? null,
      pid: c.pid,
      cgroup: c.cgroup,
      confinement: c.confinement,
      ...jobOutcome(s),
      jobId: c.jobId,
      oomKilled: s.x?.oomKilled ?? false,
      pidsLimited: s.x?.pidsLimited ?? false,
    },
    out,
    s.x?.done?.encoding ?? 'utf8',
  );
  if (s.x?.readyWait) result.ready = s.x.readyState;
  if (s.x?.done) s.x.done.settled = result;
  // Delivered: what comes later is the job's (its ring), not the result's.
  out.stopCollecting();
  return result;
}
