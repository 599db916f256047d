// What a call ends with: its CleanupReport and its RunResult, built from what
// the addon reported and what the call observed (pure functions).
import fs from 'node:fs';

import { LeftoversError } from '../errors';
import type { NativeReport, NativeUsage } from '../binding/contract';
import type { CallOutput } from '../output';
import type { CleanupReason, CleanupReport, Confinement, ProcessInfo, ResourceUsage, RunResult, Verification } from '../types';

/**
 * The report of a ladder that had nothing to stop: the tree was already
 * empty (`verified` as the call's tier proves it, from the addon), or the
 * call never started (nothing was verified: 'none').
 */
export function emptyReport(reason: CleanupReason, confinement: Confinement, verified: Verification): CleanupReport {
  return { reason, confinement, signaled: 0, killed: 0, escaped: 0, leftovers: [], verified, durationMs: 0 };
}

/** The report of `r`, its leftovers as /proc described them (`r.leftovers` when the binding did). */
export function cleanupReport(r: NativeReport, confinement: Confinement, leftovers: ProcessInfo[] = r.leftovers ?? []): CleanupReport {
  return {
    reason: r.reason as CleanupReason,
    confinement,
    signaled: r.signaled,
    killed: r.killed,
    escaped: r.escaped,
    leftovers,
    verified: r.verified,
    durationMs: r.durationMs,
  };
}

/** The error a report with survivors is also delivered as; null when none survived. */
export function leftoversError(report: CleanupReport): LeftoversError | null {
  if (report.leftovers.length === 0) return null;
  const names = report.leftovers.map((p) => `${p.pid} (${p.comm})`).join(', ');
  return new LeftoversError(`processes survived the kill ladder: ${names}`, report.leftovers);
}

/** What the call knew when it closed, for its RunResult. */
export interface CallOutcome {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  aborted: boolean;
  createdAt: number;
  startedAt: number;
  /** When the result's time ends ('close', or when the call became a job). */
  endedAt: number;
  cleanup: CleanupReport | null;
  pid: number | undefined;
  cgroup: string | null;
  confinement: Confinement;
  usage: ResourceUsage;
  jobId: string | null;
  remaining: ProcessInfo[];
  /** The verdicts of the addon's Empty event (false until then). */
  oomKilled: boolean;
  pidsLimited: boolean;
}

export function runResult(call: CallOutcome, output: CallOutput, encoding: BufferEncoding | 'buffer'): RunResult<string | Buffer> {
  const o = output.collected(encoding);
  return {
    exitCode: call.exitCode,
    signal: call.signal,
    stdout: o.stdout,
    stderr: o.stderr,
    ...(o.all !== undefined ? { all: o.all } : {}),
    stdoutTruncated: o.stdoutOmitted > 0,
    stderrTruncated: o.stderrOmitted > 0,
    stdoutOmitted: o.stdoutOmitted,
    stderrOmitted: o.stderrOmitted,
    ...(o.allOmitted !== undefined ? { allOmitted: o.allOmitted } : {}),
    timedOut: call.timedOut,
    aborted: call.aborted,
    durationMs: call.endedAt - call.startedAt,
    queuedMs: call.startedAt - call.createdAt,
    cleanup: call.cleanup,
    pid: call.pid ?? 0,
    cgroup: call.cgroup ?? '',
    confinement: call.confinement,
    usage: call.usage,
    jobId: call.jobId,
    remaining: call.remaining,
    oomKilled: call.oomKilled,
    pidsLimited: call.pidsLimited,
  };
}

/** The usage the addon reported with the Empty event. */
export function finalUsage(u: NativeUsage | null | undefined): ResourceUsage {
  const out: ResourceUsage = {
    userMs: u?.userMs ?? 0,
    systemMs: u?.systemMs ?? 0,
    peakProcesses: u?.peakProcesses ?? 0,
    source: u?.source ?? 'none',
  };
  if (u?.memoryPeakBytes !== undefined) out.memoryPeakBytes = u.memoryPeakBytes;
  if (u?.pidsPeak !== undefined) out.pidsPeak = u.pidsPeak;
  return out;
}

/**
 * What a tree that is still running used so far: the cgroup's cpu.stat and
 * memory.peak now (the addon reads the same files once it is empty); the
 * other tiers learn their figures only when the tree is gone.
 */
export function usageSoFar(
  cgroup: string | null,
  peakProcesses: number,
  base: readonly [number, number, number?] = [0, 0],
): ResourceUsage {
  const none: ResourceUsage = { userMs: 0, systemMs: 0, peakProcesses, source: 'none' };
  if (!cgroup) return none;
  let stat: string;
  try {
    stat = fs.readFileSync(`${cgroup}/cpu.stat`, 'utf8');
  } catch {
    return none;
  }
  // A leaf that served earlier calls carries their counters: `base`.
  const field = (name: string, from: number): number =>
    (Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(stat)?.[1] ?? 0) - from) / 1000;
  const out: ResourceUsage = {
    userMs: field('user_usec', base[0]),
    systemMs: field('system_usec', base[1]),
    peakProcesses,
    source: 'cgroup',
  };
  try {
    const peak = Number(fs.readFileSync(`${cgroup}/memory.peak`, 'utf8').trim());
    // A reused leaf's peak is this call's only once it grew past the earlier calls' (base[2]).
    if (peak > (base[2] ?? -1)) out.memoryPeakBytes = peak;
  } catch {
    // the memory controller is not delegated here
  }
  return out;
}
