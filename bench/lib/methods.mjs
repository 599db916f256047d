// The ways of stopping a tool call that the bench compares. Each starts a
// command and stops it the way its users do: graceful signal, up to `grace`
// ms, then SIGKILL. Baselines are started inside a trial cgroup of their own
// (only so that the bench can count and remove what they leave behind; none
// of them sees that cgroup).
import cp from 'node:child_process';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';

import { execa } from 'execa';
import { spawn as proctreeSpawn } from 'proctree';
import treeKill from 'tree-kill';

import { cgroupKill, liveMembers, members, procStat } from './cgroup.mjs';
import { sleep } from './stats.mjs';

function exitPromise(child) {
  let exited = false;
  const promise = new Promise((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
    child.once('error', () => {
      exited = true;
      resolve();
    });
  });
  return { promise, hasExited: () => exited };
}

const bounded = (promise, ms) => Promise.race([promise, sleep(ms)]);

/**
 * The generic baseline ladder: the method's graceful signal, then wait until
 * `settled` (the main process exited, or the tree is empty) or `grace` ran
 * out, then the method's SIGKILL if it is not settled.
 */
async function ladder(handle, grace, settled) {
  let isSettled = false;
  const settling = settled().then(() => {
    isSettled = true;
  });
  await handle.term();
  await Promise.race([settling, sleep(grace)]);
  if (!isSettled) await handle.kill();
}

class Baseline {
  constructor(harness, child) {
    this.harness = harness;
    this.child = child;
    this.pid = child.pid;
    const e = exitPromise(child);
    this.exited = e.promise;
    this.hasExited = e.hasExited;
  }

  /** What cp.spawn gets besides stdio 'ignore' (killpg: its own group). */
  static spawnOptions = {};

  /** Starts `file` in a trial cgroup of its own, as a harness using this method would. */
  static start(harness, file, args) {
    const treeDir = harness.openTrial();
    const child = harness.startInside(treeDir, () => cp.spawn(file, args, { ...this.spawnOptions, stdio: 'ignore' }));
    const h = new this(harness, child);
    h.treeDir = treeDir;
    return h;
  }

  /** Stops the tree as this method does; `settled` defaults to the main process's exit. */
  cleanup(grace, settled = () => this.exited) {
    return ladder(this, grace, settled);
  }

  async close() {
    await this.harness.closeTrial(this.treeDir);
  }
}

/** detached: true (a new session and group), then kill(-pgid): what most agent harnesses do. */
class Killpg extends Baseline {
  static label = 'killpg';
  static spawnOptions = { detached: true };

  // Signals the group only while one of our processes is still in it: once
  // the group is empty its number may be handed out again.
  #signal(sig) {
    // Only a group that is still ours: its leader in the trial cgroup, or
    // else any member of it (a read of each member's stat, which at 1000
    // processes costs more than the killpg itself, so only then).
    const leader = members(this.treeDir).includes(this.pid) ? procStat(this.pid) : null;
    const ours = leader?.pgid === this.pid || liveMembers(this.treeDir).some((p) => p.pgid === this.pid);
    if (!ours) return;
    try {
      process.kill(-this.pid, sig);
    } catch (err) {
      if (err.code !== 'ESRCH') throw err;
    }
  }

  async term() {
    this.#signal('SIGTERM');
  }

  async kill() {
    this.#signal('SIGKILL');
  }
}

/**
 * The kernel's floor for killing a tree at all: one write of cgroup.kill on
 * the trial cgroup the tree was born in (SIGKILL to every member, no grace,
 * nothing else), then the same wait for populated 0. No method can empty the
 * tree sooner than its processes take to exit.
 */
class CgroupKill extends Baseline {
  static label = 'cgroup.kill (floor)';

  async term() {
    cgroupKill(this.treeDir);
  }

  async kill() {
    cgroupKill(this.treeDir);
  }
}

/** child.kill(): the main process only. */
class ChildKill extends Baseline {
  static label = 'child.kill()';

  async term() {
    this.child.kill('SIGTERM');
  }

  async kill() {
    this.child.kill('SIGKILL');
  }
}

const treeKillAsync = (pid, sig) => new Promise((resolve) => treeKill(pid, sig, () => resolve()));

/** tree-kill: a `ps --ppid` walk from the main process, then a signal to each pid found. */
class TreeKill extends Baseline {
  static label = 'tree-kill';

  // tree-kill signals the root pid even when the walk finds nothing: once our
  // child is reaped that number may belong to someone else, so not then.
  async term() {
    if (!this.hasExited()) await treeKillAsync(this.pid, 'SIGTERM');
  }

  async kill() {
    if (!this.hasExited()) await treeKillAsync(this.pid, 'SIGKILL');
  }
}

/** execa: subprocess.kill() with forceKillAfterDelay = grace, its own escalation. */
class Execa extends Baseline {
  static label = 'execa';
  static start(harness, file, args, { grace }) {
    const dir = harness.openTrial();
    const sub = harness.startInside(dir, () =>
      execa(file, args, { stdio: 'ignore', reject: false, forceKillAfterDelay: grace }),
    );
    const h = new Execa(harness, sub);
    h.sub = sub;
    h.treeDir = dir;
    return h;
  }

  // execa escalates by itself (forceKillAfterDelay), so no generic ladder.
  async cleanup(grace) {
    this.sub.kill();
    await bounded(this.sub, grace + 2000);
  }
}

/** proctree: terminate() runs its own freeze → TERM each → thaw → grace → cgroup.kill ladder. */
class Proctree {
  static label = 'proctree';
  static stopsItself = true;
  static start(harness, file, args, { grace }) {
    const call = proctreeSpawn(file, args, { stdio: 'ignore', grace });
    const h = new Proctree();
    h.call = call;
    h.pid = call.pid;
    h.treeDir = call.cgroup;
    h.errors = [];
    call.on('error', (err) => h.errors.push(err));
    const e = exitPromise(call);
    h.exited = e.promise;
    h.hasExited = e.hasExited;
    h.closed = once(call, 'close');
    return h;
  }

  async cleanup(grace) {
    this.report = await this.call.terminate({ grace });
  }

  async close() {
    await bounded(this.closed, 5000);
  }
}

/**
 * A control for the event loop while a tree stops: the same proctree call
 * and terminate(), run on a worker thread (proctree-worker.mjs). The
 * bench's thread only watches its loop, so its stalls are what the kernel's
 * scheduler alone does to a loop while the tree's processes exit.
 */
class ProctreeWorker {
  static label = 'proctree on a worker thread (control)';
  static stopsItself = true;

  static async start(harness, file, args, { grace }) {
    const h = new ProctreeWorker();
    h.worker = new Worker(new URL('./proctree-worker.mjs', import.meta.url), { workerData: { file, args, grace } });
    const [first] = await once(h.worker, 'message');
    h.pid = first.pid;
    h.treeDir = first.cgroup;
    return h;
  }

  #ask(message) {
    return new Promise((resolve) => {
      this.worker.once('message', resolve);
      this.worker.postMessage(message);
    });
  }

  async cleanup() {
    const { report, errors } = await this.#ask('stop');
    this.report = report;
    this.errors = errors;
  }

  async close() {
    await bounded(this.#ask('close'), 6000);
    await this.worker.terminate();
  }
}

/**
 * Runs one proctree call, so that what proctree starts once per harness (its
 * guardian) exists, then records it as a harness helper: reported, and not
 * counted as a call's survivor.
 */
export async function settleHarnessHelpers(harness, file) {
  await once(proctreeSpawn(file, [], { stdio: 'ignore' }), 'close');
  return harness.recordHelpers();
}

export const METHODS = {
  proctree: Proctree,
  killpg: Killpg,
  'child.kill': ChildKill,
  execa: Execa,
  'tree-kill': TreeKill,
  'cgroup.kill': CgroupKill,
  'proctree (worker)': ProctreeWorker,
};
