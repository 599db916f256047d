// The per-call output switch of `proctree serve`: what holds a call's pipes
// unread (the client's pause, our full stdout, a pending start) and when the
// hold no longer applies.
import type { Readable } from 'node:stream';

/**
 * Whether the server reads a call's stdout and stderr pipes. Not reading
 * them is the backpressure: the pipe fills and the command blocks in write(),
 * as it would under a shell pipeline, so nothing is lost and nothing piles up.
 */
export class OutputFlow {
  /** The client asked (`pause`): it buffers this call's output itself. */
  clientPaused = false;
  /** Our stdout was full when this call's output was written: until 'drain'. */
  waitingForDrain = false;
  /**
   * The tree is empty: what is left in the pipes is bounded by their size,
   * and 'close' waits for it, so a client's pause no longer holds.
   */
  treeEmpty = false;
  /** The spawn is not answered yet (a shim's start is pending): output waits for the answer. */
  starting = false;
  /**
   * The output goes out as events. Not with `collect`, and not once the call
   * is a job: then it flows to the result or to the job's ring buffer
   * whoever reads, and no pause holds it.
   */
  events = true;
  /**
   * Its output goes to a collected result, sent in one line at the end:
   * while the server's stdout is over the operator's limit it is held too,
   * so results that nobody reads yet stop growing.
   */
  collecting = false;

  constructor(
    private readonly streams: Readable[],
    private readonly serverFull: () => boolean,
  ) {}

  get hold(): boolean {
    if (this.collecting) return this.serverFull() && !this.treeEmpty;
    return this.events && (this.starting || this.waitingForDrain || (this.clientPaused && !this.treeEmpty));
  }

  apply(): void {
    const hold = this.hold;
    for (const s of this.streams) {
      if (hold) s.pause();
      else s.resume();
    }
  }

  /**
   * A chunk came while the output should be held: the library resumed the
   * streams (Node's flushStdio at exit, as ChildProcess does). Hold them again.
   */
  reassert(): void {
    if (this.hold) this.apply();
  }
}
