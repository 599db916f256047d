// Validation at the boundary, in the order and with the codes of Node 20's
// child_process.spawn: bad input throws synchronously, before anything is
// created; options are read as Node reads them (own properties only, except
// `env`, which is walked with for…in as Node does).
import { isMainThread } from 'node:worker_threads';

import { binding, portable } from '../binding';
import { invalidArgType, invalidArgValue, outOfRange, proctreeError } from '../errors';
import { resolveLimits } from '../limits';
import type { NativeLimits } from '../binding/contract';
import { DEFAULT_MARKER, DEFAULT_MAX_BUFFER, type Keep, type OutputSettings, UNREAD_MAX_BUFFER } from '../output';
import { type ResolvedReady, resolveReady } from '../ports';
import { tiers } from '../tiers';
import type { Confinement, RunOptions, SpawnOptions } from '../types';
import { checkStdio, ptyStdio, resolvePty, type ResolvedPty, type StdioEntry, withTerm } from './stdio';
import { checkBoolean, checkBytes, checkCwd, checkMs, envPairs, isInt32, killSignalNumber, nullCheck, toArg } from './values';

export type { StdioEntry } from './stdio';
export { checkBoolean, checkBytes, checkGrace, signalName, signalNumber } from './values';

export interface ResolvedSpawn {
  file: string;
  /** argv as the command sees it, argv[0] included; also what Node calls spawnargs. */
  argv: string[];
  /** null: the harness's own environment, passed by the addon without a copy (main thread). */
  env: string[] | null;
  cwd: string | undefined;
  stdio: StdioEntry[];
  timeout: number;
  grace: number;
  killSignal: number;
  signal: AbortSignal | undefined;
  leftovers: 'kill' | 'wait' | 'keep';
  /** A job from the start. */
  background: boolean;
  /** When a job counts as started (options.ready), or null. */
  ready: ResolvedReady | null;
  /** ms without output before the ladder (reason 'idle'); 0 = never. */
  idleTimeout: number;
  output: OutputSettings;
  /** Capacity of the job's ring buffer, in bytes. */
  jobBuffer: number;
  uid: number | undefined;
  gid: number | undefined;
  confinement: 'auto' | Confinement;
  detached: boolean;
  /** Windows only (the portable binding): the arguments go to the command unquoted, as Node's option. */
  windowsVerbatimArguments: boolean;
  /** A terminal for fds 0–2 (options.pty), or none. */
  pty: ResolvedPty | undefined;
  /** What the call's tree may use at most (options.limits), or null. */
  limits: NativeLimits | null;
  /** A sealed call (options.seal, or the supervisor's default). */
  seal: boolean;
}

/** What options.confinement accepts: 'auto' and every tier. */
const confinements: ReadonlyArray<'auto' | Confinement> = ['auto', ...tiers];
// Options spawn() reads: Node's own, proctree's, and run()'s (which spawn()
// ignores, as Node's spawn ignores exec's `encoding` and `maxBuffer`).
const nodeOptions = [
  'cwd', 'env', 'argv0', 'stdio', 'detached', 'uid', 'gid', 'serialization', 'shell',
  'windowsVerbatimArguments', 'windowsHide', 'signal', 'timeout', 'killSignal',
];
const proctreeOptions = [
  'grace', 'leftovers', 'confinement', 'background', 'ready', 'jobBuffer',
  'maxBuffer', 'keep', 'marker', 'all', 'onOutput', 'idleTimeout', 'pty', 'limits', 'seal',
];
const runOptions = ['input', 'encoding'];
const knownOptions = new Set([...nodeOptions, ...proctreeOptions, ...runOptions]);
// Options of a library that hands its whole options object to spawn() (execa,
// when child_process.spawn is replaced by proctree's): its own, not a
// misspelling of ours, so not reported (Node's spawn ignores them too).
const passedThrough = new Set([
  'buffer', 'cancelSignal', 'cleanup', 'extendEnv', 'forceKillAfterDelay', 'gracefulCancel', 'inputFile', 'ipc',
  'ipcInput', 'lines', 'localDir', 'localDirectory', 'node', 'nodeOptions', 'nodePath', 'piped', 'preferLocal',
  'reject', 'stderr', 'stdin', 'stdout', 'stripFinalNewline', 'timeoutDuration', 'verbose',
]);
const warned = new Set<string>();

/**
 * The caller's options, copied: every known option an own field from the
 * start (undefined when not given), so a polluted Object.prototype cannot
 * reach them and every call reads them through one object shape. (A
 * `{ __proto__: null, ...options }` copy, as Node makes, is a dictionary
 * whose every read is a hash lookup.)
 */
class OwnOptions {
  cwd: unknown = undefined;
  env: unknown = undefined;
  argv0: unknown = undefined;
  stdio: unknown = undefined;
  detached: unknown = undefined;
  uid: unknown = undefined;
  gid: unknown = undefined;
  serialization: unknown = undefined;
  shell: unknown = undefined;
  windowsVerbatimArguments: unknown = undefined;
  windowsHide: unknown = undefined;
  signal: unknown = undefined;
  timeout: unknown = undefined;
  killSignal: unknown = undefined;
  grace: unknown = undefined;
  leftovers: unknown = undefined;
  confinement: unknown = undefined;
  background: unknown = undefined;
  ready: unknown = undefined;
  jobBuffer: unknown = undefined;
  maxBuffer: unknown = undefined;
  keep: unknown = undefined;
  marker: unknown = undefined;
  all: unknown = undefined;
  onOutput: unknown = undefined;
  idleTimeout: unknown = undefined;
  pty: unknown = undefined;
  limits: unknown = undefined;
  seal: unknown = undefined;
  input: unknown = undefined;
  encoding: unknown = undefined;
  /** Own keys that are no option, in the caller's order (null: none). */
  unknownKeys: string[] | null = null;
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const next = Math.min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1].toLowerCase() === b[j - 1].toLowerCase() ? 0 : 1));
      prev = row[j];
      row[j] = next;
    }
  }
  return row[b.length];
}

/**
 * Options nobody reads are reported, once per name and process, instead of
 * being dropped silently (a misspelled `maxBufer` would otherwise look like
 * it worked).
 */
function warnUnknownKeys(keys: readonly string[], where: string): void {
  for (const key of keys) {
    if (knownOptions.has(key) || passedThrough.has(key) || warned.has(key)) continue;
    warned.add(key);
    const near = [...knownOptions].find((k) => distance(k, key) <= 2);
    process.emitWarning(
      `proctree: ${where}() ignores the unknown option "${key}"${near ? ` (did you mean "${near}"?)` : ''}`,
      { code: 'PROCTREE_UNKNOWN_OPTION' },
    );
  }
}

// Node's normalizeSpawnArguments: which argument is which, and a copy of
// the options' own properties (a polluted Object.prototype cannot reach them).
// Reads the caller's options once, in the order and with the reads of an
// object spread (own enumerable string keys, each getter called once).
function copyOptions(options: object | undefined): OwnOptions {
  const own = new OwnOptions();
  if (options === undefined) return own;
  const target = own as unknown as Record<string, unknown>;
  const keys = Object.keys(options);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const value = (options as Record<string, unknown>)[key];
    if (knownOptions.has(key)) target[key] = value;
    else (own.unknownKeys ??= []).push(key);
  }
  return own;
}

function normalize(fileArg: unknown, argsArg: unknown, optionsArg: unknown): { file: string; args: string[]; opts: OwnOptions } {
  if (typeof fileArg !== 'string') throw invalidArgType('file', 'string', fileArg);
  nullCheck(fileArg, 'file');
  if (fileArg.length === 0) throw invalidArgValue('file', fileArg, 'cannot be empty');
  let raw: ArrayLike<unknown> | null = null;
  let options = optionsArg;
  if (Array.isArray(argsArg)) {
    raw = argsArg as unknown[];
  } else if (argsArg == null) {
    // no arguments
  } else if (typeof argsArg !== 'object') {
    throw invalidArgType('args', 'object', argsArg);
  } else {
    options = argsArg;
  }
  if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
    throw invalidArgType('options', 'Object', options);
  }
  // The order of the reads a caller could observe (getters, toString): the
  // arguments copied (holes read as undefined), the options copied, then
  // each argument converted.
  const copy = raw === null ? null : Array.from(raw);
  const opts = copyOptions(options as object | undefined);
  const args: string[] = [];
  if (copy !== null) for (let i = 0; i < copy.length; i++) args.push(toArg(copy[i], i));
  return { file: fileArg, args, opts };
}

/** What the caller of resolveSpawn supplies: the supervisor's default grace, and its name in warnings. */
export interface SpawnDefaults {
  grace?: number;
  where?: 'spawn' | 'run';
  jobBuffer?: number;
  /** The supervisor's `seal`: its calls' default. */
  seal?: boolean;
}

export function resolveSpawn(fileArg: unknown, argsArg: unknown, optionsArg: unknown, defaults: SpawnDefaults = {}): ResolvedSpawn {
  const { file: file0, args: args0, opts: own } = normalize(fileArg, argsArg, optionsArg);
  const opts = own as unknown as SpawnOptions & Record<string, unknown>;

  const cwd = opts.cwd != null ? checkCwd(opts.cwd) : undefined;
  const detached = checkBoolean(opts.detached, 'options.detached');
  if (opts.uid != null && !isInt32(opts.uid)) throw invalidArgType('options.uid', 'int32', opts.uid);
  if (opts.gid != null && !isInt32(opts.gid)) throw invalidArgType('options.gid', 'int32', opts.gid);
  const shell = opts.shell as unknown;
  if (shell != null && typeof shell !== 'boolean' && typeof shell !== 'string') {
    throw invalidArgType('options.shell', ['boolean', 'string'], shell);
  }
  if (opts.argv0 != null) {
    if (typeof opts.argv0 !== 'string') throw invalidArgType('options.argv0', 'string', opts.argv0);
    nullCheck(opts.argv0, 'options.argv0');
  }
  checkBoolean(opts.windowsHide, 'options.windowsHide');
  let windowsVerbatimArguments = checkBoolean(opts.windowsVerbatimArguments, 'options.windowsVerbatimArguments');

  let file = file0;
  let args = args0;
  if (shell) {
    nullCheck(shell, 'options.shell');
    const command = [file0, ...args0].join(' ');
    if (process.platform === 'win32') {
      // Node's choice on Windows (the portable binding): cmd.exe, its switches, the command quoted whole.
      file = typeof shell === 'string' ? shell : process.env.comspec || 'cmd.exe';
      if (/^(?:.*\\)?cmd(?:\.exe)?$/i.test(file)) {
        args = ['/d', '/s', '/c', `"${command}"`];
        windowsVerbatimArguments = true;
      } else {
        args = ['-c', command];
      }
    } else {
      file = typeof shell === 'string' ? shell : '/bin/sh';
      args = ['-c', command];
    }
  }
  const argv = [typeof opts.argv0 === 'string' ? opts.argv0 : file, ...args];

  // `env || process.env`, as Node: a falsy env means the harness's. On the
  // main thread process.env is this process's own environment, which the
  // addon hands to the command as it is (nothing copied); a worker's
  // process.env is its own copy, so it goes through like any other object.
  const env = !opts.env && isMainThread ? null : envPairs((opts.env || process.env) as object);

  // Node validates these after the arguments, in this order.
  const timeout = opts.timeout;
  if (timeout != null && !(Number.isInteger(timeout) && (timeout as number) >= 0)) {
    throw outOfRange('timeout', 'an unsigned integer', timeout);
  }
  const signal = opts.signal as unknown;
  if (signal !== undefined && (signal === null || typeof signal !== 'object' || !('aborted' in signal))) {
    throw invalidArgType('options.signal', 'AbortSignal', signal);
  }
  const killSignal = killSignalNumber(opts.killSignal);
  const stdio = checkStdio(opts.stdio);
  const serialization = opts.serialization as unknown;
  if (serialization !== undefined && serialization !== 'json' && serialization !== 'advanced') {
    throw invalidArgValue('options.serialization', serialization, "must be one of: undefined, 'json', 'advanced'");
  }

  // proctree's own options.
  const leftovers = opts.leftovers ?? 'kill';
  if (leftovers !== 'kill' && leftovers !== 'wait' && leftovers !== 'keep') {
    throw invalidArgValue('options.leftovers', leftovers, "must be one of: 'kill', 'wait', 'keep'");
  }
  const background = checkBoolean(opts.background, 'options.background');
  const ready = resolveReady(opts.ready);
  if (ready && !background && leftovers !== 'keep') {
    throw invalidArgValue('options.ready', opts.ready, "needs background: true or leftovers: 'keep'");
  }
  if (ready?.listening != null && !binding.ports) {
    // The portable binding cannot see sockets: refused before anything is made.
    throw proctreeError(
      'ERR_PROCTREE_PORTS_UNSUPPORTED',
      `options.ready.listening needs the Linux addon, and this process runs the portable binding (${portable?.reason ?? 'no ports()'})`,
    );
  }
  const idleTimeout = checkMs(opts.idleTimeout, 'idleTimeout', 0);
  const output = resolveOutput(opts, defaults.where === 'run');
  const jobBuffer = checkBytes(opts.jobBuffer, 'options.jobBuffer', defaults.jobBuffer ?? DEFAULT_JOB_BUFFER);
  const confinement = opts.confinement ?? 'auto';
  if (!confinements.includes(confinement as 'auto' | Confinement)) {
    throw invalidArgValue('options.confinement', confinement, `must be one of: ${confinements.map((c) => `'${c}'`).join(', ')}`);
  }
  const grace = checkMs(opts.grace, 'grace', defaults.grace ?? 2000);
  const pty = resolvePty(opts.pty);
  const limits = resolveLimits(opts.limits);
  const seal = opts.seal == null ? (defaults.seal ?? false) : checkBoolean(opts.seal, 'options.seal');
  if (own.unknownKeys !== null) warnUnknownKeys(own.unknownKeys, defaults.where ?? 'spawn');

  return {
    file,
    argv,
    // A terminal's TERM is set in a copy: the shared environ cannot carry it.
    env: pty ? withTerm(env ?? envPairs(process.env), pty.term) : env,
    cwd,
    stdio: pty ? ptyStdio(stdio, opts.stdio) : stdio,
    // Node accepts any unsigned integer; a timer cannot wait longer than this.
    timeout: Math.min((timeout as number | null | undefined) ?? 0, 2 ** 31 - 1),
    grace,
    killSignal,
    signal: signal as AbortSignal | undefined,
    leftovers,
    background,
    ready,
    idleTimeout,
    output,
    jobBuffer,
    uid: opts.uid ?? undefined,
    gid: opts.gid ?? undefined,
    confinement,
    detached,
    windowsVerbatimArguments,
    pty,
    limits,
    seal,
  };
}

export interface ResolvedRun {
  input: Buffer | undefined;
  /** End stdin when there is no input, so a command reading it cannot hang. */
  closeStdin: boolean;
  encoding: BufferEncoding | 'buffer';
}

export function resolveRun(options: RunOptions | undefined): ResolvedRun {
  const o = { __proto__: null, ...(options ?? {}) } as RunOptions;
  let input: Buffer | undefined;
  if (o.input !== undefined) {
    if (typeof o.input === 'string') input = Buffer.from(o.input);
    else if (o.input instanceof Uint8Array) input = Buffer.from(o.input.buffer, o.input.byteOffset, o.input.byteLength);
    else throw invalidArgType('options.input', ['string', 'Buffer', 'TypedArray', 'DataView'], o.input);
  }
  const encoding = o.encoding ?? 'utf8';
  if (encoding !== 'buffer' && !Buffer.isEncoding(encoding)) {
    throw invalidArgValue('options.encoding', encoding, 'is invalid encoding');
  }
  return { input, encoding, closeStdin: true };
}

/** A job's ring buffer when neither the call nor its supervisor says otherwise. */
export const DEFAULT_JOB_BUFFER = 1024 * 1024;

/** The output settings of a call that gives none: one object for all of them. */
const DEFAULT_OUTPUT: OutputSettings = Object.freeze({
  maxBuffer: DEFAULT_MAX_BUFFER,
  unreadMax: Math.min(DEFAULT_MAX_BUFFER, UNREAD_MAX_BUFFER),
  keep: 'head',
  marker: null,
  all: false,
  onOutput: undefined,
});

/** Whether a call's output settings are the ones of a call that gives none (one object for all of them). */
export function isDefaultOutput(o: OutputSettings): boolean {
  return o === DEFAULT_OUTPUT;
}

/**
 * The output options (OutputOptions), validated. `run`: run()'s, where a
 * maxBuffer that is not a number is an error as in Node's exec; spawn()
 * leaves one to whoever passed it, as Node's spawn (which reads none) does:
 * execa hands spawn its per-fd arrays.
 */
function resolveOutput(o: SpawnOptions, run: boolean): OutputSettings {
  const ownMaxBuffer = run || typeof o.maxBuffer === 'number' ? o.maxBuffer : undefined;
  if (ownMaxBuffer == null && o.keep == null && o.marker === undefined && o.all == null && o.onOutput === undefined) {
    return DEFAULT_OUTPUT;
  }
  let maxBuffer = DEFAULT_MAX_BUFFER;
  const given = ownMaxBuffer !== undefined && ownMaxBuffer !== null;
  if (given) {
    // Node's validateMaxBuffer: any number >= 0, else ERR_OUT_OF_RANGE.
    if (!(typeof ownMaxBuffer === 'number' && ownMaxBuffer >= 0)) {
      throw outOfRange('options.maxBuffer', 'a positive number', ownMaxBuffer);
    }
    maxBuffer = Number.isFinite(ownMaxBuffer) ? Math.floor(ownMaxBuffer) : Number.MAX_SAFE_INTEGER;
  }
  const keep = (o.keep ?? 'head') as Keep;
  if (keep !== 'head' && keep !== 'tail' && keep !== 'both') {
    throw invalidArgValue('options.keep', keep, "must be one of: 'head', 'tail', 'both'");
  }
  const m = o.marker as unknown;
  let marker: string | null = null;
  if (m === true) marker = DEFAULT_MARKER;
  else if (typeof m === 'string') marker = m;
  else if (m !== undefined && m !== false) throw invalidArgType('options.marker', ['boolean', 'string'], m);
  const all = checkBoolean(o.all, 'options.all');
  const onOutput = o.onOutput as unknown;
  if (onOutput !== undefined && typeof onOutput !== 'function') throw invalidArgType('options.onOutput', 'function', onOutput);
  // A limit the caller chose is kept from the first byte; the default one
  // only once `done` is read (a call that only streams holds 1 MiB a stream).
  const unreadMax = given ? maxBuffer : Math.min(maxBuffer, UNREAD_MAX_BUFFER);
  return { maxBuffer, unreadMax, keep, marker, all, onOutput: onOutput as OutputSettings['onOutput'] };
}
