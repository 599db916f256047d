// `proctree ps`: the live calls of every proctree harness on this host, read
// from the kernel (the cgroup v2 tree and /proc), never from a harness's own
// bookkeeping — so it also shows the calls of a harness that is hung or gone.
import fs from 'node:fs';
import path from 'node:path';

import { binding, portable } from '../binding';
import { normalizeListeners } from '../ports';
import type { Listener, ProcessInfo } from '../types';
import { parseFlags } from './args';

export const psHelp = `Usage: proctree ps [--json]

Lists the live calls that proctree harnesses on this host created: every
cgroup proctree-<pid>-<random>[-<name>]/c<N> that still has processes.

Columns:
  ID        the call's id in its harness: the job id that the harness's
            jobs() and job(id) use (a command's leftovers kept as a job, a
            background call), and the last part of CALL
  CALL      the call's cgroup, relative to the cgroup2 mount
  HARNESS   pid of the harness that created it ('!' after it: that harness is gone)
  PID       the call's main process: the member whose parent is the harness,
            which created it; '-' when it exited and only its descendants
            are left (COMMAND then shows the oldest of them)
  MEMBERS   live processes in the call's cgroup, nested cgroups included
  AGE       since the call started in its cgroup
  PORTS     what its processes listen on: 3000/tcp, 5353/udp, unix:PATH
            ('-': nothing)
  COMMAND   the command line of the main process

Options:
  --json       one JSON array of the calls
  -h, --help   show this help
`;

export interface CallEntry {
  /** The call's id in its harness, e.g. `c3`: its job id (`result.jobId`) when it is a job. */
  id: string;
  /** The call's cgroup relative to the cgroup2 mount, e.g. `proctree-4242-5c0f3a9e21b4/c3`. */
  call: string;
  /** Absolute path of the call's cgroup. */
  cgroup: string;
  harnessPid: number;
  harnessAlive: boolean;
  /** Main process of the call, or null when it exited and descendants remain. */
  pid: number | null;
  members: number;
  ageMs: number;
  /** cmdline of the main process (or of the oldest member when it exited). */
  command: string;
  /** What the call's processes listen on (filled by withPorts; [] before). */
  ports: Listener[];
}

const GROUP = /^proctree-(\d+)(?:-.+)?$/;
const LEAF = /^c(\d+)$/;
// Bounds the walk: a cgroup tree deeper than this is not one a host makes.
const MAX_DEPTH = 64;

/**
 * One cgroup2 mount per hierarchy (a bind-mounted copy of part of one is
 * skipped): `/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a
 * hybrid one, anywhere in a container. The addon parses mountinfo, as it
 * does to place calls.
 */
export function cgroup2Mounts(mountinfo?: string): string[] {
  return binding.cgroup2Hierarchies(mountinfo).map((m) => m.mount);
}

function subdirs(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}

/**
 * The main process: the member whose parent is the harness, because the
 * harness created it straight into the cgroup and everything else in there
 * descends from it (a daemon that escaped is reparented away from the
 * harness). When no member has that parent — the main process exited, or the
 * harness is in another pid namespace — the oldest member by start time is
 * shown instead, with pid null.
 */
export function mainOf(members: readonly ProcessInfo[], harnessPid: number): { pid: number | null; command: string } {
  let oldest: ProcessInfo | null = null;
  for (const p of members) {
    if (p.ppid === harnessPid) return { pid: p.pid, command: p.cmdline };
    if (!oldest || p.startTime < oldest.startTime) oldest = p;
  }
  return { pid: null, command: oldest?.cmdline ?? '' };
}

function callEntry(mount: string, leaf: string, harnessPid: number, now: number): CallEntry | null {
  const members = binding.cgroupMembers(leaf);
  if (members.length === 0) return null;
  let ageMs = 0;
  try {
    // A leaf's ctime is when its call started: when it was made, or when a
    // leaf that served an earlier call was handed to this one (touched then).
    ageMs = Math.max(0, now - fs.statSync(leaf).ctimeMs);
  } catch {
    return null;
  }
  const main = mainOf(binding.processInfo(members), harnessPid);
  return {
    id: path.basename(leaf),
    call: path.relative(mount, leaf),
    cgroup: leaf,
    harnessPid,
    harnessAlive: fs.existsSync(`/proc/${harnessPid}`),
    pid: main.pid,
    members: members.length,
    ageMs: Math.round(ageMs),
    command: main.command,
    ports: [],
  };
}

/** Walks every cgroup2 hierarchy for proctree-<pid>-<random>[-<name>]/c<N> with live members. */
export function liveCalls(mounts = cgroup2Mounts()): CallEntry[] {
  const out: CallEntry[] = [];
  const now = Date.now();
  const walk = (mount: string, dir: string, depth: number): void => {
    if (depth > MAX_DEPTH) return;
    for (const name of subdirs(dir)) {
      const full = path.join(dir, name);
      const group = GROUP.exec(name);
      if (group) {
        const harnessPid = Number(group[1]);
        for (const leaf of subdirs(full)) {
          if (!LEAF.test(leaf)) continue;
          const entry = callEntry(mount, path.join(full, leaf), harnessPid, now);
          if (entry) out.push(entry);
          // A harness run as a call keeps its own group inside that call's leaf.
          walk(mount, path.join(full, leaf), depth + 2);
        }
        continue;
      }
      walk(mount, full, depth + 1);
    }
  };
  for (const m of mounts) walk(m, m, 0);
  // By harness, then in the order the leaves were made (c2 before c10).
  const key = (c: CallEntry): [string, number] => {
    const m = /^(.*)\/c(\d+)$/.exec(c.call);
    return m ? [m[1], Number(m[2])] : [c.call, 0];
  };
  return out.sort((a, b) => {
    const [ga, na] = key(a);
    const [gb, nb] = key(b);
    return a.harnessPid - b.harnessPid || (ga < gb ? -1 : ga > gb ? 1 : na - nb);
  });
}

/** Each call's listeners, asked of the addon's ports thread (all calls at once). */
export async function withPorts(calls: CallEntry[]): Promise<CallEntry[]> {
  const ask = binding.ports?.bind(binding);
  if (!ask) return calls;
  await Promise.all(
    calls.map(
      (c) =>
        new Promise<void>((resolve) => {
          ask(c.cgroup, (err, list) => {
            if (!err) c.ports = normalizeListeners(list ?? []);
            resolve();
          });
        }),
    ),
  );
  return calls;
}

/** The PORTS column: `3000/tcp,5353/udp,unix:/run/app.sock`, each socket address once; '-' for none. */
export function formatPorts(ports: readonly Listener[]): string {
  const seen = new Set(ports.map((l) => (l.protocol === 'unix' ? `unix:${l.address}` : `${l.port}/${l.protocol}`)));
  return seen.size > 0 ? [...seen].join(',') : '-';
}

export function formatAge(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor(s / 3600) % 24).padStart(2, '0')}h`;
}

export function renderPs(calls: readonly CallEntry[]): string {
  const header = ['ID', 'CALL', 'HARNESS', 'PID', 'MEMBERS', 'AGE', 'PORTS', 'COMMAND'];
  const table = calls.map((c) => [
    c.id,
    c.call,
    `${c.harnessPid}${c.harnessAlive ? '' : '!'}`,
    c.pid === null ? '-' : String(c.pid),
    String(c.members),
    formatAge(c.ageMs),
    formatPorts(c.ports),
    c.command,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => r[i].length)));
  const line = (r: string[]): string =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return `${[header, ...table].map(line).join('\n')}\n`;
}

export async function psCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } });
  if (flags.help) {
    process.stdout.write(psHelp);
    return 0;
  }
  if (portable) {
    // The portable tier makes no cgroups: there is nothing to list from outside the harness.
    process.stderr.write(`proctree: ps lists the calls' cgroups, and the portable tier has none (${portable.reason}); ask the harness (jobs())\n`);
    return 1;
  }
  const mounts = cgroup2Mounts();
  if (mounts.length === 0) {
    process.stderr.write('proctree: no cgroup2 hierarchy is mounted here (see `proctree doctor`)\n');
    return 1;
  }
  const calls = await withPorts(liveCalls(mounts));
  process.stdout.write(flags.json ? `${JSON.stringify(calls)}\n` : renderPs(calls));
  return 0;
}
