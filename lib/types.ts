// The public types: read these as the documentation of the API.

/**
 * How a call is confined, strongest first (see docs/tiers.md):
 * - `cgroup`: its own cgroup v2 leaf; escape-proof, race-free kill (cgroup.kill).
 * - `systemd`: its own cgroup v2 leaf in a transient scope a systemd user
 *   manager delegated (where the harness cannot write its own cgroup: an SSH
 *   session, a CI runner service); the same guarantees as `cgroup`.
 * - `pidns`: a new PID namespace whose init is a proctree shim; escape-proof,
 *   race-free kill (the kernel kills the namespace when its init dies).
 * - `subreaper`: a shim with PR_SET_CHILD_SUBREAPER; catches every descendant
 *   that stays below the shim, killed by re-walking until none is left.
 * - `pgroup`: a new session, signalled member by member; a descendant that
 *   calls setsid() is invisible to it. The baseline, used only when nothing
 *   above works. Off Linux (the portable binding, see README "Off Linux"):
 *   a new session and process group, signalled through the group and
 *   through the descendants the process table shows.
 * - `none`: only with the portable binding (Windows, or on request): the
 *   main process and its descendants as the process table shows them, each
 *   signalled by pid; no group, nothing confined.
 */
export type Confinement = 'cgroup' | 'systemd' | 'pidns' | 'subreaper' | 'pgroup' | 'none';

/** How a CleanupReport proved the tree empty. */
export type Verification = 'cgroup.events' | 'pidns' | 'subreaper' | 'none';

/** What a call's stdio stream is connected to. */
export type StdioKind = 'pipe' | 'ignore' | 'inherit';
/**
 * One entry of `stdio`: a kind, `'overlapped'` (= `'pipe'` on Linux), a file
 * descriptor of the harness, or a stream that has one (a file stream, a
 * socket, another call's pipe); null/undefined = `'pipe'` for 0–2, `'ignore'` above.
 */
export type StdioOption = StdioKind | 'overlapped' | number | import('node:stream').Stream | null | undefined;

export interface SpawnOptions {
  /** Working directory of the command. Default: the harness's. */
  cwd?: string | URL | Buffer;
  /**
   * Environment of the command. Default: `process.env`. Read with for…in as
   * Node does (inherited keys included); keys and values must not hold NUL bytes.
   */
  env?: Readonly<Record<string, string | number | boolean | null | undefined>>;
  /** argv[0] as the command sees it. Default: `file`. */
  argv0?: string;
  /** Run through a shell: `true` for `/bin/sh`, or a shell's path. Default: false, no shell. */
  shell?: boolean | string;
  /**
   * One kind for all three streams, or one entry per fd: stdin, stdout,
   * stderr, then fd 3, 4, … (extra `'pipe'` entries are read by the harness
   * as `call.stdio[n]`). `'ipc'` is not supported (ERR_PROCTREE_IPC_UNSUPPORTED).
   * Default: `'pipe'`.
   */
  stdio?: StdioKind | 'overlapped' | readonly StdioOption[];
  /** Stop the whole tree after this many ms (the ladder, reason `'timeout'`). 0 = never. Default: 0. */
  timeout?: number;
  /** ms from the graceful signal to SIGKILL. Default: 2000. */
  grace?: number;
  /** The graceful signal of the ladder. Default: `'SIGTERM'`. */
  killSignal?: NodeJS.Signals | number;
  /** Aborting it stops the whole tree (reason `'abort'`). */
  signal?: AbortSignal;
  /**
   * When the main process exits and descendants remain: `'kill'` runs the
   * ladder on them (reason `'leftovers'`); `'wait'` keeps the call open until
   * the tree empties by itself; `'keep'` makes what remains a job of the
   * supervisor (`call.jobId`; run() and `done` settle then, with `jobId` and
   * `remaining`). Default: `'kill'`.
   */
  leftovers?: 'kill' | 'wait' | 'keep';
  /**
   * `'auto'` = the strongest tier this host allows (capabilities().tier); a
   * tier = that one or throw ConfinementUnavailableError
   * (ERR_PROCTREE_CONFINEMENT_UNAVAILABLE) naming the probe that failed.
   * Default: `'auto'`.
   */
  confinement?: 'auto' | Confinement;
  /**
   * Seal the call (README "Sealed calls"): its cgroup leaf is the root of
   * new user, PID, mount and cgroup namespaces, with a /proc and
   * /sys/fs/cgroup of its own and no capability, so it cannot move out of
   * its leaf, see or signal a process outside it, or reach another cgroup.
   * Needs the cgroup tier and unprivileged user namespaces
   * (capabilities().seal); where it cannot be had the call does not run:
   * 'error' (or run()'s rejection) with ERR_PROCTREE_SEAL_UNAVAILABLE.
   * Default: false (or the supervisor's `seal`).
   */
  seal?: boolean;
  /** Run the command as this user id (needs privilege; an int32 as in Node). */
  uid?: number;
  /** Run the command as this group id (needs privilege); supplementary groups are dropped. */
  gid?: number;
  /**
   * Accepted for child_process compatibility. Every call already leads a
   * session of its own (but in the portable `none` tier); unlike Node, a
   * detached call is still stopped when the harness exits (use unref() to
   * let the harness exit first).
   */
  detached?: boolean;
  /** Accepted for child_process compatibility; no effect on Linux. On Windows (portable) consoles are always hidden. */
  windowsHide?: boolean;
  /** Accepted for child_process compatibility; no effect on Linux. On Windows (portable), as Node's option. */
  windowsVerbatimArguments?: boolean;
  /** Accepted for child_process compatibility (`'json'` or `'advanced'`); without IPC it has no effect. */
  serialization?: 'json' | 'advanced';
  /**
   * Run on a pseudo-terminal of its own: fds 0–2 are its slave and its
   * controlling terminal (a new session), the harness gets the master as
   * `call.pty`. `true` = 80×24, TERM=xterm-256color. `stdio` may then only
   * name fds 3 and above. Default: no terminal.
   */
  pty?: boolean | PtyOptions;
  /**
   * What the call's whole tree may use at most: `{ memoryBytes?, pids?, cpu? }`
   * (memory.max with memory.swap.max 0, pids.max, cpu.max of its cgroup
   * leaf, set before the command runs). The verdicts are `result.oomKilled`
   * and `result.pidsLimited`. Where a limit cannot be enforced (a tier
   * other than `cgroup`, a controller not available to the harness's
   * cgroup) the call does not run: 'error' (run() rejects) with
   * ERR_PROCTREE_LIMITS_UNAVAILABLE naming the controller and the fix.
   * Default: none (the supervisor's total still applies).
   */
  limits?: Limits;
}

export interface PtyOptions {
  /** Columns of the window. Default: 80. */
  cols?: number;
  /** Rows of the window. Default: 24. */
  rows?: number;
  /** TERM in the command's environment (replacing an inherited one). Default: `'xterm-256color'`. */
  term?: string;
  /** Decode `call.pty`'s 'data' as text in this encoding. Default: Buffers. (run() uses its own `encoding`.) */
  encoding?: BufferEncoding;
}

// Output and job options: spawn() reads them too (they shape `call.done`, `call.all`, lines()).
export interface SpawnOptions extends OutputOptions, JobOptions {}

export interface RunOptions extends SpawnOptions {
  /**
   * Written to stdin, which is then closed. With `pty`: typed on the
   * terminal, then the end-of-file character (^D) at the start of a line.
   */
  input?: string | Uint8Array;
  /** Decode stdout/stderr as text (default `'utf8'`), or `'buffer'` for Buffers. */
  encoding?: BufferEncoding | 'buffer';
}

/** One process, as /proc described it. */
export interface ProcessInfo {
  pid: number;
  ppid: number;
  pgid: number;
  sid: number;
  comm: string;
  cmdline: string;
  /** When it started, in clock ticks after boot: with pid, names the process across pid reuse. */
  startTime: number;
}

/**
 * Why the ladder ran; `'idle'`: `idleTimeout` ms passed without output;
 * `'not-ready'`: `ready.timeout` ms passed before the `ready` condition held.
 */
export type CleanupReason = 'timeout' | 'idle' | 'abort' | 'terminate' | 'leftovers' | 'shutdown' | 'not-ready';

/** What stopping a tree took, as the kernel saw it. */
export interface CleanupReport {
  reason: CleanupReason;
  confinement: Confinement;
  /**
   * Processes that got the graceful signal, each exactly once. A harness
   * that is not root cannot signal a process of another user (what `sudo`
   * starts): it is not counted here, and the kill after `grace` ends it.
   */
  signaled: number;
  /** Processes still alive when `grace` ran out, killed with SIGKILL (those of other users too). */
  killed: number;
  /** Processes that had left the main process's group or session: what killpg would have missed. */
  escaped: number;
  /**
   * Alive after the whole ladder, as /proc describes them (read on a thread
   * of the addon's: one that outlived SIGKILL may be stuck in the kernel).
   * Non-empty is a failure, also emitted as `'error'`.
   */
  leftovers: ProcessInfo[];
  /**
   * How emptiness was proved: `cgroup.events` (populated 0), `pidns` (the
   * namespace's init was reaped, which the kernel allows only once every
   * process of the namespace is gone), `subreaper` (the shim had no child
   * left), `none` (pgroup and none: nothing visible is left, escapees are not visible).
   */
  verified: Verification;
  durationMs: number;
  /**
   * Sockets made in the call's tree that still listen with the tree gone:
   * a process outside it holds them (a socket handed over a unix socket, for
   * example), so their ports are not free. Checked for calls that listened
   * (jobs, `ready`, or `ports()` asked), and only where the kernel files
   * sockets by cgroup (the cgroup tiers, Linux 5.8+); absent when none.
   */
  heldOutside?: Listener[];
}

export interface RunResult<T extends string | Buffer = string> {
  /** Exit code of the main process, or null when a signal ended it. */
  exitCode: number | null;
  /** Signal that ended the main process, or null. */
  signal: NodeJS.Signals | null;
  /** With `pty`: everything the terminal showed (stdout and stderr as one stream, `\r\n` line ends); stderr is then empty. */
  stdout: T;
  stderr: T;
  /** stdout and stderr merged in the order they arrived; only with `all: true`. */
  all?: T;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** Bytes of stdout not in `stdout` (past `maxBuffer`, or left out not to cut a character); 0 when complete. */
  stdoutOmitted: number;
  stderrOmitted: number;
  /** Bytes of the merged output not in `all`; only with `all: true`. */
  allOmitted?: number;
  /** The call was stopped because `timeout` ran out. */
  timedOut: boolean;
  /** The call was stopped because `signal` was aborted. */
  aborted: boolean;
  /** From the process start to the tree being empty and stdio drained. */
  durationMs: number;
  /** Time spent waiting for a slot of the supervisor's `maxConcurrent`. */
  queuedMs: number;
  /** The ladder's report when one ran (timeout, abort, terminate, leftovers), else null. */
  cleanup: CleanupReport | null;
  pid: number;
  /** The call's cgroup; '' for the tiers other than `cgroup`. */
  cgroup: string;
  confinement: Confinement;
  /**
   * What the whole tree used. When the result comes before the tree is
   * empty (a job), what it used so far as far as the tier can tell then
   * (`cgroup`: cpu.stat now; the others: `source: 'none'`); `job(id).wait()`
   * gives the final figures.
   */
  usage: ResourceUsage;
  /** The call's job id when it is a job (`background`, or `leftovers: 'keep'` with processes left), else null. */
  jobId: string | null;
  /** With `leftovers: 'keep'`: the processes still running when the result came (they are the job); else []. */
  remaining: ProcessInfo[];
  /**
   * The kernel's OOM killer killed a process of the tree (memory.events
   * `oom_kill` of the call's leaf grew while it ran): past `limits.memoryBytes`,
   * the supervisor's, or the machine's memory. False where the memory
   * controller is not there to tell.
   */
  oomKilled: boolean;
  /**
   * A fork of the tree was refused at a pids limit (pids.events `max` of the
   * call's leaf grew): `limits.pids`, or the supervisor's. False where the
   * pids controller is not there to tell.
   */
  pidsLimited: boolean;
  /**
   * With the `ready` option: what made the call ready (the listeners seen,
   * the output matched, when), or null when it never was (the tree ended
   * first, or `ready.timeout` stopped it: `cleanup.reason` is `'not-ready'`).
   * Absent without the option.
   */
  ready?: ReadyState | null;
}

/**
 * What a whole tree used, escapees included as far as the tier sees them:
 * `cgroup` reads cpu.stat of the call's cgroup (every process that was ever
 * in it) and memory.peak where the memory controller is delegated;
 * `pidns`/`subreaper` count what the shim reaped (the whole tree, orphans
 * included); `pgroup` counts the main process and the children it waited
 * for (`source: 'rusage'` for these three). `source: 'none'`: the CPU times
 * are not known (0).
 */
export interface ResourceUsage {
  /** CPU time in user mode, ms. */
  userMs: number;
  /** CPU time in the kernel, ms. */
  systemMs: number;
  /** The most processes seen in the tree at once (by members(), jobs() and the ladder's reads). */
  peakProcesses: number;
  /**
   * memory.peak of the call's cgroup, bytes (Linux 5.19+); only where the
   * memory controller is delegated, and — in a leaf an earlier call used —
   * only when it grew past that call's (the kernel keeps one peak per cgroup).
   */
  memoryPeakBytes?: number;
  /** pids.peak of the call's cgroup (Linux 6.1+): the most processes at once, counted by the kernel; the same rules. */
  pidsPeak?: number;
  source: 'cgroup' | 'rusage' | 'none';
}

/** How output is collected for `run()`, `call.done` and `call.all`, and streamed. */
export interface OutputOptions {
  /**
   * Bytes kept per stream (and for `all`), counted in bytes; the command is
   * never stopped for it. Past it, `keep` says which part stays and
   * `<stream>Truncated`/`<stream>Omitted` say what is missing. Default: 64 MiB.
   */
  maxBuffer?: number;
  /**
   * Which part of a longer output is kept: `'head'` (the first bytes),
   * `'tail'` (the last), `'both'` (half each, the omitted middle counted).
   * In text, a character is never cut: one that straddles the limit is left
   * out whole. Default: `'head'`.
   */
  keep?: 'head' | 'tail' | 'both';
  /**
   * Put where bytes were omitted: `true` for `\n[... N bytes omitted ...]\n`,
   * or a text in which `{omitted}` is the count. Not counted in `maxBuffer`.
   * Default: none.
   */
  marker?: boolean | string;
  /** Also collect stdout and stderr merged in arrival order: `result.all`, `call.all`. Default: false. */
  all?: boolean;
  /** Called with every chunk of stdout and stderr as it arrives, in arrival order. */
  onOutput?: (chunk: Buffer, stream: 'stdout' | 'stderr') => void;
  /**
   * Stop the whole tree (the ladder, reason `'idle'`) after this many ms
   * without any output on stdout or stderr: a command waiting for input that
   * will never come. 0 = never. Default: 0.
   */
  idleTimeout?: number;
}

/** How a call becomes a job of its supervisor. */
export interface JobOptions {
  /**
   * The call is a job from the start: spawn() returns it with `jobId` set,
   * run() settles at once (at `'spawn'`). It does not wait for a
   * `maxConcurrent` slot. Default: false.
   */
  background?: boolean;
  /**
   * With `background: true` or `leftovers: 'keep'`: when the job counts as
   * started. run() settles (and 'ready' is emitted) once the tree listens
   * (`listening: true`: on anything; a number: on that TCP or UDP port)
   * and/or its output matches `output`; `result.ready` says what was seen.
   * Past `timeout` ms first, the ladder stops the tree (`cleanup.reason`
   * `'not-ready'`) and run() settles with the output so far.
   */
  ready?: ReadyOptions;
  /** Bytes of a job's output (stdout and stderr merged) kept in its ring buffer. Default: the supervisor's (1 MiB). */
  jobBuffer?: number;
}

/** How a {@link Listener} is reached. */
export type ListenerProtocol = 'tcp' | 'udp' | 'unix';

/**
 * One socket a process of a call's tree listens on: a listening TCP socket
 * (IPv4 or IPv6), a bound unconnected UDP socket, or a listening unix
 * stream socket. Only sockets of the call's own tree appear (escaped and
 * daemonized members included); the harness's sockets and unrelated
 * processes' never do.
 */
export interface Listener {
  protocol: ListenerProtocol;
  /**
   * tcp and udp: the local address, as `net.Server#address()` prints it
   * (`'127.0.0.1'`, `'0.0.0.0'`, `'::'`, `'::1'`, `'::ffff:127.0.0.1'`).
   * unix: the socket's path, or `'@'` and the name for an abstract socket
   * (a NUL inside the name shows as `'@'`, as `ss` shows it).
   */
  address: string;
  /** tcp and udp: the local port. Absent for unix sockets. */
  port?: number;
  /**
   * The member process holding the socket (the lowest pid when several
   * share it, as a server's forked workers do). Absent when no member holds
   * it any more, e.g. after handing it to another process.
   */
  pid?: number;
}

/** The `ready` option of a call: when a server counts as started. */
export interface ReadyOptions {
  /**
   * `true`: ready once any process of the tree listens on anything;
   * a number: once something of the tree listens on that TCP or UDP port.
   */
  listening?: true | number;
  /** Ready once the output (stdout or stderr) contains this text, or matches this expression. */
  output?: string | RegExp;
  /** How long to wait, in milliseconds, before the call fails as not ready. */
  timeout?: number;
}

/** What made a call ready (`result.ready`, the 'ready' event). */
export interface ReadyState {
  /** What the tree listened on when it was ready ([] when only `output` was asked for and nothing listened). */
  listening: Listener[];
  /** With `ready.output`: the text that matched (the string, or the RegExp's match). */
  output?: string;
  /** ms from the call's start to ready. */
  afterMs: number;
}

/** The events of a ToolCall, with what each carries. */
/**
 * A listener of an event that carries `Args`. It may declare more
 * parameters than that (they are undefined), as a Promise's resolve does:
 * `new Promise((resolve) => call.once('spawn', resolve))` compiles, as it
 * does against Node's ChildProcess.
 */
export type EventCallback<Args extends unknown[]> = (...args: [...Args, ...undefined[]]) => void;

export interface ToolCallEvents {
  spawn: [];
  exit: [code: number | null, signal: NodeJS.Signals | null];
  leftover: [processes: ProcessInfo[]];
  cleanup: [report: CleanupReport];
  empty: [];
  close: [code: number | null, signal: NodeJS.Signals | null];
  error: [err: Error];
  /** options.ready held: what was seen (also `result.ready`). */
  ready: [state: ReadyState];
}

/** What a call's tree (or, on a Supervisor, all of its calls together) may use at most. */
export interface Limits {
  /**
   * Bytes of memory (memory.max, with memory.swap.max 0 so that it is not
   * dodged by swapping): past it the kernel reclaims, then OOM-kills a
   * member (`result.oomKilled`). At least 1 MiB.
   */
  memoryBytes?: number;
  /** Processes and threads at once (pids.max): a fork past it fails with EAGAIN (`result.pidsLimited`). At least 1. */
  pids?: number;
  /** CPUs' worth of time (cpu.max over a 100 ms period): 0.5 is half a CPU, 2 two CPUs. At least 0.01. */
  cpu?: number;
}
