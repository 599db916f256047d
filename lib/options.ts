// Validation at the boundary: bad input throws synchronously with Node's codes,
// before anything is created.
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { invalidArgType, invalidArgValue, outOfRange, unknownSignal } from './errors';
import type { NativeStdio } from './native';
import type { Confinement, RunOptions, SpawnOptions, StdioOption } from './types';

export interface ResolvedSpawn {
  file: string;
  /** argv as the command sees it, argv[0] included. */
  argv: string[];
  /** What a ChildProcess calls spawnargs: the file and its arguments. */
  spawnargs: string[];
  candidates: string[];
  env: string[];
  cwd: string | undefined;
  stdio: [NativeStdio, NativeStdio, NativeStdio];
  timeout: number;
  grace: number;
  killSignal: number;
  signal: AbortSignal | undefined;
  leftovers: 'kill' | 'wait';
  uid: number | undefined;
  gid: number | undefined;
  confinement: 'auto' | Confinement;
}

const signalNumbers: Record<string, number> = osConstants.signals as Record<string, number>;
const signalNames = new Map<number, NodeJS.Signals>(
  Object.entries(signalNumbers).map(([name, num]) => [num, name as NodeJS.Signals]),
);

export function signalNumber(signal: unknown, name = 'signal'): number {
  if (typeof signal === 'number') {
    if (Number.isInteger(signal) && (signal === 0 || signalNames.has(signal))) return signal;
    throw unknownSignal(signal);
  }
  if (typeof signal === 'string') {
    const num = signalNumbers[signal];
    if (num === undefined) throw unknownSignal(signal);
    return num;
  }
  throw invalidArgType(name, 'of type string or number', signal);
}

export function signalName(num: number): NodeJS.Signals | null {
  return num === 0 ? null : signalNames.get(num) ?? null;
}

function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string') throw invalidArgType(name, 'of type string', value);
  if (value.includes('\0')) throw invalidArgValue(name, value, 'must be a string without null bytes');
  return value;
}

function checkMs(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw invalidArgType(`options.${name}`, 'of type number', value);
  if (!Number.isInteger(value) || value < 0 || value > 2 ** 31 - 1) {
    throw outOfRange(`options.${name}`, 'an integer >= 0 and <= 2147483647', value);
  }
  return value;
}

function checkId(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number') throw invalidArgType(`options.${name}`, 'of type number', value);
  if (!Number.isInteger(value) || value < 0 || value > 2 ** 32 - 2) {
    throw outOfRange(`options.${name}`, 'an integer >= 0 and <= 4294967294', value);
  }
  return value;
}

function checkStdio(value: unknown): [NativeStdio, NativeStdio, NativeStdio] {
  if (value === undefined) return ['pipe', 'pipe', 'pipe'];
  const one = (v: unknown, i: number): NativeStdio => {
    if (v === 'pipe' || v === 'ignore' || v === 'inherit') return v;
    if (v === null || v === undefined) return i === 0 ? 'pipe' : 'pipe';
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
    throw invalidArgValue(`options.stdio[${i}]`, v, "must be 'pipe', 'ignore', 'inherit' or a file descriptor");
  };
  if (typeof value === 'string') {
    const kind = one(value, 0);
    return [kind, kind, kind];
  }
  if (!Array.isArray(value)) throw invalidArgType('options.stdio', 'a string or an array', value);
  if (value.length > 3) throw invalidArgValue('options.stdio', value, 'must have at most 3 entries');
  return [one(value[0] as StdioOption, 0), one(value[1] as StdioOption, 1), one(value[2] as StdioOption, 2)];
}

function checkEnv(value: unknown): string[] {
  const source = value === undefined ? process.env : value;
  if (source === null || typeof source !== 'object') throw invalidArgType('options.env', 'of type object', value);
  const out: string[] = [];
  for (const [key, raw] of Object.entries(source as Record<string, unknown>)) {
    if (raw === undefined) continue;
    const str = String(raw);
    if (key.includes('\0') || str.includes('\0')) {
      throw invalidArgValue('options.env', `${key}=${str}`, 'must not contain null bytes');
    }
    if (key.includes('=') || key === '') {
      throw invalidArgValue('options.env', key, "must not have a key that is empty or contains '='");
    }
    out.push(`${key}=${str}`);
  }
  return out;
}

// execvpe's search, done here in the parent; the child execs the first
// candidate that exists (relative entries resolve against the new cwd).
function candidatesFor(file: string, env: string[]): string[] {
  if (file.includes('/')) return [file];
  const entry = env.find((e) => e.startsWith('PATH='));
  const searchPath = entry !== undefined ? entry.slice(5) : '/usr/local/bin:/usr/bin:/bin';
  return searchPath.split(':').map((dir) => (dir === '' ? file : path.posix.join(dir, file)));
}

export function checkGrace(value: unknown, fallback: number): number {
  return checkMs(value, 'grace', fallback);
}

export function resolveSpawn(fileArg: unknown, argsArg: unknown, optionsArg: unknown): ResolvedSpawn {
  const file0 = checkString(fileArg, 'file');
  if (file0.length === 0) throw invalidArgValue('file', file0, 'cannot be empty');
  let args: string[] = [];
  let opts: SpawnOptions = {};
  if (Array.isArray(argsArg)) {
    args = argsArg.map((a, i) => checkString(a, `args[${i}]`));
    if (optionsArg !== undefined && optionsArg !== null) {
      if (typeof optionsArg !== 'object') throw invalidArgType('options', 'of type object', optionsArg);
      opts = optionsArg as SpawnOptions;
    }
  } else if (argsArg === undefined || argsArg === null) {
    if (optionsArg !== undefined && optionsArg !== null) {
      if (typeof optionsArg !== 'object') throw invalidArgType('options', 'of type object', optionsArg);
      opts = optionsArg as SpawnOptions;
    }
  } else if (typeof argsArg === 'object') {
    opts = argsArg as SpawnOptions;
  } else {
    throw invalidArgType('args', 'an instance of Array', argsArg);
  }

  let file = file0;
  let argv: string[];
  const shell = opts.shell;
  if (shell !== undefined && shell !== false) {
    if (shell !== true && typeof shell !== 'string') throw invalidArgType('options.shell', 'of type boolean or string', shell);
    const command = [file0, ...args].join(' ');
    file = shell === true ? '/bin/sh' : checkString(shell, 'options.shell');
    argv = [file, '-c', command];
    args = ['-c', command];
  } else {
    argv = [file, ...args];
  }
  if (opts.argv0 !== undefined) argv[0] = checkString(opts.argv0, 'options.argv0');

  let cwd: string | undefined;
  if (opts.cwd !== undefined && opts.cwd !== null) {
    cwd = opts.cwd instanceof URL ? fileURLToPath(opts.cwd) : checkString(opts.cwd, 'options.cwd');
  }
  const env = checkEnv(opts.env);

  let signal: AbortSignal | undefined;
  if (opts.signal !== undefined) {
    const s = opts.signal as unknown;
    if (s === null || typeof s !== 'object' || !('aborted' in s) || typeof (s as AbortSignal).addEventListener !== 'function') {
      throw invalidArgType('options.signal', 'an instance of AbortSignal', s);
    }
    signal = s as AbortSignal;
  }

  const leftovers = opts.leftovers ?? 'kill';
  if (leftovers !== 'kill' && leftovers !== 'wait') {
    throw invalidArgValue('options.leftovers', leftovers, "must be 'kill' or 'wait'");
  }
  const confinement = opts.confinement ?? 'auto';
  if (!['auto', 'cgroup', 'pidns', 'subreaper', 'pgroup'].includes(confinement as string)) {
    throw invalidArgValue('options.confinement', confinement, "must be 'auto', 'cgroup', 'pidns', 'subreaper' or 'pgroup'");
  }

  return {
    file,
    argv,
    spawnargs: [file, ...args],
    candidates: candidatesFor(file, env),
    env,
    cwd,
    stdio: checkStdio(opts.stdio),
    timeout: checkMs(opts.timeout, 'timeout', 0),
    grace: checkMs(opts.grace, 'grace', 2000),
    killSignal: opts.killSignal === undefined ? signalNumbers.SIGTERM : signalNumber(opts.killSignal, 'options.killSignal'),
    signal,
    leftovers,
    uid: checkId(opts.uid, 'uid'),
    gid: checkId(opts.gid, 'gid'),
    confinement,
  };
}

export interface ResolvedRun {
  input: Buffer | undefined;
  /** End stdin when there is no input, so a command reading it cannot hang. */
  closeStdin: boolean;
  encoding: BufferEncoding | 'buffer';
  maxBuffer: number;
}

export function resolveRun(options: RunOptions | undefined): ResolvedRun {
  const o = options ?? {};
  let input: Buffer | undefined;
  if (o.input !== undefined) {
    if (typeof o.input === 'string') input = Buffer.from(o.input);
    else if (o.input instanceof Uint8Array) input = Buffer.from(o.input.buffer, o.input.byteOffset, o.input.byteLength);
    else throw invalidArgType('options.input', 'of type string or an instance of Uint8Array', o.input);
  }
  const encoding = o.encoding ?? 'utf8';
  if (encoding !== 'buffer' && !Buffer.isEncoding(encoding)) {
    throw invalidArgValue('options.encoding', encoding, 'is invalid encoding');
  }
  let maxBuffer = 64 * 1024 * 1024;
  if (o.maxBuffer !== undefined) {
    if (typeof o.maxBuffer !== 'number') throw invalidArgType('options.maxBuffer', 'of type number', o.maxBuffer);
    if (!(o.maxBuffer >= 0) || !Number.isFinite(o.maxBuffer)) {
      throw outOfRange('options.maxBuffer', 'a finite number >= 0', o.maxBuffer);
    }
    maxBuffer = Math.floor(o.maxBuffer);
  }
  return { input, encoding, maxBuffer, closeStdin: true };
}
