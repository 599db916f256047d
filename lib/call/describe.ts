// What /proc says of a call's processes (pid, parents, command), read on
// the JavaScript thread only for a few: a read of /proc/<pid>/cmdline waits
// while the process is between fork and exec, or stuck in the kernel with
// its memory, and a thousand reads hold a loop for tens of milliseconds.
import { binding } from '../binding';
import type { ProcessInfo } from '../types';
import { maybeClose } from './result';
import type { CallState } from './state';

/** Up to this many are read from /proc at once, on this thread (about 30 µs each). */
export const DESCRIBE_NOW = 64;

/**
 * What /proc says of `pids`, to `done`: at once for a few (unless
 * `elsewhere`); for more, read on
 * the addon's thread, so that a command that leaves a thousand processes
 * behind (or some between fork and exec, whose reads wait for the exec)
 * does not hold the harness's loop for tens of milliseconds. 'close' waits
 * for it, and `done` runs in the call's async context. The tree is left
 * alone meanwhile: those described are alive when they are read.
 */
export function describe(s: CallState, pids: readonly number[], done: (infos: ProcessInfo[]) => void, elsewhere = false): void {
  const ask = binding.describe?.bind(binding);
  if ((pids.length <= DESCRIBE_NOW && !elsewhere) || !ask) {
    done(binding.processInfo(pids));
    return;
  }
  s.extras().describing = true;
  try {
    ask(pids, (err, infos) => {
      s.scope.runInAsyncScope(() => {
        s.extras().describing = false;
        // The addon could not read them there (its loop is closing): here.
        done(err || !infos ? binding.processInfo(pids) : infos);
        maybeClose(s);
      });
    });
  } catch {
    s.extras().describing = false;
    done(binding.processInfo(pids));
  }
}
