// A call's output held back until its 'spawn' is out. Node emits 'spawn'
// before any output; a sealed call's command can write before its shim's
// report names its pid (and 'spawn' needs the pid). What its streams read
// meanwhile, their data and then their end, is kept in order and replayed
// once 'spawn' is out (or once the call failed or exited without one).
import type { NativeErrorShape } from './binding/contract';

/** A stream's native events: 0 data, 1 the end (an error or null). */
export type HeldEvent = [kind: 0 | 1, value: Buffer | NativeErrorShape | null];

/** Starts holding a stream's output. @internal */
export const holdOutput = Symbol('proctree.holdOutput');
/** Replays what a stream held, and stops holding. @internal */
export const releaseOutput = Symbol('proctree.releaseOutput');

export class OutputHold {
  readonly #events: HeldEvent[] = [];
  #bytes = 0;

  /** Keeps an event; true once `limit` bytes or more are kept: the stream stops reading meanwhile. */
  keep(kind: 0 | 1, value: Buffer | NativeErrorShape | null, limit: number): boolean {
    this.#events.push([kind, value]);
    if (kind === 0) this.#bytes += (value as Buffer).length;
    return this.#bytes >= limit;
  }

  /** What was kept, in order, for the stream's own event handler. */
  replay(onEvent: (kind: 0 | 1, value: Buffer | NativeErrorShape | null) => void): void {
    for (const [kind, value] of this.#events.splice(0)) onEvent(kind, value);
  }
}
