// Errors shaped like Node's own: a `code` a harness can switch on.
import type { NativeErrorShape } from './native';

type ErrorCtor = new (message: string) => Error;

function withCode<T extends Error>(err: T, code: string): T & { code: string } {
  Object.defineProperty(err, 'code', { value: code, enumerable: true, writable: true, configurable: true });
  return err as T & { code: string };
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'function') return `function ${value.name || '<anonymous>'}`;
  if (typeof value === 'object') {
    const name = (value as { constructor?: { name?: string } }).constructor?.name;
    return name ? `an instance of ${name}` : 'an object';
  }
  let shown = String(typeof value === 'string' ? `'${value}'` : value);
  if (shown.length > 28) shown = `${shown.slice(0, 25)}...`;
  return `type ${typeof value} (${shown})`;
}

function make(Ctor: ErrorCtor, code: string, message: string): Error & { code: string } {
  return withCode(new Ctor(message), code);
}

export function invalidArgType(name: string, expected: string, actual: unknown): TypeError & { code: string } {
  return make(
    TypeError,
    'ERR_INVALID_ARG_TYPE',
    `The "${name}" argument must be ${expected}. Received ${describe(actual)}`,
  ) as TypeError & { code: string };
}

export function invalidArgValue(name: string, value: unknown, reason: string): TypeError & { code: string } {
  let shown: string;
  try {
    shown = typeof value === 'string' ? `'${value.replace(/\0/g, '\\x00')}'` : JSON.stringify(value) ?? String(value);
  } catch {
    shown = String(value);
  }
  return make(TypeError, 'ERR_INVALID_ARG_VALUE', `The argument '${name}' ${reason}. Received ${shown}`) as TypeError & {
    code: string;
  };
}

export function outOfRange(name: string, range: string, value: unknown): RangeError & { code: string } {
  return make(
    RangeError,
    'ERR_OUT_OF_RANGE',
    `The value of "${name}" is out of range. It must be ${range}. Received ${String(value)}`,
  ) as RangeError & { code: string };
}

export function unknownSignal(signal: unknown): TypeError & { code: string } {
  return make(TypeError, 'ERR_UNKNOWN_SIGNAL', `Unknown signal: ${String(signal)}`) as TypeError & { code: string };
}

/** A spawn that could not start: shaped like Node's `spawn ENOENT` errors. */
export interface SpawnError extends Error {
  code: string;
  errno: number;
  syscall: string;
  path: string;
  spawnargs: string[];
}

export function spawnError(native: NativeErrorShape, file: string, spawnargs: string[]): SpawnError {
  const err = new Error(`spawn ${file} ${native.code}${native.syscall === 'chdir' ? ` (chdir '${native.path ?? ''}')` : ''}`) as SpawnError;
  err.code = native.code;
  err.errno = native.errno;
  err.syscall = native.syscall;
  err.path = native.syscall === 'chdir' ? native.path ?? '' : file;
  err.spawnargs = spawnargs;
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
