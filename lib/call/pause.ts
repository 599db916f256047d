// pause() and resume() of a call: its whole tree frozen and thawed through
// its cgroup leaf's cgroup.freeze (cgroup and systemd tiers). Each settles
// when the kernel shows the state in cgroup.events (frozen 1, frozen 0), not
// when it was asked for: a freeze waits for every member to reach a point
// where it can stop. Requests are done one after another, in order.
//
// The pidns, subreaper and pgroup tiers (and the portable binding) refuse
// with ERR_PROCTREE_PAUSE_UNSUPPORTED: SIGSTOP to every member would race
// with the forks of the members not stopped yet, a member may catch SIGCONT
// or be stopped by its own job control, and nothing would prove the tree
// stopped.
import { binding } from '../binding';
import type { NativeErrorShape } from '../binding/contract';
import { proctreeError } from '../errors';
import type { Confinement } from '../types';

/** What a PauseControl needs of its call. @internal */
export interface PausedCall {
  /** The addon's id of the running call, or null when it is not running (queued, failed, empty, being stopped). */
  runningId(): number | null;
  readonly confinement: Confinement;
  /** The tree is paused (true) or resumed (false): timers that count the command's activity stop or restart. */
  pausedChanged(paused: boolean): void;
}

function notRunning(what: string): Error {
  return proctreeError('ERR_PROCTREE_NOT_RUNNING', `${what}: the call's tree is not running (not started yet, stopped, or gone)`);
}

function unsupported(confinement: Confinement, detail: string): Error {
  return proctreeError(
    'ERR_PROCTREE_PAUSE_UNSUPPORTED',
    `pause() and resume() need the cgroup freezer (the cgroup and systemd tiers); this call runs in the '${confinement}' tier${detail}`,
  );
}

/** The error of a refused freeze, as the harness should read it. */
function pauseError(err: NativeErrorShape, call: PausedCall, what: string): Error {
  if (err.code === 'ESRCH') return notRunning(what);
  if (err.code === 'ENOTSUP' || err.code === 'EOPNOTSUPP') {
    return unsupported(
      call.confinement,
      err.path ? ` but cannot freeze ${err.path} (no cgroup.freeze before Linux 5.2, or a tracer is attached to this process)` : '',
    );
  }
  return err;
}

interface Waiter {
  frozen: boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** One call's pause state: the requests in order, and the one waiting for cgroup.events. @internal */
export class PauseControl {
  /** What cgroup.events last showed for a request (true: frozen), false once a ladder or the end thawed it. */
  paused = false;
  #chain: Promise<void> = Promise.resolve();
  #waiter: Waiter | null = null;
  readonly #call: PausedCall;

  constructor(call: PausedCall) {
    this.#call = call;
  }

  /** pause() (true) or resume() (false): settles once cgroup.events shows it; requests run in order. */
  request(frozen: boolean): Promise<void> {
    const what = frozen ? 'pause()' : 'resume()';
    const run = (): Promise<void> => this.#send(frozen, what);
    const next = this.#chain.then(run, run);
    // The chain goes on whatever this request's outcome.
    this.#chain = next.catch(() => {});
    return next;
  }

  #send(frozen: boolean, what: string): Promise<void> {
    const id = this.#call.runningId();
    if (id === null) return Promise.reject(notRunning(what));
    if (!binding.pause || (this.#call.confinement !== 'cgroup' && this.#call.confinement !== 'systemd')) {
      return Promise.reject(unsupported(this.#call.confinement, ''));
    }
    if (this.paused === frozen) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#waiter = { frozen, resolve, reject };
      // The command's activity timers stop at the request (a freeze can take
      // a moment to show), and restart once it ran again.
      if (frozen) this.#call.pausedChanged(true);
      const err = binding.pause?.(id, frozen);
      if (err) {
        this.#waiter = null;
        if (frozen) this.#call.pausedChanged(false);
        reject(pauseError(err, this.#call, what));
      }
    });
  }

  /** The addon's Frozen event: cgroup.events shows `frozen`. */
  shown(frozen: boolean): void {
    const w = this.#waiter;
    if (!w || w.frozen !== frozen) return;
    this.#waiter = null;
    this.paused = frozen;
    if (!frozen) this.#call.pausedChanged(false);
    w.resolve();
  }

  /** A ladder started (it thaws the tree after its signals), or the tree is gone: nothing is paused any more. */
  ended(): void {
    this.paused = false;
    const w = this.#waiter;
    this.#waiter = null;
    w?.reject(notRunning(w.frozen ? 'pause()' : 'resume()'));
  }
}
