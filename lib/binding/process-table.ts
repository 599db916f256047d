// The process table as the portable binding (portable.ts) reads it:
// /proc on Linux, ps(1) on macOS and the BSDs, PowerShell's process list on
// Windows. Every read is a snapshot: a process may exit, and its number be
// reused, right after it was read. Nothing here holds a process the way a
// pidfd does; the portable tier reports `verified: 'none'` for that reason.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

import type { ProcessInfo } from '../types';
import type { PortableMode } from './contract';

export type TableSource = PortableMode['processTable'];

/** One live process (zombies are left out: they hold no resources and cannot be signalled away). */
export interface ProcessRow {
  pid: number;
  ppid: number;
  /** Its process group; 0 where the system has none (Windows). */
  pgid: number;
  /**
   * When it started, in the source's own unit: clock ticks after boot
   * (/proc), ms since the epoch (Windows; ps, to the second); 0 when the
   * source could not tell.
   */
  start: number;
}

// "pid (comm) state ppid pgrp session … starttime": comm may hold spaces and
// parentheses, so it ends at the last ')'.
function parseStat(pid: number, text: string): (ProcessRow & { state: string; sid: number; comm: string }) | null {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return null;
  const f = text.slice(close + 2).split(' ');
  // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice num_threads itrealvalue starttime
  if (f.length < 20) return null;
  return { pid, state: f[0], ppid: Number(f[1]), pgid: Number(f[2]), sid: Number(f[3]), start: Number(f[19]), comm: text.slice(open + 1, close) };
}

function readStat(pid: number): ReturnType<typeof parseStat> {
  try {
    return parseStat(pid, fs.readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return null; // gone while we looked
  }
}

function procTable(): ProcessRow[] {
  const rows: ProcessRow[] = [];
  for (const name of fs.readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    const s = readStat(Number(name));
    if (s && s.state !== 'Z') rows.push({ pid: s.pid, ppid: s.ppid, pgid: s.pgid, start: s.start });
  }
  return rows;
}

// LC_ALL=C: lstart in the one format Date.parse reads ("Fri Dec  4 07:17:32 2026").
// Made once: ps runs on every poll of a call, and copying the environment each time is waste.
let psEnv: NodeJS.ProcessEnv | undefined;

/** ps's output, whatever its exit status (it exits 1 when a -p list matched nothing). */
function ps(args: string[]): string {
  psEnv ??= { ...process.env, LC_ALL: 'C' };
  const res = spawnSync('ps', args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, env: psEnv });
  if (res.error) throw res.error;
  return res.stdout ?? '';
}

// pid, ppid, pgid, state and lstart are in ps(1) of procps (Linux) and of
// BSD (macOS) alike; the state's first letter is Z for a zombie in both.
// lstart (to the second) tells a process from a later one with its pid.
function psRows(args: string[]): Array<ProcessRow & { stat: string }> {
  const rows: Array<ProcessRow & { stat: string }> = [];
  for (const line of ps(args).split('\n')) {
    const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line);
    if (m) rows.push({ pid: Number(m[1]), ppid: Number(m[2]), pgid: Number(m[3]), stat: m[4], start: Date.parse(m[5]) || 0 });
  }
  return rows;
}

function psTable(): ProcessRow[] {
  return psRows(['-A', '-o', 'pid=,ppid=,pgid=,stat=,lstart='])
    .filter((r) => !r.stat.startsWith('Z'))
    .map(({ pid, ppid, pgid, start }) => ({ pid, ppid, pgid, start }));
}

// Windows: no /proc and no ps. Win32_Process has the parent of every
// process (kept after the parent exits: Windows does not reparent) and its
// creation time, which tells a child of a dead parent from a child of a
// newer process that reused the parent's number. PowerShell takes a large
// fraction of a second per read.
function powershell(script: string): string {
  const res = spawnSync('powershell.exe', ['-NoProfile', '-NonInteractive', '-Command', script], {
    encoding: 'utf8',
    windowsHide: true,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (res.error) throw res.error;
  return res.stdout ?? '';
}

const winRow = "'{0} {1} {2}' -f $_.ProcessId, $_.ParentProcessId, $(if ($_.CreationDate) { [long]($_.CreationDate.ToUniversalTime() - [datetime]'1970-01-01').TotalMilliseconds } else { 0 })";

function windowsTable(filter = ''): ProcessRow[] {
  const rows: ProcessRow[] = [];
  const out = powershell(`Get-CimInstance Win32_Process${filter} | ForEach-Object { ${winRow} }`);
  for (const line of out.split(/\r?\n/)) {
    const [pid, ppid, start] = line.trim().split(' ').map(Number);
    if (!pid) continue;
    rows.push({ pid, ppid, pgid: 0, start });
  }
  return rows;
}

/**
 * Whether `pid` is still the process that started at `start`, alive (not a
 * zombie) and in group `pgid`, read cheaply (one /proc file); null where the
 * source has no such read (ps, Windows).
 */
export function aliveInGroup(source: TableSource, pid: number, pgid: number, start: number): boolean | null {
  if (source !== 'proc') return null;
  const s = readStat(pid);
  return s !== null && s.state !== 'Z' && s.pgid === pgid && s.start === start;
}

/**
 * Which of `rows` are still alive (not zombies), and the same processes: a
 * pid now held by a newer process (another start time) is not counted. With
 * ps, start times are to the second.
 */
export function stillAlive(source: TableSource, rows: readonly ProcessRow[]): ProcessRow[] {
  if (rows.length === 0) return [];
  if (source === 'proc') {
    return rows.filter((r) => {
      const s = readStat(r.pid);
      return s !== null && s.state !== 'Z' && s.start === r.start;
    });
  }
  if (source === 'ps') {
    const now = new Map(
      psRows(['-o', 'pid=,ppid=,pgid=,stat=,lstart=', '-p', rows.map((r) => r.pid).join(',')])
        .filter((r) => !r.stat.startsWith('Z'))
        .map((r) => [r.pid, r.start]),
    );
    return rows.filter((r) => now.has(r.pid) && now.get(r.pid) === r.start);
  }
  const now = new Map(windowsTable().map((r) => [r.pid, r.start]));
  return rows.filter((r) => now.has(r.pid) && now.get(r.pid) === r.start);
}

/** Every live process now. */
export function readTable(source: TableSource): ProcessRow[] {
  if (source === 'proc') return procTable();
  if (source === 'ps') return psTable();
  return windowsTable();
}

/**
 * ProcessInfo of each pid still alive, in the order given. From ps and on
 * Windows `sid` and `startTime` are 0 (ps has no portable session id; BSD's
 * `sess` is a kernel address).
 */
export function describe(source: TableSource, pids: readonly number[]): ProcessInfo[] {
  if (pids.length === 0) return [];
  const found = new Map<number, ProcessInfo>();
  if (source === 'proc') {
    for (const pid of pids) {
      const s = readStat(pid);
      if (!s) continue;
      let cmdline = '';
      try {
        cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0+$/, '').replace(/\0/g, ' ');
      } catch {
        // exited between the two reads: its stat is still what it was
      }
      found.set(pid, { pid, ppid: s.ppid, pgid: s.pgid, sid: s.sid, comm: s.comm, cmdline, startTime: s.start });
    }
  } else if (source === 'ps') {
    const list = pids.join(',');
    // comm and args are last on their lines: they may hold spaces.
    for (const line of ps(['-o', 'pid=,ppid=,pgid=,ucomm=', '-p', list]).split('\n')) {
      const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/.exec(line);
      if (m) found.set(Number(m[1]), { pid: Number(m[1]), ppid: Number(m[2]), pgid: Number(m[3]), sid: 0, comm: m[4].trim(), cmdline: '', startTime: 0 });
    }
    for (const line of ps(['-o', 'pid=,args=', '-p', list]).split('\n')) {
      const m = /^\s*(\d+)\s(.*)$/.exec(line);
      const info = m && found.get(Number(m[1]));
      if (info && m) info.cmdline = m[2].trim();
    }
  } else {
    const ids = pids.map((p) => `ProcessId=${p}`).join(' OR ');
    const out = powershell(
      `Get-CimInstance Win32_Process -Filter '${ids}' | ForEach-Object { '{0}\`t{1}\`t{2}\`t{3}' -f $_.ProcessId, $_.ParentProcessId, $_.Name, $_.CommandLine }`,
    );
    for (const line of out.split(/\r?\n/)) {
      const [pid, ppid, comm, cmdline] = line.split('\t');
      if (pid && Number(pid) > 0) found.set(Number(pid), { pid: Number(pid), ppid: Number(ppid), pgid: 0, sid: 0, comm: comm ?? '', cmdline: cmdline ?? '', startTime: 0 });
    }
  }
  return pids.map((p) => found.get(p)).filter((p): p is ProcessInfo => p !== undefined);
}
