// The worker side: a bench worker is a node process that the orchestrator
// started and that first moved itself into the outer cgroup's harness leaf.
// Everything it starts, by any method, therefore lives below the outer cgroup.
import fs from 'node:fs';
import path from 'node:path';

import {
  PREFIX,
  cgroupKill,
  destroyTreeSync,
  joinCgroup,
  liveMembers,
  populated,
} from './cgroup.mjs';
import { sleep } from './stats.mjs';

export class Harness {
  constructor({ outer, harness }) {
    this.outer = outer;
    this.harness = harness;
    this.trials = new Set();
    this.seq = 0;
    /** Long-lived processes of the harness itself (a library's helper), not of any call. */
    this.helpers = [];
    joinCgroup(harness);
    // Whatever way this worker ends, the trial cgroups it made go with it.
    process.on('exit', () => this.closeAllSync());
  }

  /** Live processes below the outer cgroup, this worker and its helpers excluded. */
  live() {
    return liveMembers(this.outer, [process.pid, ...this.helpers.map((p) => p.pid)]);
  }

  /**
   * Records what lives below the outer cgroup while no call runs: helpers
   * that a library starts once per harness (run one call before this, so a
   * lazily started helper exists). Only processes directly in the harness
   * leaf qualify; anything in a call's or trial's cgroup is never excluded.
   */
  recordHelpers() {
    this.helpers = liveMembers(this.harness, [process.pid], 0);
    return this.helpers.map((p) => ({ pid: p.pid, comm: p.comm }));
  }

  /** A fresh cgroup for one trial of a baseline: `<outer>/proctree-bench-t<pid>-<n>`. */
  openTrial() {
    const dir = path.join(this.outer, `${PREFIX}t${process.pid}-${(this.seq += 1)}`);
    fs.mkdirSync(dir);
    this.trials.add(dir);
    return dir;
  }

  /**
   * Runs `start` (which must start its process synchronously, as
   * child_process.spawn does) with this worker inside `dir`, so the child is
   * born there; the worker moves back to its leaf before returning.
   */
  startInside(dir, start) {
    joinCgroup(dir);
    try {
      return start();
    } finally {
      joinCgroup(this.harness);
    }
  }

  /** cgroup.kill a trial cgroup, wait until it is empty, rmdir it. */
  async closeTrial(dir) {
    cgroupKill(dir);
    await waitEmpty(dir, 5000);
    for (let i = 0; i < 200; i += 1) {
      try {
        fs.rmdirSync(dir);
        break;
      } catch (err) {
        if (err.code === 'ENOENT') break;
        if (err.code !== 'EBUSY' || i === 199) throw err;
        await sleep(5);
      }
    }
    this.trials.delete(dir);
  }

  /**
   * Kills whatever is still alive below the outer cgroup except this worker:
   * a survivor of a proctree call sits in the call's cgroup below our leaf.
   */
  async killStrays() {
    const dirs = [];
    for (const base of [this.outer, this.harness]) {
      for (const e of fs.readdirSync(base, { withFileTypes: true })) {
        const d = path.join(base, e.name);
        if (e.isDirectory() && d !== this.harness) dirs.push(d);
      }
    }
    for (const d of dirs) cgroupKill(d);
    for (const d of dirs) await waitEmpty(d, 5000);
  }

  closeAllSync() {
    for (const d of this.trials) destroyTreeSync(d);
    this.trials.clear();
  }
}

/**
 * Resolves true once `dir` has no live member (cgroup.events populated 0),
 * false after timeoutMs. Woken by inotify on cgroup.events and by a 1 ms
 * poll: the kernel sends at most one notification per cgroup file every 10 ms
 * or so (CGROUP_FILE_NOTIFY_MIN_INTV), which would add to what is measured.
 */
export function waitEmpty(dir, timeoutMs) {
  return new Promise((resolve) => {
    let watcher = null;
    let timer = null;
    let poll = null;
    const done = (v) => {
      watcher?.close();
      clearTimeout(timer);
      clearInterval(poll);
      resolve(v);
    };
    const check = () => {
      if (!populated(dir)) done(true);
    };
    if (!populated(dir)) {
      resolve(true);
      return;
    }
    try {
      watcher = fs.watch(path.join(dir, 'cgroup.events'), check);
      watcher.on('error', () => {});
    } catch {
      watcher = null;
    }
    poll = setInterval(check, 1);
    timer = setTimeout(() => done(false), timeoutMs);
    check();
  });
}

/** Absolute path of `name` on PATH, as execvp would find it. */
export function which(name) {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (fs.statSync(p).isFile()) return p;
    } catch {
      // not here
    }
  }
  throw new Error(`${name} not found on PATH`);
}
