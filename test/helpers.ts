// Shared by the tests: unique tokens to find a test's processes in /proc, and
// checks that read the kernel's view (cgroup files, /proc), never our bookkeeping.
import { spawn as cpSpawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import type { ToolCall } from '../dist/cjs/index.js';

/** A unique sleep duration such as `300.4812937`: it shows in /proc/<pid>/cmdline. */
export function token(seconds = 300): string {
  return `${seconds}.${randomBytes(4).readUInt32BE(0)}`;
}

/**
 * Live (non-zombie) processes whose cmdline contains `needle`, by a /proc
 * scan; with `comm`, only those running that program (not yet-to-exec parents).
 */
export function liveWith(needle: string, comm?: string): number[] {
  const found: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmdline.includes(needle)) continue;
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      if (state !== 'Z' && (comm === undefined || name === comm)) found.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return found.filter((pid) => pid !== process.pid);
}

/**
 * SIGKILLs, by pid, every live process carrying one of the tokens (a test's
 * own unique arguments: only what the test started); one that exits between
 * the scan and the kill is fine.
 */
export function killTokens(tokens: readonly string[]): void {
  for (const t of tokens) killLiveWith(t);
}

/**
 * SIGKILLs, by pid, the live processes carrying `token` (and named `comm`,
 * when given): what a known miss of a weak tier left behind. How many.
 */
export function killLiveWith(token: string, comm?: string): number {
  const found = liveWith(token, comm);
  for (const pid of found) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  return found.length;
}

/** Whether pid is a running process now (not gone, not a zombie). */
export function running(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/** Waits until the /proc scan for `needle` finds at least `count` processes. */
export async function waitForLive(needle: string, count: number, comm?: string, timeoutMs = 5000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pids = liveWith(needle, comm);
    if (pids.length >= count || Date.now() > deadline) return pids;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A daemon test's handshake. The command's main waits for the file this
 * returns the path of (`while [ ! -e $go ]; do sleep 0.01; done`);
 * `goWhenSleeping` makes it once a process with `needle` runs sleep
 * (setsid(1) execs it only after its setsid()), then awaits `done`, and
 * removes the file whatever happens.
 */
export function goFile(needle: string): string {
  return path.join(os.tmpdir(), `proctree-go-${needle}`);
}

export async function goWhenSleeping<T>(needle: string, done: Promise<T>): Promise<T> {
  const go = goFile(needle);
  try {
    await waitForLive(needle, 1, 'sleep');
    fs.writeFileSync(go, '');
    return await done;
  } finally {
    fs.rmSync(go, { force: true });
  }
}

export function cgroupExists(path: string | null): boolean {
  return path !== null && fs.existsSync(path);
}

/**
 * A call's leaf after 'close': removed, or kept for the harness's next call
 * (a leaf whose call ended on its own serves again) — then nothing is in it
 * (populated 0), it is not frozen and no cgroup is below it. Kept leaves go
 * with their subtree a moment after the last call (leaf-reuse.test.ts).
 */
export function leafReleased(path: string | null): boolean {
  if (path === null || !fs.existsSync(path)) return true;
  try {
    const events = fs.readFileSync(`${path}/cgroup.events`, 'utf8');
    const below = fs.readdirSync(path, { withFileTypes: true }).filter((e) => e.isDirectory());
    return /^populated 0$/m.test(events) && /^frozen 0$/m.test(events) && below.length === 0;
  } catch {
    return !fs.existsSync(path);
  }
}

/** cgroup.procs of a cgroup and every cgroup below it. */
export function cgroupMembers(path: string): number[] {
  const out: number[] = [];
  const walk = (dir: string): void => {
    try {
      out.push(
        ...fs
          .readFileSync(`${dir}/cgroup.procs`, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map(Number),
      );
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(`${dir}/${e.name}`);
    } catch {
      // removed while we looked
    }
  };
  walk(path);
  return out;
}

/** After a failed test: kill whatever is still in the call's cgroup and remove it. */
export function killCgroup(path: string | null): void {
  if (!path || !fs.existsSync(path)) return;
  try {
    fs.writeFileSync(`${path}/cgroup.kill`, '1');
  } catch {
    // already gone
  }
  const deadline = Date.now() + 2000;
  while (Date.now() < deadline) {
    try {
      if (fs.readFileSync(`${path}/cgroup.events`, 'utf8').includes('populated 0')) break;
    } catch {
      return;
    }
  }
  try {
    fs.rmdirSync(path);
  } catch {
    // the library removes it itself
  }
}

/**
 * A process that the test starts outside every call: no ladder may touch it.
 * Stopped by the test itself through its ChildProcess.
 */
export function startCanary(): { child: ChildProcess; needle: string } {
  const needle = token(600);
  const child = cpSpawn('sleep', [needle], { stdio: 'ignore' });
  return { child, needle };
}

export function openFdCount(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

/**
 * The descriptors open now that were not in `before` (openFds() taken
 * earlier): what a leak leaves. Unlike a count, descriptors that earlier work
 * closes meanwhile cannot hide one.
 */
export function openFds(before?: ReadonlySet<string>): Set<string> {
  const now = new Set(fs.readdirSync('/proc/self/fd'));
  if (!before) return now;
  return new Set([...now].filter((fd) => !before.has(fd)));
}

/**
 * The fields of /proc/<pid>/stat after the comm (which may hold spaces and
 * parentheses): [0] state, [1] ppid, [2] pgrp, [3] session, [4] tty_nr,
 * [5] tpgid (its terminal's foreground group), …; null once it is gone.
 */
export function statFields(pid: number | string): string[] | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** Our own children that are zombies: each would be a reaping bug. */
export function zombieChildren(): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(entry);
    if (fields && fields[0] === 'Z' && Number(fields[1]) === process.pid) out.push(Number(entry));
  }
  return out;
}

/** Polls `check` every 20 ms until it holds or `timeoutMs` passes. */
export async function waitUntil(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

/**
 * A fresh directory named by a unique token, holding hello.txt, for a static
 * HTTP server started in it: the server's cmdline shows the token, so /proc
 * finds its processes. Remove it (and end the server) after the test.
 */
export function serverDir(prefix: string): { dir: string; needle: string } {
  const needle = `${prefix}-${token()}`;
  const dir = path.join(os.tmpdir(), needle);
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from the job\n');
  return { dir, needle };
}

/** GET http://127.0.0.1:<port>/<file>: its status and body. */
export function httpGet(port: number, file: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: `/${file}` }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

const syscallNumbers: Record<string, { read: number; write: number }> = { x64: { read: 0, write: 1 }, arm64: { read: 63, write: 64 } };

/**
 * True while `pid` sleeps in read(2) or write(2) on descriptor `fd`, by the
 * kernel's account (/proc/<pid>/syscall: "<nr> <fd as hex> ..."; "running"
 * when it is not in a system call). What a test waits for instead of
 * sleeping: the program got as far as reading its input, or is held by a
 * full pipe or terminal.
 */
export function blockedIn(pid: number, call: 'read' | 'write', fd: number): boolean {
  const nr = syscallNumbers[process.arch]?.[call];
  if (nr === undefined) throw new Error(`no ${call} system call number for ${process.arch}`);
  try {
    const fields = fs.readFileSync(`/proc/${pid}/syscall`, 'utf8').split(' ');
    return Number(fields[0]) === nr && Number(fields[1]) === fd;
  } catch {
    return false;
  }
}

/**
 * A python3 program that writes each [fd, text] in turn, and before the next
 * one waits (at most 10 s, else exit 9) until the reader has taken every byte
 * from the pipe (FIONREAD on it is 0): the reader then gets the pieces in
 * this order whatever its scheduling, where `echo a; echo b >&2` on two
 * pipes can be read in either order.
 */
export function drainedWriter(pieces: [1 | 2, string][]): [string, string[]] {
  const program = [
    'import fcntl, os, struct, sys, termios, time',
    `for fd, text in ${JSON.stringify(pieces)}:`,
    '    os.write(fd, text.encode())',
    '    deadline = time.monotonic() + 10',
    "    while struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, b'\\0\\0\\0\\0'))[0] > 0:",
    '        if time.monotonic() > deadline:',
    '            sys.exit(9)',
    '        time.sleep(0.002)',
  ].join('\n');
  return ['python3', ['-c', program]];
}

/** Rejects when `p` has not settled within `ms`: a hang fails the test instead of the run. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

/**
 * Reads `stream` as a slow reader does: held paused (every resume undone,
 * the library's own at the exit included, as Node's flushStdio) until `ms`
 * after the call's 'empty', then flowing. Resolves at the call's 'close'
 * with its exit code and the bytes that arrived.
 */
export function readHeldPastEmpty(
  call: ToolCall,
  stream: NodeJS.ReadableStream,
  ms: number,
): Promise<{ code: number | null; total: number }> {
  let hold = true;
  let total = 0;
  stream.on('resume', () => {
    if (hold) stream.pause();
  });
  stream.pause();
  stream.on('data', (d: Buffer) => (total += d.length));
  call.on('empty', () =>
    setTimeout(() => {
      hold = false;
      stream.resume();
    }, ms),
  );
  return new Promise((resolve) => call.on('close', (code) => resolve({ code, total })));
}

/**
 * Runs `body` in a node process of its own, where nothing of proctree has run
 * yet (its threads and its descriptor table are the process's own), with `fs`
 * and the built package as `proctree` in scope; `body` prints one JSON line,
 * which is returned. `nofile`: RLIMIT_NOFILE for that process (soft and hard).
 */
export function inFreshNode<T>(body: string, nofile?: number): T {
  const script = `const fs = require('node:fs');
const proctree = require(${JSON.stringify(path.resolve(__dirname, '../dist/cjs/index.js'))});
${body}`;
  const argv = ['-c', `${nofile ? `ulimit -n ${nofile} && ` : ''}exec "$0" -e "$1"`, process.execPath, script];
  return JSON.parse(execFileSync('sh', argv, { encoding: 'utf8', timeout: 60_000 })) as T;
}
