// ToolCall: one spawned command and everything it starts, shaped like Node's
// ChildProcess so it drops into harness code.
import { EventEmitter } from 'node:events';
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { threadId } from 'node:worker_threads';

import { LeftoversError, spawnError, type SpawnError } from './errors';
import { native, NativeEventKind, type NativeErrorShape, type NativeProcessInfo, type NativeReport } from './native';
import { checkGrace, type ResolvedRun, resolveRun, type ResolvedSpawn, signalName, signalNumber } from './options';
import type { CleanupReason, CleanupReport, Confinement, ProcessInfo, RunResult } from './types';

let exitHookInstalled = false;

// Normal exit, process.exit() and an uncaught exception all run 'exit'
// listeners: one synchronous cgroup.kill per live call, then the directories go.
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => native.shutdown(1000));
}

/** The cgroup subtree of this environment, below the harness's own cgroup. */
export function groupName(): string {
  return threadId === 0 ? `proctree-${process.pid}` : `proctree-${process.pid}-w${threadId}`;
}

function toProcessInfo(p: NativeProcessInfo): ProcessInfo {
  return { pid: p.pid, ppid: p.ppid, pgid: p.pgid, sid: p.sid, comm: p.comm, cmdline: p.cmdline };
}

function emptyReport(reason: CleanupReason, confinement: Confinement): CleanupReport {
  return { reason, confinement, signaled: 0, killed: 0, escaped: 0, leftovers: [], verified: 'cgroup.events', durationMs: 0 };
}

class Collector {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(
    stream: Readable | null,
    private readonly max: number,
  ) {
    // Keep reading past the limit: a writer blocked on a full pipe would
    // never exit.
    stream?.on('data', (chunk: Buffer) => {
      if (this.size >= this.max) {
        if (chunk.length > 0) this.truncated = true;
        return;
      }
      const room = this.max - this.size;
      if (chunk.length > room) {
        this.truncated = true;
        chunk = chunk.subarray(0, room);
      }
      this.chunks.push(chunk);
      this.size += chunk.length;
    });
  }

  value(encoding: BufferEncoding | 'buffer'): string | Buffer {
    const buf = Buffer.concat(this.chunks, this.size);
    return encoding === 'buffer' ? buf : buf.toString(encoding);
  }
}

export interface ToolCallEvents {
  spawn: [];
  exit: [code: number | null, signal: NodeJS.Signals | null];
  leftover: [processes: ProcessInfo[]];
  cleanup: [report: CleanupReport];
  empty: [];
  close: [code: number | null, signal: NodeJS.Signals | null];
  error: [err: Error];
}

export class ToolCall extends EventEmitter {
  /** Pid of the main process; undefined when it could not start. */
  readonly pid: number | undefined;
  readonly stdin: Writable | null = null;
  readonly stdout: Readable | null = null;
  readonly stderr: Readable | null = null;
  /** Exit code of the main process once it exited, else null. */
  exitCode: number | null = null;
  /** Signal that ended the main process, else null. */
  signalCode: NodeJS.Signals | null = null;
  /** Whether kill() delivered a signal to at least one process. */
  killed = false;
  /** The confinement tier actually used. */
  readonly confinement: Confinement = 'cgroup';
  /** Absolute path of the call's cgroup; null when it could not start. */
  readonly cgroup: string | null = null;
  readonly spawnfile: string;
  readonly spawnargs: string[];

  readonly #id: number;
  readonly #opts: ResolvedSpawn;
  readonly #startedAt = performance.now();
  #spawnError: SpawnError | null = null;
  #empty = false;
  #closed = false;
  #openStreams = 0;
  #report: CleanupReport | null = null;
  #ladder: Promise<CleanupReport> | null = null;
  #resolveLadder: ((r: CleanupReport) => void) | null = null;
  #timedOut = false;
  #aborted = false;
  #timer: NodeJS.Timeout | null = null;
  #onAbort: (() => void) | null = null;
  #done: Promise<RunResult<string | Buffer>> | null = null;

  /** @internal use spawn() */
  constructor(opts: ResolvedSpawn, run?: ResolvedRun) {
    super();
    this.#opts = opts;
    this.spawnfile = opts.file;
    this.spawnargs = opts.spawnargs;
    installExitHook();

    const spec = {
      group: groupName(),
      candidates: opts.candidates,
      argv: opts.argv,
      env: opts.env,
      stdio: opts.stdio,
      ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
      ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
      ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
    };
    const res = native.spawn(spec, (kind, a, b) => this.#onNative(kind, a, b));
    if ('error' in res) {
      this.#id = 0;
      this.#spawnError = spawnError(res.error, opts.file, opts.spawnargs);
      if (run) this.#done = this.#collect(run);
      process.nextTick(() => {
        this.emit('error', this.#spawnError as Error);
      });
      return;
    }
    this.#id = res.id;
    this.pid = res.pid;
    this.cgroup = res.cgroup;
    const [inFd, outFd, errFd] = res.stdio;
    if (inFd >= 0) this.stdin = this.#socket(inFd, false);
    if (outFd >= 0) this.stdout = this.#socket(outFd, true);
    if (errFd >= 0) this.stderr = this.#socket(errFd, true);
    if (run) this.#done = this.#collect(run);

    if (opts.timeout > 0) {
      this.#timer = setTimeout(() => {
        this.#timedOut = true;
        void this.#startLadder('timeout', opts.grace);
      }, opts.timeout);
    }
    const signal = opts.signal;
    if (signal) {
      this.#onAbort = () => {
        this.#aborted = true;
        void this.#startLadder('abort', opts.grace);
      };
      if (signal.aborted) process.nextTick(this.#onAbort);
      else signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    process.nextTick(() => this.emit('spawn'));
  }

  #socket(fd: number, readable: boolean): net.Socket {
    const sock = new net.Socket({ fd, readable, writable: !readable, allowHalfOpen: true });
    if (!readable) {
      // EPIPE once the command is gone is not fatal, as with ChildProcess;
      // like ChildProcess, 'close' does not wait for stdin.
      sock.on('error', () => {});
      return sock;
    }
    this.#openStreams += 1;
    sock.once('close', () => {
      this.#openStreams -= 1;
      this.#maybeClose();
    });
    return sock;
  }

  /** Live pids of the whole tree now, from the cgroup. */
  members(): number[] {
    return this.#id && !this.#empty ? native.members(this.#id) : [];
  }

  /**
   * Sends one signal to every process of the tree (escapees included), with
   * no escalation. Returns whether at least one process got it.
   */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const num = signalNumber(signal);
    if (!this.#id || this.#empty) return false;
    const n = native.kill(this.#id, num);
    if (n > 0) this.killed = true;
    return n > 0;
  }

  /**
   * Stops the whole tree: freeze, the graceful signal once to every member,
   * thaw, `grace` ms, cgroup.kill, verified empty. Idempotent: every call
   * gets the report of the one ladder.
   */
  terminate(options: { grace?: number } = {}): Promise<CleanupReport> {
    const grace = checkGrace(options?.grace, this.#opts.grace);
    return this.#startLadder('terminate', grace);
  }

  /**
   * Settles once the tree is empty and stdio drained, with the whole result.
   * Output is collected from the first time this is read: read it right
   * after spawn() to get all of it.
   */
  get done(): Promise<RunResult> {
    if (!this.#done) this.#done = this.#collect({ ...resolveRun(undefined), closeStdin: false });
    return this.#done as Promise<RunResult>;
  }

  #startLadder(reason: CleanupReason, grace: number): Promise<CleanupReport> {
    if (this.#report) return Promise.resolve(this.#report);
    if (this.#ladder) return this.#ladder;
    if (!this.#id || this.#empty) return Promise.resolve(emptyReport(reason, this.confinement));
    this.#ladder = new Promise((resolve) => {
      this.#resolveLadder = resolve;
    });
    if (!native.terminate(this.#id, grace, this.#opts.killSignal, reason)) {
      // The tree emptied before any ladder ran: nothing to stop.
      this.#resolveLadder?.(emptyReport(reason, this.confinement));
    }
    return this.#ladder;
  }

  #onNative(kind: NativeEventKind, a?: number | null | NativeReport | NativeErrorShape, b?: number): void {
    switch (kind) {
      case NativeEventKind.Exit:
        this.#onExit(a as number | null, b ?? 0);
        break;
      case NativeEventKind.Cleanup:
        this.#onCleanup(a as NativeReport);
        break;
      case NativeEventKind.Empty:
        this.#onEmpty();
        break;
      case NativeEventKind.Error:
        this.emit('error', a as NativeErrorShape);
        break;
    }
  }

  #onExit(code: number | null, signal: number): void {
    this.exitCode = code;
    this.signalCode = signalName(signal);
    this.emit('exit', this.exitCode, this.signalCode);
    if (this.#ladder || this.#empty) return;
    const pids = native.members(this.#id);
    if (pids.length === 0) return;
    const infos = native.processInfo(pids).map(toProcessInfo);
    if (infos.length > 0) this.emit('leftover', infos);
    if (this.#opts.leftovers === 'kill' && !this.#ladder) void this.#startLadder('leftovers', this.#opts.grace);
  }

  #onCleanup(r: NativeReport): void {
    const report: CleanupReport = {
      reason: r.reason as CleanupReason,
      confinement: this.confinement,
      signaled: r.signaled,
      killed: r.killed,
      escaped: r.escaped,
      leftovers: r.leftovers.map(toProcessInfo),
      verified: 'cgroup.events',
      durationMs: r.durationMs,
    };
    this.#report = report;
    this.#resolveLadder?.(report);
    this.emit('cleanup', report);
    if (report.leftovers.length > 0) {
      const names = report.leftovers.map((p) => `${p.pid} (${p.comm})`).join(', ');
      this.emit('error', new LeftoversError(`processes survived the kill ladder: ${names}`, report.leftovers));
    }
  }

  #onEmpty(): void {
    this.#empty = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#onAbort) this.#opts.signal?.removeEventListener('abort', this.#onAbort);
    // A ladder asked for while the empty event was on its way.
    if (this.#ladder && !this.#report) this.#resolveLadder?.(emptyReport('terminate', this.confinement));
    // Nobody is left to read stdin: release our end.
    this.stdin?.destroy();
    this.emit('empty');
    this.#maybeClose();
  }

  #maybeClose(): void {
    // Every writer of our pipes was in the tree, so once it is empty the
    // pipes reach EOF: 'close' cannot hang on a daemon holding stdout.
    if (this.#closed || !this.#empty || this.#openStreams > 0) return;
    this.#closed = true;
    this.emit('close', this.exitCode, this.signalCode);
  }

  #collect(run: ResolvedRun): Promise<RunResult<string | Buffer>> {
    const out = new Collector(this.stdout, run.maxBuffer);
    const err = new Collector(this.stderr, run.maxBuffer);
    if (this.stdin) {
      if (run.input !== undefined) this.stdin.end(run.input);
      else if (run.closeStdin) this.stdin.end();
    }
    return new Promise((resolve, reject) => {
      if (this.#spawnError) {
        reject(this.#spawnError);
        return;
      }
      this.once('close', () => {
        resolve({
          exitCode: this.exitCode,
          signal: this.signalCode,
          stdout: out.value(run.encoding),
          stderr: err.value(run.encoding),
          stdoutTruncated: out.truncated,
          stderrTruncated: err.truncated,
          timedOut: this.#timedOut,
          aborted: this.#aborted,
          durationMs: performance.now() - this.#startedAt,
          cleanup: this.#report,
          pid: this.pid ?? 0,
          cgroup: this.cgroup ?? '',
          confinement: this.confinement,
        });
      });
    });
  }
}

// Typed overloads for the events, so listeners are checked.
export interface ToolCall {
  on<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  once<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  off<E extends keyof ToolCallEvents>(event: E, listener: (...args: ToolCallEvents[E]) => void): this;
  emit<E extends keyof ToolCallEvents>(event: E, ...args: ToolCallEvents[E]): boolean;
}
