// Errors shaped like Node's own: the same codes, classes and messages as
// child_process reports, so harness code that matches on them keeps working.
import { getSystemErrorName, inspect } from 'node:util';

import type { NativeErrorShape } from './binding/contract';

// As Node's own errors: `code` enumerable, and the code in toString() and
// in the stack's first line (`TypeError [ERR_INVALID_ARG_TYPE]: …`), which
// is what assert.throws(fn, /ERR_…/) and log scrapers match.
function withCode<T extends Error>(err: T, code: string): T & { code: string } {
  Object.defineProperty(err, 'code', { value: code, enumerable: true, writable: true, configurable: true });
  if (code.startsWith('ERR_')) {
    Object.defineProperty(err, 'toString', {
      value(this: Error) {
        return `${this.name} [${code}]: ${this.message}`;
      },
      enumerable: false,
      writable: true,
      configurable: true,
    });
    if (typeof err.stack === 'string' && err.stack.startsWith(`${err.name}: `)) {
      err.stack = `${err.name} [${code}]: ${err.stack.slice(err.name.length + 2)}`;
    }
  }
  return err as T & { code: string };
}

// What Node's messages say a value is ("type number (1)", "an instance of Array").
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  switch (typeof value) {
    case 'function':
      return `function ${value.name}`;
    case 'object': {
      const ctor = (value as { constructor?: { name?: string } }).constructor;
      return ctor && 'name' in ctor ? `an instance of ${ctor.name}` : inspect(value, { depth: -1 });
    }
    case 'string': {
      const shown = value.length > 28 ? `${value.slice(0, 25)}...` : value;
      return shown.includes("'") ? `type string (${JSON.stringify(shown)})` : `type string ('${shown}')`;
    }
    case 'bigint':
      return `type bigint (${value}n)`;
    case 'symbol':
      return `type symbol (${String(value)})`;
    case 'number':
      return Object.is(value, -0) ? 'type number (-0)' : `type number (${value})`;
    default:
      return `type ${typeof value} (${String(value)})`;
  }
}

// Node's kTypes: type names, which the message lower-cases ('Object' is
// how Node's own validators ask for a plain object: "of type object").
const primitiveTypes = new Set(['string', 'function', 'number', 'object', 'Function', 'Object', 'boolean', 'bigint', 'symbol']);
const className = /^([A-Z][a-z0-9]*)+$/;

function list(items: string[]): string {
  return items.length < 3 ? items.join(' or ') : `${items.slice(0, -1).join(', ')}, or ${items[items.length - 1]}`;
}

/**
 * Node's ERR_INVALID_ARG_TYPE, worded as Node words it: `expected` are type
 * names ('string', 'Object'), class names ('AbortSignal') or words ('int32').
 */
export function invalidArgType(name: string, expected: string | string[], actual: unknown): TypeError & { code: string } {
  const wanted = Array.isArray(expected) ? expected : [expected];
  const types = wanted.filter((t) => primitiveTypes.has(t)).map((t) => t.toLowerCase());
  const classes = wanted.filter((t) => !primitiveTypes.has(t) && className.test(t));
  const other = wanted.filter((t) => !primitiveTypes.has(t) && !className.test(t));
  // Beside classes, "object" reads as one of them (Node: "an instance of Buffer or Object").
  if (classes.length > 0 && types.includes('object')) {
    types.splice(types.indexOf('object'), 1);
    classes.push('Object');
  }
  const parts: string[] = [];
  if (types.length > 0) parts.push(`${types.length > 1 ? 'one of type' : 'of type'} ${list(types)}`);
  if (classes.length > 0) parts.push(`an instance of ${list(classes)}`);
  if (other.length > 0) {
    parts.push(other.length > 1 ? `one of ${list(other)}` : `${other[0].toLowerCase() !== other[0] ? 'an ' : ''}${other[0]}`);
  }
  const kind = name.includes('.') ? 'property' : 'argument';
  const message = `The "${name}" ${kind} must be ${parts.join(' or ')}. Received ${describe(actual)}`;
  return withCode(new TypeError(message), 'ERR_INVALID_ARG_TYPE');
}

/** Node's ERR_INVALID_ARG_VALUE. */
export function invalidArgValue(name: string, value: unknown, reason = 'is invalid'): TypeError & { code: string } {
  let shown = inspect(value);
  if (shown.length > 128) shown = `${shown.slice(0, 128)}...`;
  const kind = name.includes('.') ? 'property' : 'argument';
  return withCode(new TypeError(`The ${kind} '${name}' ${reason}. Received ${shown}`), 'ERR_INVALID_ARG_VALUE');
}

/** Node's ERR_OUT_OF_RANGE. */
export function outOfRange(name: string, range: string, value: unknown): RangeError & { code: string } {
  const shown = typeof value === 'number' && Number.isInteger(value) && Math.abs(value) > 2 ** 32
    ? String(value).replace(/\B(?=(\d{3})+(?!\d))/g, '_')
    : inspect(value);
  return withCode(
    new RangeError(`The value of "${name}" is out of range. It must be ${range}. Received ${shown}`),
    'ERR_OUT_OF_RANGE',
  );
}

/** One of proctree's own errors (`ERR_PROCTREE_…`), shaped as Node's: the code enumerable and in the stack's first line. */
export function proctreeError(code: string, message: string): Error & { code: string } {
  return withCode(new Error(message), code);
}

export function unknownSignal(signal: unknown): TypeError & { code: string } {
  return withCode(new TypeError(`Unknown signal: ${String(signal)}`), 'ERR_UNKNOWN_SIGNAL');
}

/** Node's ERR_IPC_ONE_PIPE: two 'ipc' entries in stdio. */
export function ipcOnePipe(): Error & { code: string } {
  return withCode(new Error('Child process can have only one IPC pipe'), 'ERR_IPC_ONE_PIPE');
}

/** An 'ipc' entry in stdio: proctree has no IPC channel (see README, differences from child_process). */
export function ipcUnsupported(): Error & { code: string } {
  return withCode(
    new Error("proctree does not support an 'ipc' stdio entry; use a 'pipe' entry (fd 3, 4, …) and your own framing"),
    'ERR_PROCTREE_IPC_UNSUPPORTED',
  );
}

/** options.pty with the portable binding (off Linux, PROCTREE_PORTABLE): no terminals there. */
export function ptyUnsupported(why: string): Error & { code: string } {
  return withCode(
    new Error(`a terminal (options.pty) needs the Linux addon, and this process runs the portable binding (${why})`),
    'ERR_PROCTREE_PTY_UNSUPPORTED',
  );
}

/** Node's ERR_INVALID_SYNC_FORK_INPUT: a string or buffer as a stdio entry of an asynchronous spawn. */
export function invalidSyncForkInput(value: unknown): TypeError & { code: string } {
  return withCode(
    new TypeError(`Asynchronous forks do not support Buffer, TypedArray, DataView or string input: ${inspect(value)}`),
    'ERR_INVALID_SYNC_FORK_INPUT',
  );
}

/** Node's AbortError: what an aborted call emits as 'error', with the signal's reason as `cause`. */
export class AbortError extends Error {
  readonly code = 'ABORT_ERR';
  constructor(message = 'The operation was aborted', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AbortError';
  }
}

/**
 * A command that could not start, shaped like Node's `spawn <file> ENOENT`:
 * `syscall` is `'spawn ' + file` as in Node, and `step` names what failed in
 * the child (`execve`, `chdir`, `setuid`, …) with `stepPath` its path.
 */
export interface SpawnError extends Error {
  code: string;
  /** Negative, as Node's. */
  errno: number;
  syscall: string;
  path: string;
  /** The arguments, without the file. */
  spawnargs: string[];
  /** The step of the start that failed: `execve`, `chdir`, `setuid`, `setgid`, `dup2`, `pipe2`, … */
  step: string;
  /** The path the failing step was about (the directory for chdir), when it had one. */
  stepPath?: string;
}

// The errno's name as Node knows it, where the addon had none (ENOEXEC…).
function errnoName(native: NativeErrorShape, errno: number): string {
  if (typeof native.code === 'string' && /^E[A-Z0-9]+$/.test(native.code)) return native.code;
  try {
    return getSystemErrorName(errno);
  } catch {
    return String(native.code);
  }
}

export function spawnError(native: NativeErrorShape, file: string, spawnargs: string[]): SpawnError {
  const errno = native.errno > 0 ? -native.errno : native.errno;
  const code = errnoName(native, errno);
  const err = new Error(`spawn ${file} ${code}`) as SpawnError;
  err.errno = errno;
  err.code = code;
  err.syscall = `spawn ${file}`;
  err.path = file;
  err.spawnargs = spawnargs.slice(1);
  err.step = native.syscall;
  if (native.path !== undefined && native.path !== '') err.stepPath = native.path;
  return err;
}

/** What Node throws synchronously for a start failure it does not emit (`spawn EPERM` for uid/gid). */
export function spawnThrow(native: NativeErrorShape): Error & { code: string; errno: number; syscall: string } {
  const errno = native.errno > 0 ? -native.errno : native.errno;
  const code = errnoName(native, errno);
  const err = withCode(new Error(`spawn ${code}`), code) as Error & { code: string; errno: number; syscall: string; step?: string };
  err.errno = errno;
  err.syscall = 'spawn';
  err.step = native.syscall;
  return err;
}

export class LeftoversError extends Error {
  readonly code = 'ERR_PROCTREE_LEFTOVERS';
  constructor(
    message: string,
    readonly leftovers: ReadonlyArray<{ pid: number; comm: string }>,
  ) {
    super(message);
    this.name = 'LeftoversError';
  }
}

export class ConfinementUnavailableError extends Error {
  readonly code = 'ERR_PROCTREE_CONFINEMENT_UNAVAILABLE';
  constructor(
    message: string,
    cause?: unknown,
  ) {
    super(message, { cause });
    this.name = 'ConfinementUnavailableError';
  }
}
