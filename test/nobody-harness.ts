// A harness that is not root, made for real by a root test: nobody, in a
// cgroup of its own that the test made and handed over (chowned: a delegated
// subtree, as a systemd user session's), running a Node script. Its stdout
// is read as JSON lines. The test removes the cgroup (remove()) when done,
// even when it fails.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { killCgroup, waitUntil } from './helpers';

export interface NobodyHarness {
  /** nobody's uid. */
  uid: number;
  /** The delegated cgroup the harness runs in. */
  own: string;
  child: ChildProcess;
  /** Its stdout, line by line, as they came. */
  lines: string[];
  stderr: () => string;
  /** The n-th line (0-based) parsed, once it came (or the harness exited): throws with its stderr if it never did. */
  line: <T>(n: number, timeoutMs: number) => Promise<T>;
  /** SIGKILLs it if still running, waits for its exit, then kills and removes its cgroup. */
  remove: () => Promise<void>;
}

/** nobody's uid. */
export function nobodyUid(): number {
  return Number(spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim());
}

/** Starts `node -e script ...args own` as nobody in a new cgroup `own` below `parent`, handed over to nobody; `env` adds to the environment. */
export function startNobodyHarness(parent: string, label: string, script: string, args: string[], env: NodeJS.ProcessEnv = {}): NobodyHarness {
  const uid = nobodyUid();
  const own = path.join(parent, `proctree-${label}-${process.pid}-${Date.now()}`);
  fs.mkdirSync(own);
  for (const f of ['', 'cgroup.procs', 'cgroup.threads', 'cgroup.subtree_control']) fs.chownSync(path.join(own, f), uid, uid);
  const child = spawn(
    'sh',
    ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"', 'sh', own, process.execPath, '-e', script, ...args, own],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  const lines: string[] = [];
  let buf = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d));
  child.stdout!.on('data', (d: Buffer) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
  const exited = (): boolean => child.exitCode !== null || child.signalCode !== null;
  return {
    uid,
    own,
    child,
    lines,
    stderr: () => err,
    async line<T>(n: number, timeoutMs: number): Promise<T> {
      await waitUntil(() => lines.length > n || exited(), timeoutMs);
      if (lines.length <= n) throw new Error(`the nobody harness wrote ${lines.length} line(s), not ${n + 1}; stderr: ${err.slice(-2000)}`);
      return JSON.parse(lines[n]) as T;
    },
    async remove(): Promise<void> {
      if (!exited()) child.kill('SIGKILL');
      await new Promise((r) => (exited() ? r(null) : child.once('exit', r)));
      killCgroup(own);
      removeTree(own);
    },
  };
}

/** rmdir a cgroup the test made and everything below it, deepest first. */
export function removeTree(dir: string): void {
  if (!fs.existsSync(dir)) return;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeTree(path.join(dir, e.name));
  try {
    fs.rmdirSync(dir);
  } catch {
    // still populated: killCgroup first
  }
}
