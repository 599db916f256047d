// A call as a job and a server: when it becomes a job of its supervisor
// (background from the start, leftovers kept, or ready), what its tree
// listens on, the `ready` wait, and what its leaf's sockets still listen on
// once the tree is gone (the report's heldOutside).
import fs from 'node:fs';
import path from 'node:path';

import { binding } from '../binding';
import { proctreeError } from '../errors';
import { normalizeListeners, type ResolvedReady } from '../ports';
import { ReadyWait } from '../ready';
import type { CleanupReport, Listener, ReadyState } from '../types';
import { describe } from './describe';
import { knowStart } from './exec';
import { startLadder } from './ladder';
import { output, settle } from './result';
import { type CallState, EMPTY, STARTED } from './state';

/**
 * Keeps the leaf's cgroup id for the report (see CallExtras.leafId): on
 * cgroup2 a directory's inode number is the id sock_diag filters on.
 */
function watchPorts(s: CallState): void {
  const cgroup = s.call.cgroup;
  if (!cgroup || s.x?.leafId) return;
  try {
    s.extras().leafId = fs.statSync(cgroup, { bigint: true }).ino;
  } catch {
    // Gone already: the tree is too.
  }
}

/** What the whole tree listens on now (ToolCall#ports). */
export function ports(s: CallState): Promise<Listener[]> {
  knowStart(s);
  if (!s.live) return Promise.resolve([]);
  watchPorts(s);
  const ask = binding.ports?.bind(binding);
  if (!ask) {
    return Promise.reject(
      proctreeError('ERR_PROCTREE_PORTS_UNSUPPORTED', 'ports() needs the Linux addon, and this process runs the portable binding'),
    );
  }
  const id = s.id;
  return new Promise((resolve, reject) => {
    ask(id, (err, list) => {
      if (err) reject(err);
      else resolve(normalizeListeners(list ?? []));
    });
  });
}

/**
 * A call that listened (a job, `ready`, or ports() asked): whatever its
 * leaf's sockets still listen on with the tree gone is held by a process
 * outside it (a socket handed away), and the report says so. The kernel is
 * asked off the JS thread; `then` runs with the report complete. Returns
 * false (and runs nothing) when there is nothing to ask.
 */
export function checkHeldOutside(s: CallState, report: CleanupReport, then: () => void): boolean {
  const ask = binding.ports?.bind(binding);
  const leafId = s.x?.leafId;
  if (!ask || !leafId) return false;
  const x = s.extras();
  x.heldCheck = true;
  ask([leafId], (err, list) => {
    if (!err && list && list.length > 0) report.heldOutside = normalizeListeners(list);
    x.heldCheck = false;
    then();
  });
  return true;
}

/** From now on the call is a job: listed by its supervisor, its output flowing to the ring whoever reads. */
export function becomeJob(s: CallState): void {
  const ring = s.x?.ring;
  const c = s.call;
  if (c.jobId !== null || !ring) return;
  // The id `proctree ps` reads from the kernel: the leaf's name, which is
  // the id of the call that made it when a leaf serves again. A job's
  // leaf never serves another call, so no two jobs share one.
  c.jobId = c.confinement === 'cgroup' && c.cgroup ? path.basename(c.cgroup) : `c${s.id}`;
  watchPorts(s);
  s.extras().cpuBase = binding.retire(s.id);
  output(s).flowAlways();
  s.owner.adoptJob(c, ring, s.extras().startedAtEpoch);
}

/** options.ready (or `proctree run --ready-port`): the wait, fed by the output when it matches on output. */
export function readyWait(s: CallState, ready: ResolvedReady): ReadyWait {
  const wait = new ReadyWait(ready, {
    ports: () => s.call.ports(),
    reached: (state) => onReady(s, state),
    expired: () => void startLadder(s, 'not-ready', s.opts.grace, true),
  });
  s.extras().readyWait = wait;
  if (ready.output !== null) output(s).subscribe((chunk) => wait.output(chunk));
  return wait;
}

/** The ready wait on a call that is no job: 'ready' and result.ready; 'not-ready' past its timeout. */
export function watchReady(s: CallState, ready: ResolvedReady): void {
  if (s.x?.readyWait) return;
  const wait = readyWait(s, ready);
  if (s.flag(STARTED) && !s.failed && !s.flag(EMPTY)) wait.start(s.startedAt);
}

/** options.ready held: the call is a job now, and its result (run()) is due. */
function onReady(s: CallState, state: ReadyState): void {
  s.extras().readyState = state;
  if (!s.x?.ring) {
    // Not a call that can be a job (watchReady): it is only told.
    s.call.emit('ready', state);
    return;
  }
  // As when a command exits leaving a job: the job's time is not the command's.
  if (!s.opts.background) s.x.timers?.stopCommand();
  becomeJob(s);
  s.call.emit('ready', state);
  if (s.opts.background || s.flag(EMPTY)) {
    settle(s);
    return;
  }
  // The result says what is left running: a big tree read off this thread.
  describe(s, binding.members(s.id), (infos) => {
    s.extras().remaining = infos;
    settle(s);
  });
}
