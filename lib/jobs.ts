// Jobs: calls that keep running after the harness got its answer — a dev
// server left behind by `cmd &` (leftovers: 'keep'), or a call started with
// `background: true`. The supervisor lists them, and a model reads their
// recent output and stops them later, by an id it can also see in
// `proctree ps` (the call's cgroup leaf, c<N>).
import { binding } from './binding';
import { DESCRIBE_NOW } from './call/describe';
import { checkBytes } from './options';
import { ByteTail, utf8End, utf8Start } from './output';
import type { CleanupReport, Confinement, Listener, ProcessInfo, ResourceUsage } from './types';

function ignore(): void {}

/**
 * `running`: the tree is alive; `stopping`: the ladder is on it; `exited`:
 * it emptied by itself; `stopped`: the ladder emptied it (stop(), timeout,
 * idleTimeout, abort, shutdown: `cleanup.reason` says which).
 */
export type JobState = 'running' | 'stopping' | 'exited' | 'stopped';

export interface JobInfo {
  /** `c<N>`: the call's cgroup leaf (the CALL column of `proctree ps` ends with it). */
  id: string;
  /** The command line, quoted as a shell would need it. */
  command: string;
  argv: string[];
  /** When the call started, in ms since the epoch. */
  startedAt: number;
  state: JobState;
  /** Whether the tree is paused (Job#pause()): frozen, as cgroup.events showed. */
  paused: boolean;
  /** The main process (it may have exited, leaving the rest of the tree). */
  pid: number | null;
  /** The main process's exit code and signal; null while it runs. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Live processes of the tree now, from its cgroup (0 once it is gone). */
  members: number;
  /**
   * Each of them, as /proc describes it. For a tree of more than 64, 64 are
   * read now (the main process first) and the rest are as the previous
   * info() or jobs() found them, read off the JS thread (a /proc read can
   * wait on its process, and a thousand hold a loop for tens of ms): a
   * process that started since is missing until the next call.
   */
  processes: ProcessInfo[];
  /** The call's cgroup; '' in the tiers other than `cgroup`. */
  cgroup: string;
  confinement: Confinement;
  output: {
    /** Bytes the job wrote to stdout and stderr since it started. */
    total: number;
    /** Of those, bytes the ring buffer no longer holds (the oldest). */
    dropped: number;
    /** The ring buffer's size. */
    capacity: number;
  };
  /** The ladder's report once one ran. */
  cleanup: CleanupReport | null;
  /** What the tree used, once it is gone. */
  usage: ResourceUsage | null;
  /**
   * What the tree listened on when it was last read, at `listenersAt`
   * (see ToolCall#ports()): jobs() is synchronous, so the kernel is asked
   * off the JS thread, when the job is made, at every jobs() and at every
   * `job.ports()`. `await job(id).ports()` for the answer of now. [] once
   * the tree is gone.
   */
  listeners: Listener[];
  /** When `listeners` was read (ms since the epoch); null before the first answer. */
  listenersAt: number | null;
}

/** A piece of a job's output (stdout and stderr merged in arrival order). */
export interface JobOutput {
  /** The bytes as UTF-8 text; never starts or ends inside a character. */
  text: string;
  /** Offset of the first byte of `text` in the job's output. */
  from: number;
  /** Offset to read from next time: just past `text`. */
  next: number;
  /** Bytes between the offset asked for and `from` that the ring buffer no longer holds. */
  dropped: number;
  /** Bytes the job has written so far. */
  total: number;
}

/** What a job needs of its call. @internal */
export interface JobCall {
  readonly pid: number | undefined;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  readonly cgroup: string | null;
  readonly confinement: Confinement;
  readonly spawnargs: string[];
  readonly cleanupReport: CleanupReport | null;
  readonly usage: ResourceUsage | null;
  members(): number[];
  ports(): Promise<Listener[]>;
  terminate(options?: { grace?: number }): Promise<CleanupReport>;
  pause(): Promise<void>;
  resume(): Promise<void>;
  readonly paused: boolean;
  once(event: 'close', listener: () => void): unknown;
}

/** Phases of a call that a job's state is made of. @internal */
export interface CallPhase {
  /** The ladder was asked for and has not reported yet. */
  stopping: boolean;
  /** The tree is gone (verified empty). */
  empty: boolean;
  /** Empty and stdio drained: nothing more can come. */
  closed: boolean;
}

/** Quotes a word for a POSIX shell, only when it needs it. */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

export class Job {
  readonly id: string;
  readonly #call: JobCall;
  readonly #ring: ByteTail;
  readonly #phase: () => CallPhase;
  readonly #startedAt: number;
  readonly #closed: Promise<void>;
  #listeners: Listener[] = [];
  #listenersAt: number | null = null;
  /** A big tree's processes as last read off the JS thread (#describe). */
  #described: ProcessInfo[] = [];
  #describing = false;
  /** A read of the listeners is on its way. */
  #reading: Promise<Listener[]> | null = null;

  /** @internal the supervisor makes jobs */
  constructor(id: string, call: JobCall, ring: ByteTail, phase: () => CallPhase, startedAt: number) {
    this.id = id;
    this.#call = call;
    this.#ring = ring;
    this.#phase = phase;
    this.#startedAt = startedAt;
    this.#closed = phase().closed ? Promise.resolve() : new Promise((resolve) => call.once('close', () => resolve()));
    this.#refreshListeners().catch(ignore);
  }

  /**
   * What /proc says of the tree's processes: all of them now for a small
   * tree; for a big one, DESCRIBE_NOW now (the main process first), the rest
   * from the last read off this thread, and a new read on its way.
   */
  #describe(pids: number[]): ProcessInfo[] {
    const ask = binding.describe?.bind(binding);
    // The portable binding reads one table for all (ps): no thread to ask.
    if (pids.length <= DESCRIBE_NOW || !ask) return pids.length > 0 ? binding.processInfo(pids) : [];
    const main = this.#call.pid;
    const first = main !== undefined && pids.includes(main) ? [main, ...pids.filter((p) => p !== main)] : pids;
    const now = binding.processInfo(first.slice(0, DESCRIBE_NOW));
    const seen = new Set(now.map((p) => p.pid));
    const live = new Set(pids);
    const earlier = this.#described.filter((p) => live.has(p.pid) && !seen.has(p.pid));
    if (!this.#describing) {
      this.#describing = true;
      try {
        ask(pids, (err, infos) => {
          this.#describing = false;
          if (!err && infos) this.#described = infos;
        });
      } catch {
        this.#describing = false;
      }
    }
    return [...now, ...earlier];
  }

  /** Asks the kernel what the tree listens on (once at a time); the answer is kept for info(). */
  #refreshListeners(): Promise<Listener[]> {
    if (this.#reading) return this.#reading;
    const reading = this.#call.ports().then((list) => {
      this.#listeners = list;
      this.#listenersAt = Date.now();
      return list;
    });
    const done = (): void => {
      if (this.#reading === reading) this.#reading = null;
    };
    reading.then(done, done);
    this.#reading = reading;
    return reading;
  }

  get state(): JobState {
    const phase = this.#phase();
    if (this.#call.cleanupReport) return 'stopped';
    if (phase.empty || phase.closed) return 'exited';
    return phase.stopping ? 'stopping' : 'running';
  }

  /** The job now: state, members read from the kernel, output counters. */
  info(): JobInfo {
    const call = this.#call;
    const pids = call.members();
    const processes = this.#describe(pids);
    const info: JobInfo = {
      id: this.id,
      command: call.spawnargs.map(shellQuote).join(' '),
      argv: [...call.spawnargs],
      startedAt: this.#startedAt,
      state: this.state,
      paused: call.paused,
      pid: call.pid ?? null,
      exitCode: call.exitCode,
      signal: call.signalCode,
      members: pids.length > DESCRIBE_NOW ? pids.length : processes.length,
      processes,
      cgroup: call.cgroup ?? '',
      confinement: call.confinement,
      output: { total: this.#ring.total, dropped: this.#ring.start, capacity: this.#ring.capacity },
      cleanup: call.cleanupReport,
      usage: call.usage,
      // Once the tree is gone nothing listens, whenever it was last read.
      listeners: processes.length > 0 ? [...this.#listeners] : [],
      listenersAt: this.#listenersAt,
    };
    if (processes.length > 0) this.#refreshListeners().catch(ignore);
    return info;
  }

  /**
   * The output from byte offset `fromOffset` (default 0: the oldest byte
   * still held) up to now, at most `maxBytes`. Pass `next` back to read
   * only what came since; `dropped` says how much was lost in between.
   */
  read(fromOffset = 0, options: { maxBytes?: number } = {}): JobOutput {
    const from = checkBytes(fromOffset, 'fromOffset', 0);
    const max = checkBytes(options?.maxBytes, 'options.maxBytes', Infinity);
    return this.#slice(Math.min(from, this.#ring.total), max);
  }

  /** The last `bytes` bytes of output (default 4096), or fewer to keep characters whole. */
  tail(bytes = 4096): JobOutput {
    const n = checkBytes(bytes, 'bytes', 4096);
    return this.#slice(Math.max(0, this.#ring.total - n), n);
  }

  #slice(wanted: number, max: number): JobOutput {
    const ring = this.#ring;
    const lo = Math.max(wanted, ring.start);
    const hi = Math.min(ring.total, lo + max);
    const buf = ring.slice(lo, hi);
    const start = utf8Start(buf);
    // A character still being written is left for the next read, unless
    // nothing more can come.
    const end = hi < ring.total || !this.#phase().closed ? Math.max(start, utf8End(buf)) : buf.length;
    return {
      text: buf.subarray(start, end).toString('utf8'),
      from: lo + start,
      next: lo + end,
      dropped: lo + start - wanted,
      total: ring.total,
    };
  }

  /** What the job's tree listens on now (see ToolCall#ports()); [] once it is gone. */
  ports(): Promise<Listener[]> {
    // A fresh read, also kept for info() (not one already on its way: it may have asked before a bind).
    this.#reading = null;
    return this.#refreshListeners();
  }

  /**
   * Freezes the whole tree until resume() (see ToolCall#pause()): settles
   * once cgroup.events shows `frozen 1`. stop() still works on a paused job.
   */
  pause(): Promise<void> {
    return this.#call.pause();
  }

  /** Thaws what pause() froze; settles once cgroup.events shows `frozen 0`. */
  resume(): Promise<void> {
    return this.#call.resume();
  }

  /** Whether the tree is paused now. */
  get paused(): boolean {
    return this.#call.paused;
  }

  /** Stops the whole tree (the ladder); the job's report. Idempotent. */
  stop(options: { grace?: number } = {}): Promise<CleanupReport> {
    return this.#call.terminate(options);
  }

  /** Settles once the tree is gone (and its output drained), with the job's final info. */
  async wait(): Promise<JobInfo> {
    await this.#closed;
    return this.info();
  }
}

/** Finished jobs a supervisor keeps listing (with their output), the oldest forgotten first. */
export const FINISHED_JOBS_KEPT = 64;

/** A supervisor's jobs, in the order they became jobs. */
export class JobRegistry {
  readonly #jobs = new Map<string, Job>();
  readonly #finished: string[] = [];

  add(job: Job): void {
    this.#jobs.set(job.id, job);
    void job.wait().then(() => {
      this.#finished.push(job.id);
      while (this.#finished.length > FINISHED_JOBS_KEPT) this.#jobs.delete(this.#finished.shift() as string);
    });
  }

  get(id: string): Job | undefined {
    return this.#jobs.get(id);
  }

  list(): Job[] {
    return [...this.#jobs.values()];
  }
}
