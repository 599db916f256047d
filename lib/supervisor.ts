// Supervisor: many calls under one cgroup subtree, a concurrency limit, one
// shutdown for all of them, and nothing left behind however the harness dies.
import { EventEmitter } from 'node:events';
import { threadId } from 'node:worker_threads';

import { invalidArgType, invalidArgValue, outOfRange, proctreeError } from './errors';
import { Job, type JobInfo, JobRegistry } from './jobs';
import { binding } from './binding';
import type { NativeLimits } from './binding/contract';
import { resolveLimits } from './limits';
import type { Limits } from './types';
import { checkBoolean, checkBytes, checkGrace, DEFAULT_JOB_BUFFER, resolveRun, resolveSpawn } from './options';
import { callPhase, type CallOwner, callSlot, dropQueued, terminateMany } from './call/state';
import { ToolCall } from './toolcall';
import type { CleanupReport, EventCallback, RunOptions, RunResult, SpawnOptions } from './types';

export interface SupervisorOptions {
  /** Names the subtree `proctree-<pid>-<random>-<name>`. Letters, digits, `_`, `.`, `-`; unique in the process. */
  name?: string;
  /** Default `grace` of its calls and of shutdown(). Default: 2000. */
  grace?: number;
  /** Calls beyond this many wait (FIFO) for one to close. Default: unlimited. */
  maxConcurrent?: number;
  /**
   * Run shutdown() on SIGTERM, SIGINT and SIGHUP, then re-raise the signal.
   * Off by default: installing handlers would change how the harness dies.
   */
  handleSignals?: boolean;
  /** Bytes of output each job keeps (its ring buffer), unless the call says otherwise. Default: 1 MiB. */
  jobBuffer?: number;
  /**
   * What all of its calls together may use at most (`{ memoryBytes?, pids?,
   * cpu? }`, kept by its cgroup subtree: memory.max, pids.max, cpu.max), on
   * top of each call's own `limits`. Where they cannot be enforced its calls
   * do not run (ERR_PROCTREE_LIMITS_UNAVAILABLE). Default: none.
   */
  limits?: Limits;
  /**
   * The default `seal` of its calls (a call's own `seal` wins): each runs
   * sealed in its leaf (README "Sealed calls"), or not at all
   * (ERR_PROCTREE_SEAL_UNAVAILABLE). Default: false.
   */
  seal?: boolean;
}

export interface SupervisorEvents {
  call: [call: ToolCall];
  /** A call became a job (at its start with `background`, or when its main process exited with `leftovers: 'keep'`). */
  job: [job: Job, call: ToolCall];
  cleanup: [report: CleanupReport, call: ToolCall];
  error: [err: Error, call?: ToolCall];
}

const usedNames = new Set<string>();
let unnamed = 0;
let exitHookInstalled = false;

// Normal exit, process.exit() and an uncaught exception run 'exit' listeners:
// one synchronous cgroup.kill per subtree, then the directories go. SIGKILL
// and native crashes run nothing: the guardian covers those.
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => binding.shutdown(1000));
}

export class Supervisor extends EventEmitter {
  /** The cgroup subtree's directory name below the harness's cgroup. */
  readonly group: string;
  readonly #calls = new Set<ToolCall>();
  /** Calls holding a slot: each says so itself ([callSlot]), a supervisor holding many keeps no set of them. */
  #running = 0;
  readonly #queue: Array<{ call: ToolCall; start: () => void }> = [];
  readonly #grace: number;
  readonly #maxConcurrent: number;
  readonly #name: string;
  readonly #jobBuffer: number;
  readonly #limits: NativeLimits | null;
  readonly #seal: boolean;
  readonly #jobs = new JobRegistry();
  #closed = false;
  #signalHandlers: Array<[NodeJS.Signals, () => void]> = [];
  readonly #owner: CallOwner;

  constructor(options: SupervisorOptions = {}) {
    super();
    if (options === null || typeof options !== 'object') throw invalidArgType('options', 'Object', options);
    const name = options.name ?? `s${++unnamed}`;
    if (typeof name !== 'string') throw invalidArgType('options.name', 'string', name);
    if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(name)) {
      throw invalidArgValue('options.name', name, 'must be 1-64 letters, digits, "_", "." or "-"');
    }
    if (usedNames.has(name)) throw invalidArgValue('options.name', name, 'is already used by a live supervisor');
    this.#grace = checkGrace(options.grace, 2000);
    const max = options.maxConcurrent ?? Infinity;
    if (typeof max !== 'number') throw invalidArgType('options.maxConcurrent', 'number', max);
    if (!(max >= 1) || (max !== Infinity && !Number.isInteger(max))) {
      throw outOfRange('options.maxConcurrent', 'an integer >= 1 or Infinity', max);
    }
    this.#maxConcurrent = max;
    this.#jobBuffer = checkBytes(options.jobBuffer, 'options.jobBuffer', DEFAULT_JOB_BUFFER);
    this.#limits = resolveLimits(options.limits);
    const handleSignals = checkBoolean(options.handleSignals, 'options.handleSignals');
    this.#seal = checkBoolean(options.seal, 'options.seal');
    this.#name = name;
    usedNames.add(name);
    const suffix = threadId === 0 ? '' : `-w${threadId}`;
    const prefix = binding.subtreePrefix();
    this.group = name === 'default' ? `${prefix}${suffix}` : `${prefix}-${name}${suffix}`;
    installExitHook();
    this.#owner = this.#makeOwner();
    if (handleSignals) this.#installSignalHandlers();
  }

  /** Calls not yet closed, queued ones included. */
  get calls(): ReadonlySet<ToolCall> {
    return this.#calls;
  }

  /** Calls whose process tree is running now. */
  get running(): number {
    return this.#running;
  }

  spawn(file: string, args?: readonly string[], options?: SpawnOptions): ToolCall;
  spawn(file: string, options?: SpawnOptions): ToolCall;
  spawn(file: string, args?: readonly string[] | SpawnOptions, options?: SpawnOptions): ToolCall {
    this.#checkOpen();
    const resolved = resolveSpawn(file, args, options, { grace: this.#grace, jobBuffer: this.#jobBuffer, seal: this.#seal });
    return this.#track(new ToolCall(resolved, this.#owner));
  }

  run(file: string, args?: readonly string[], options?: RunOptions & { encoding?: BufferEncoding }): Promise<RunResult<string>>;
  run(file: string, args: readonly string[], options: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
  run(file: string, options?: RunOptions & { encoding?: BufferEncoding }): Promise<RunResult<string>>;
  run(file: string, options: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
  run(file: string, args?: readonly string[] | RunOptions, options?: RunOptions): Promise<RunResult<string | Buffer>> {
    try {
      this.#checkOpen();
      // run(file, options) is run(file, [], options), as spawn's arguments are
      // read: run's own options (input, encoding) must come from there too.
      if (args != null && typeof args === 'object' && !Array.isArray(args)) {
        options = args as RunOptions;
        args = undefined;
      }
      const resolved = resolveSpawn(file, args, options, { grace: this.#grace, jobBuffer: this.#jobBuffer, seal: this.#seal, where: 'run' });
      const call = this.#track(new ToolCall(resolved, this.#owner, resolveRun(options)));
      // A failed start is delivered as the rejection.
      call.on('error', () => {});
      return call.done;
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * The jobs: running ones, and the last finished ones (with their output)
   * until they are forgotten, in the order they became jobs. Members are
   * read from the kernel now.
   */
  jobs(): JobInfo[] {
    return this.#jobs.list().map((j) => j.info());
  }

  /** The job with this id (`c<N>`: `result.jobId`, `call.jobId`, `jobs()[i].id`); throws ERR_PROCTREE_UNKNOWN_JOB. */
  job(id: string): Job {
    if (typeof id !== 'string') throw invalidArgType('id', 'string', id);
    const job = this.#jobs.get(id);
    if (!job) {
      throw proctreeError('ERR_PROCTREE_UNKNOWN_JOB', `No job ${JSON.stringify(id)} in supervisor ${this.#name}`);
    }
    return job;
  }

  /**
   * Stops every call at once (the ladder on each, reason 'shutdown'); calls
   * still queued never start. Resolves with the reports of the calls that ran.
   * Later spawn() throws and run() rejects with ERR_PROCTREE_SUPERVISOR_CLOSED.
   */
  async shutdown(options: { grace?: number } = {}): Promise<CleanupReport[]> {
    const grace = checkGrace(options?.grace, this.#grace);
    this.#closed = true;
    this.#removeSignalHandlers();
    usedNames.delete(this.#name);
    const closed = proctreeError('ERR_PROCTREE_SUPERVISOR_CLOSED', 'The supervisor was shut down before the call started');
    for (const { call } of this.#queue.splice(0)) call[dropQueued](closed);
    const running = [...this.#calls].filter((c) => c.started);
    return ToolCall[terminateMany](running, 'shutdown', grace);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw proctreeError('ERR_PROCTREE_SUPERVISOR_CLOSED', 'The supervisor was shut down');
    }
  }

  #track(call: ToolCall): ToolCall {
    this.#calls.add(call);
    this.emit('call', call);
    return call;
  }

  #makeOwner(): CallOwner<ToolCall> {
    return {
      group: this.group,
      limits: this.#limits,
      admit: (call, start, background) => {
        if (this.#closed) {
          call[dropQueued](proctreeError('ERR_PROCTREE_SUPERVISOR_CLOSED', 'The supervisor was shut down'));
          return;
        }
        if (background) {
          // A job runs beside the calls, not in a slot: it may live for hours.
          start();
        } else if (this.#running < this.#maxConcurrent) {
          this.#takeSlot(call);
          start();
        } else {
          this.#queue.push({ call, start });
        }
      },
      dequeue: (call) => {
        const i = this.#queue.findIndex((q) => q.call === call);
        if (i >= 0) this.#queue.splice(i, 1);
      },
      release: (call) => {
        this.#calls.delete(call);
        this.#freeSlot(call);
      },
      adoptJob: (call, ring, startedAt) => {
        const job = new Job(call.jobId as string, call, ring, () => call[callPhase](), startedAt);
        this.#jobs.add(job);
        this.#freeSlot(call);
        this.emit('job', job, call);
      },
      cleanup: (call, report) => {
        this.emit('cleanup', report, call);
      },
      unhandledError: (call, err) => {
        // Like an EventEmitter with no 'error' listener: throws when nobody listens here either.
        this.emit('error', err, call);
      },
    };
  }

  #freeSlot(call: ToolCall): void {
    if (!call[callSlot](false)) return;
    this.#running--;
    while (this.#running < this.#maxConcurrent && this.#queue.length > 0) {
      const next = this.#queue.shift() as { call: ToolCall; start: () => void };
      this.#takeSlot(next.call);
      next.start();
    }
  }

  #takeSlot(call: ToolCall): void {
    if (!call[callSlot](true)) this.#running++;
  }

  #installSignalHandlers(): void {
    for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
      const handler = (): void => {
        this.#removeSignalHandlers();
        void this.shutdown().finally(() => {
          // Die of the same signal, as the harness would have without us.
          if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
        });
      };
      process.on(sig, handler);
      this.#signalHandlers.push([sig, handler]);
    }
  }

  #removeSignalHandlers(): void {
    for (const [sig, handler] of this.#signalHandlers) process.off(sig, handler);
    this.#signalHandlers = [];
  }
}

export interface Supervisor {
  on<E extends keyof SupervisorEvents>(event: E, listener: EventCallback<SupervisorEvents[E]>): this;
  once<E extends keyof SupervisorEvents>(event: E, listener: EventCallback<SupervisorEvents[E]>): this;
  off<E extends keyof SupervisorEvents>(event: E, listener: EventCallback<SupervisorEvents[E]>): this;
  emit<E extends keyof SupervisorEvents>(event: E, ...args: SupervisorEvents[E]): boolean;
}

let defaultSupervisor: Supervisor | null = null;

/** The supervisor behind the module-level spawn() and run(), created on first use. */
export function getDefaultSupervisor(): Supervisor {
  if (!defaultSupervisor) defaultSupervisor = new Supervisor({ name: 'default' });
  return defaultSupervisor;
}

/** The jobs of the default supervisor (that of the module-level spawn() and run()). */
export function jobs(): JobInfo[] {
  return getDefaultSupervisor().jobs();
}

/** A job of the default supervisor by its id; throws ERR_PROCTREE_UNKNOWN_JOB. */
export function job(id: string): Job {
  return getDefaultSupervisor().job(id);
}
