// The `ready` option's wait: a call fed its output chunk by chunk
// and asked what its tree listens on, at an interval that backs off (50 ms,
// then ×1.5 up to 500 ms; each question runs on the addon's ports thread, so
// the JS thread only waits), until the condition holds (reached) or
// ready.timeout passes (expired). The pure parts are lib/ports.ts's.
import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';

import { type OutputMatcher, outputMatcher, readyReached, type ResolvedReady } from './ports';
import type { Listener, ReadyState } from './types';

const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 500;

export interface ReadyHooks {
  /** The call's listeners now (ToolCall#ports()). */
  ports(): Promise<Listener[]>;
  /** The condition holds: once, never after expired(). */
  reached(state: ReadyState): void;
  /** ready.timeout passed first: once, never after reached(). */
  expired(): void;
}

export class ReadyWait {
  readonly #ready: ResolvedReady;
  readonly #hooks: ReadyHooks;
  readonly #matcher: OutputMatcher | null;
  readonly #decoder = new StringDecoder('utf8');
  #listeners: Listener[] | null = null;
  #pollTimer: NodeJS.Timeout | null = null;
  #timeoutTimer: NodeJS.Timeout | null = null;
  #interval = FIRST_POLL_MS;
  #asking = false;
  #started = false;
  #over = false;
  #startedAt = 0;

  constructor(ready: ResolvedReady, hooks: ReadyHooks) {
    this.#ready = ready;
    this.#hooks = hooks;
    this.#matcher = ready.output !== null ? outputMatcher(ready.output) : null;
  }

  /** Still waiting: neither reached nor expired nor stopped. */
  get pending(): boolean {
    return !this.#over;
  }

  /** The call started: polling and the timeout begin. */
  start(startedAt = performance.now()): void {
    if (this.#started || this.#over) return;
    this.#started = true;
    this.#startedAt = startedAt;
    if (this.#ready.timeout !== null) {
      this.#timeoutTimer = setTimeout(() => this.#expire(), this.#ready.timeout);
      // The call keeps the loop alive while it matters (a referenced call).
      this.#timeoutTimer.unref();
    }
    if (this.#ready.listening !== null) this.#ask();
    else this.#check();
  }

  /** A chunk of stdout or stderr. */
  output(chunk: Buffer): void {
    if (this.#over || !this.#matcher || this.#matcher.matched) return;
    if (!this.#matcher.push(this.#decoder.write(chunk)) || !this.#started) return;
    if (this.#ready.listening !== null && !this.#asking) {
      // The output says it is up: ask what listens now, not at the next poll.
      if (this.#pollTimer) clearTimeout(this.#pollTimer);
      this.#ask();
    } else {
      this.#check();
    }
  }

  /** The tree is gone, or the call failed: no more questions, no timeout. */
  stop(): void {
    this.#over = true;
    this.#clear();
  }

  #clear(): void {
    if (this.#pollTimer) clearTimeout(this.#pollTimer);
    if (this.#timeoutTimer) clearTimeout(this.#timeoutTimer);
    this.#pollTimer = null;
    this.#timeoutTimer = null;
  }

  #expire(): void {
    this.#timeoutTimer = null;
    if (this.#over) return;
    this.stop();
    this.#hooks.expired();
  }

  #ask(): void {
    this.#pollTimer = null;
    if (this.#over || this.#asking) return;
    this.#asking = true;
    this.#hooks.ports().then(
      (l) => {
        this.#asking = false;
        this.#listeners = l;
        this.#check();
        this.#next();
      },
      () => {
        this.#asking = false;
        this.#next();
      },
    );
  }

  #next(): void {
    if (this.#over || this.#pollTimer || this.#ready.listening === null) return;
    this.#pollTimer = setTimeout(() => this.#ask(), this.#interval);
    this.#pollTimer.unref();
    this.#interval = Math.min(MAX_POLL_MS, Math.round(this.#interval * 1.5));
  }

  #check(): void {
    if (this.#over) return;
    const outputMatched = this.#matcher?.matched ?? true;
    if (this.#ready.listening === null) {
      if (!outputMatched || this.#asking) return;
      // Output alone: what listens then, asked once, is part of the answer.
      this.#asking = true;
      const done = (l: Listener[]): void => {
        this.#asking = false;
        this.#listeners = l;
        this.#reach();
      };
      this.#hooks.ports().then(done, () => done([]));
      return;
    }
    if (readyReached(this.#ready, { listeners: this.#listeners, outputMatched })) this.#reach();
  }

  #reach(): void {
    if (this.#over) return;
    this.stop();
    const state: ReadyState = { listening: this.#listeners ?? [], afterMs: performance.now() - this.#startedAt };
    if (this.#matcher?.match != null) state.output = this.#matcher.match;
    this.#hooks.reached(state);
  }
}
