// The values spawn() options hold, checked one by one as Node checks them:
// signals, booleans, durations, sizes, the cwd, arguments and the
// environment. Each throws Node's error (ERR_INVALID_ARG_TYPE,
// ERR_INVALID_ARG_VALUE, ERR_OUT_OF_RANGE, ERR_UNKNOWN_SIGNAL).
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { invalidArgType, invalidArgValue, outOfRange, unknownSignal } from '../errors';

const signalNumbers: Record<string, number> = osConstants.signals as Record<string, number>;
const signalNames = new Map<number, NodeJS.Signals>(
  Object.entries(signalNumbers).map(([name, num]) => [num, name as NodeJS.Signals]),
);

/** Node's convertToValidSignal: a known number, or a name in any case. */
function validSignal(signal: string | number): number {
  if (typeof signal === 'number') {
    if (signalNames.has(signal)) return signal;
    throw unknownSignal(signal);
  }
  const num = signalNumbers[signal.toUpperCase()];
  if (num === undefined) throw unknownSignal(signal);
  return num;
}

/** The signal of kill(): 0 (a probe), or a valid signal; SIGTERM when omitted. */
export function signalNumber(signal: unknown): number {
  if (signal === 0) return 0;
  if (signal === undefined) return signalNumbers.SIGTERM;
  if (typeof signal === 'string' || typeof signal === 'number') return validSignal(signal);
  throw unknownSignal(signal);
}

/** Node's sanitizeKillSignal: a valid signal (never 0), SIGTERM when null or undefined. */
export function killSignalNumber(signal: unknown): number {
  if (typeof signal === 'string' || typeof signal === 'number') return validSignal(signal);
  if (signal != null) throw invalidArgType('options.killSignal', ['string', 'number'], signal);
  return signalNumbers.SIGTERM;
}

export function signalName(num: number): NodeJS.Signals | null {
  return num === 0 ? null : signalNames.get(num) ?? null;
}

export function nullCheck(value: unknown, name: string): void {
  if (typeof value === 'string' && value.includes('\0')) {
    throw invalidArgValue(name, value, 'must be a string without null bytes');
  }
}

/** A boolean option: false when null or undefined, else ERR_INVALID_ARG_TYPE unless a boolean. */
export function checkBoolean(value: unknown, name: string): boolean {
  if (value == null) return false;
  if (typeof value !== 'boolean') throw invalidArgType(name, 'boolean', value);
  return value;
}

export function isInt32(value: unknown): value is number {
  return typeof value === 'number' && value === (value | 0);
}

// proctree's own durations: ms, an integer that setTimeout can hold.
export function checkMs(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw invalidArgType(`options.${name}`, 'number', value);
  if (!Number.isInteger(value) || value < 0 || value > 2 ** 31 - 1) {
    throw outOfRange(`options.${name}`, 'an integer >= 0 and <= 2147483647', value);
  }
  return value;
}

export function checkGrace(value: unknown, fallback: number): number {
  return checkMs(value, 'grace', fallback);
}

// Node's getValidatedPath for options.cwd: a string, a Buffer or a file: URL.
export function checkCwd(value: unknown): string | undefined {
  let cwd: string;
  if (value instanceof URL) cwd = fileURLToPath(value);
  else if (typeof value === 'string') cwd = value;
  else if (value instanceof Uint8Array) cwd = Buffer.from(value).toString();
  else throw invalidArgType('options.cwd', ['string', 'Buffer', 'URL'], value);
  if (cwd.includes('\0')) {
    throw invalidArgValue('options.cwd', value, 'must be a string, Uint8Array, or URL without null bytes');
  }
  // Node passes an empty cwd as "no cwd". A relative one is resolved here,
  // against this process's cwd, as the child's chdir in Node does: the
  // systemd tier's broker runs in / and would resolve it there.
  return cwd === '' ? undefined : path.resolve(cwd);
}

export function toArg(value: unknown, index: number): string {
  // Node converts every argument with ToString (holes are 'undefined'); a
  // Symbol cannot be converted, which Node reports without a code. The
  // name is built only for an error: this runs for every argument of every call.
  if (typeof value === 'string' && !value.includes('\0')) return value;
  if (typeof value === 'symbol') throw invalidArgType(`args[${index}]`, ['string'], value);
  const s = String(value);
  nullCheck(s, `args[${index}]`);
  return s;
}

export function envPairs(env: object): string[] {
  const out: string[] = [];
  // Node walks env with for…in: inherited keys are included, on purpose.
  // eslint-disable-next-line guard-for-in
  for (const key in env) {
    const value = (env as Record<string, unknown>)[key];
    if (value === undefined) continue;
    if (typeof value === 'symbol') throw invalidArgType(`options.env['${key}']`, ['string'], value);
    nullCheck(key, `options.env['${key}']`);
    const str = String(value);
    nullCheck(str, `options.env['${key}']`);
    out.push(`${key}=${str}`);
  }
  return out;
}

/** A size or offset in bytes: an integer >= 0 (ERR_INVALID_ARG_TYPE, ERR_OUT_OF_RANGE); `fallback` when undefined. */
export function checkBytes(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw invalidArgType(name, 'number', value);
  if (!Number.isSafeInteger(value) || value < 0) throw outOfRange(name, 'an integer >= 0', value);
  return value;
}
