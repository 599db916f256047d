// What a call ends with: its CleanupReport and its RunResult, built from what
// the addon reported and what the call observed.
import { LeftoversError } from './errors';
import type { NativeReport } from './native';
import type { CleanupReason, CleanupReport, Confinement, RunResult, Verification } from './types';
import type { Collector } from './stdio';

/** How each tier proves a tree empty (see CleanupReport.verified). */
export const verification: Readonly<Record<Confinement, Verification>> = {
  cgroup: 'cgroup.events',
  systemd: 'cgroup.events',
  pidns: 'pidns',
  subreaper: 'subreaper',
  pgroup: 'none',
};

/** The report of a ladder that had nothing to stop (the tree was already empty, or never started). */
export function emptyReport(reason: CleanupReason, confinement: Confinement): CleanupReport {
  return { reason, confinement, signaled: 0, killed: 0, escaped: 0, leftovers: [], verified: verification[confinement], durationMs: 0 };
}

export function cleanupReport(r: NativeReport, confinement: Confinement): CleanupReport {
  return {
    reason: r.reason as CleanupReason,
    confinement,
    signaled: r.signaled,
    killed: r.killed,
    escaped: r.escaped,
    leftovers: r.leftovers,
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
  cleanup: CleanupReport | null;
  pid: number | undefined;
  cgroup: string | null;
  confinement: Confinement;
}

export function runResult(
  call: CallOutcome,
  stdout: Collector,
  stderr: Collector,
  encoding: BufferEncoding | 'buffer',
): RunResult<string | Buffer> {
  return {
    exitCode: call.exitCode,
    signal: call.signal,
    stdout: stdout.value(encoding),
    stderr: stderr.value(encoding),
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
    timedOut: call.timedOut,
    aborted: call.aborted,
    durationMs: performance.now() - call.startedAt,
    queuedMs: call.startedAt - call.createdAt,
    cleanup: call.cleanup,
    pid: call.pid ?? 0,
    cgroup: call.cgroup ?? '',
    confinement: call.confinement,
  };
}
