// A call's 'exit' after the output that was already in its pipes when the
// command exited. The kernel closes a dying process's files before it
// reports the exit, so a net.Socket that is reading has read that output
// (and its EOF) by the time Node hears of the exit: code that reads stdout
// to its end and then waits for 'exit' works with child_process. Our pipes
// are read on the addon's loop, a chunk per turn of ours, and the exit
// could overtake them.
import { awaitBacklog, PipeStream } from '../pipe-stream';
import { type CallState, UNREF } from './state';

/**
 * The longest 'exit' waits for that output: a reader that keeps pulling
 * from a pipe another process keeps filling is not held for more.
 */
export const EXIT_BACKLOG_MAX_MS = 200;

/**
 * Whether the exit waits for output in the call's pipes: those not ended,
 * until each has delivered what its pipe held at the exit (and the end, if
 * every writer was gone) and its readers had their turn, or nobody takes
 * more (a stream whose buffer stays full because nobody reads it is not
 * waited for, as a socket that stopped reading would not be). `then` runs
 * once, then, or after EXIT_BACKLOG_MAX_MS.
 */
export function awaitPipeBacklog(s: CallState, then: () => void): boolean {
  let waiting = 0;
  let timer: NodeJS.Timeout | null = null;
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    if (timer) clearTimeout(timer);
    then();
  };
  const one = (): void => {
    if (--waiting === 0) finish();
  };
  for (const stream of s.call.stdio) if (stream instanceof PipeStream && stream[awaitBacklog](one)) waiting++;
  if (waiting === 0) return false;
  timer = setTimeout(finish, EXIT_BACKLOG_MAX_MS);
  if (s.flag(UNREF)) timer.unref();
  return true;
}
