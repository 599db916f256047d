// The bench's own cgroups: an outer cgroup that every measured process lives
// below, so survivors are counted by the kernel's membership and not by any
// method's bookkeeping, and per-trial cgroups that baselines are started in so
// their survivors can be removed with one cgroup.kill.
import fs from 'node:fs';
import path from 'node:path';

export const PREFIX = 'proctree-bench-';
export const HARNESS_LEAF = `${PREFIX}harness`;

// mountinfo escapes space, tab, newline and backslash as \ooo.
function unescapeMountField(s) {
  return s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
}

/** Where cgroup v2 is mounted and where this process sits in it. Never assumed: read from /proc. */
export function locateCgroup2() {
  let mount = null;
  let mountRoot = '/';
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const dash = line.indexOf(' - ');
    if (dash < 0) continue;
    if (line.slice(dash + 3).split(' ')[0] !== 'cgroup2') continue;
    const head = line.slice(0, dash).split(' ');
    mountRoot = unescapeMountField(head[3]);
    mount = unescapeMountField(head[4]);
    break;
  }
  if (!mount) throw new Error('no cgroup2 mount in /proc/self/mountinfo');
  const v2 = fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'));
  if (!v2) throw new Error('this process has no cgroup v2 line in /proc/self/cgroup');
  let own = v2.slice(3);
  if (mountRoot !== '/') {
    if (!own.startsWith(mountRoot)) throw new Error('own cgroup is outside the visible cgroup2 mount');
    own = own.slice(mountRoot.length) || '/';
  }
  return { mount, own, ownPath: own === '/' ? mount : path.join(mount, own) };
}

/** Pids listed in cgroup.procs of `dir` and every cgroup below it, down to maxDepth. */
export function members(dir, maxDepth = 32) {
  const out = [];
  const walk = (d, depth) => {
    let text;
    try {
      text = fs.readFileSync(path.join(d, 'cgroup.procs'), 'utf8');
    } catch {
      return; // removed while we walked
    }
    for (const s of text.split('\n')) if (s) out.push(Number(s));
    if (depth >= maxDepth) return;
    let entries = [];
    try {
      entries = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) walk(path.join(d, e.name), depth + 1);
  };
  walk(dir, 0);
  return out;
}

/** One process as /proc/<pid>/stat shows it, or null once it is gone. */
export function procStat(pid) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // comm may hold spaces and parentheses: it ends at the last ')'.
  const close = text.lastIndexOf(')');
  const comm = text.slice(text.indexOf('(') + 1, close);
  const f = text.slice(close + 2).split(' ');
  return { pid, comm, state: f[0], ppid: Number(f[1]), pgid: Number(f[2]), sid: Number(f[3]) };
}

/**
 * Members that are really alive: a zombie is dead (the kernel has already
 * taken it out of cgroup.procs in v2, but a pid read just before may be one).
 */
export function liveMembers(dir, exclude = [], maxDepth = 32) {
  const out = [];
  for (const pid of members(dir, maxDepth)) {
    if (exclude.includes(pid)) continue;
    const st = procStat(pid);
    if (st && st.state !== 'Z' && st.state !== 'X') out.push(st);
  }
  return out;
}

export function populated(dir) {
  try {
    return /^populated 1$/m.test(fs.readFileSync(path.join(dir, 'cgroup.events'), 'utf8'));
  } catch {
    return false; // gone: nothing can be inside
  }
}

export function cgroupKill(dir) {
  try {
    fs.writeFileSync(path.join(dir, 'cgroup.kill'), '1');
    return true;
  } catch (err) {
    if (err.code === 'ENOENT') return false;
    throw err;
  }
}

/** Moves a whole process (all its threads) into `dir`. */
export function joinCgroup(dir, pid = process.pid) {
  fs.writeFileSync(path.join(dir, 'cgroup.procs'), String(pid));
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));
/** A synchronous sleep, for process 'exit' hooks where nothing async runs. */
export function sleepSync(ms) {
  Atomics.wait(sleeper, 0, 0, ms);
}

/**
 * cgroup.kill `dir`, wait (synchronously, bounded) until it is empty, then
 * rmdir it and everything below, deepest first.
 */
export function destroyTreeSync(dir, waitMs = 5000) {
  if (!fs.existsSync(dir)) return true;
  cgroupKill(dir);
  const deadline = Date.now() + waitMs;
  while (populated(dir) && Date.now() < deadline) sleepSync(5);
  let ok = true;
  const remove = (d, depth) => {
    let entries = [];
    try {
      entries = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    if (depth < 32) for (const e of entries) if (e.isDirectory()) remove(path.join(d, e.name), depth + 1);
    for (let i = 0; ; i += 1) {
      try {
        fs.rmdirSync(d);
        return;
      } catch (err) {
        if (err.code === 'ENOENT') return;
        // EBUSY right after a kill: the last members are still exiting.
        if (err.code !== 'EBUSY' || i >= 200) {
          ok = false;
          return;
        }
        sleepSync(5);
      }
    }
  };
  remove(dir, 0);
  return ok;
}

/**
 * The outer cgroup of one bench run: `<own cgroup>/proctree-bench-<pid>-<t>`,
 * with a leaf for the harness processes. Created by the orchestrator, which
 * stays outside and removes it on every way out.
 */
export class OuterCgroup {
  static create() {
    const loc = locateCgroup2();
    const name = `${PREFIX}${process.pid}-${Date.now().toString(36)}`;
    const dir = path.join(loc.ownPath, name);
    fs.mkdirSync(dir);
    const outer = new OuterCgroup(dir, loc.ownPath);
    try {
      fs.mkdirSync(outer.harness);
    } catch (err) {
      outer.destroy();
      throw err;
    }
    return outer;
  }

  constructor(dir, home) {
    this.dir = dir;
    /** The orchestrator's own cgroup, where the outer one was made. */
    this.home = home;
    this.harness = path.join(dir, HARNESS_LEAF);
  }

  destroy() {
    return destroyTreeSync(this.dir);
  }
}
