// What stdio and pty options become: one StdioEntry per fd of the command,
// checked as Node's getValidStdio does (without IPC), and the terminal of
// options.pty (its size, TERM and encoding) with the fds 0-2 it takes.
import type { Readable, Writable } from 'node:stream';

import { portable } from '../binding';
import { invalidArgType, invalidArgValue, invalidSyncForkInput, ipcOnePipe, ipcUnsupported, outOfRange, ptyUnsupported } from '../errors';
import type { PtyOptions } from '../types';

/**
 * One stdio entry as the call will set it up: a pipe we create, /dev/null,
 * or an fd of ours that the child gets (a number, 'inherit', or a stream's fd).
 */
export type StdioEntry =
  | { kind: 'pipe' }
  | { kind: 'ignore' }
  | { kind: 'inherit' }
  | { kind: 'fd'; fd: number; stream?: Readable | Writable }
  | { kind: 'pty' };

// A stream given as a stdio entry: its fd goes to the child (Node's 'fd' and
// 'wrap' entries: a file stream, a socket, another call's pipe).
function streamFd(value: object): number | undefined {
  const s = value as { fd?: unknown; _handle?: { fd?: unknown } | null; handle?: { fd?: unknown } | null };
  if (typeof s.fd === 'number') return s.fd;
  for (const h of [s._handle, s.handle]) if (h && typeof h.fd === 'number' && h.fd >= 0) return h.fd;
  return undefined;
}

// The entries that carry nothing but their kind, shared by every call (nobody
// writes to an entry): one object fewer per fd and call.
const PIPE: StdioEntry = Object.freeze({ kind: 'pipe' });
const IGNORE: StdioEntry = Object.freeze({ kind: 'ignore' });
const INHERIT: StdioEntry = Object.freeze({ kind: 'inherit' });

// Node's getValidStdio, without IPC.
export function checkStdio(value: unknown): StdioEntry[] {
  let entries: unknown[];
  // The two a harness passes all day, without the general walk below.
  if (value === undefined || value === null || value === '' || value === 'pipe') return [PIPE, PIPE, PIPE];
  if (value === 'ignore') return [IGNORE, IGNORE, IGNORE];
  if (typeof value === 'string') {
    if (value === 'inherit') entries = [0, 1, 2];
    else if (value === 'pipe' || value === 'ignore' || value === 'overlapped') entries = [value, value, value];
    else throw invalidArgValue('stdio', value);
  } else if (Array.isArray(value)) {
    entries = [...(value as unknown[])];
  } else {
    throw invalidArgValue('stdio', value);
  }
  while (entries.length < 3) entries.push(undefined);
  if (entries.filter((e) => e === 'ipc').length > 1) throw ipcOnePipe();
  return entries.map((raw, i): StdioEntry => {
    const v = raw ?? (i < 3 ? 'pipe' : 'ignore');
    if (v === 'ignore') return IGNORE;
    if (v === 'pipe' || v === 'overlapped' || (typeof v === 'number' && v < 0)) return PIPE;
    if (v === 'ipc') throw ipcUnsupported();
    // Node: 'inherit' at index i is the parent's fd i.
    if (v === 'inherit') return i < 3 ? INHERIT : { kind: 'fd', fd: i };
    if (typeof v === 'number') return { kind: 'fd', fd: v };
    if (typeof v === 'object') {
      const fd = streamFd(v);
      if (fd !== undefined) return { kind: 'fd', fd, stream: v as Readable | Writable };
    }
    if (typeof v === 'string' || ArrayBuffer.isView(v)) throw invalidSyncForkInput(v);
    throw invalidArgValue('stdio', v);
  });
}

/**
 * TERM when `term` is not given. What a harness renders a terminal with
 * (xterm.js, a web view, a log) speaks xterm's sequences and 256 colors, and
 * the entry is in every terminfo database (Debian's ncurses-base included).
 */
export const DEFAULT_TERM = 'xterm-256color';
export const DEFAULT_COLS = 80;
export const DEFAULT_ROWS = 24;

export interface ResolvedPty {
  cols: number;
  rows: number;
  term: string;
  encoding: BufferEncoding | null;
}

export function checkPtySize(value: unknown, name: string, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number') throw invalidArgType(name, 'number', value);
  // struct winsize holds unsigned shorts; a 0-column terminal is what
  // `script` under a pipe gives, and what this option exists to avoid.
  if (!Number.isInteger(value) || value < 1 || value > 65535) throw outOfRange(name, 'an integer >= 1 and <= 65535', value);
  return value;
}

/** options.pty: true, false/undefined (no terminal), or { cols, rows, term, encoding }. */
export function resolvePty(value: unknown): ResolvedPty | undefined {
  if (value === undefined || value === null || value === false) return undefined;
  if (value !== true && (typeof value !== 'object' || Array.isArray(value))) {
    throw invalidArgType('options.pty', ['boolean', 'Object'], value);
  }
  // The portable binding has no pseudo-terminals: refused before anything is made.
  if (portable) throw ptyUnsupported(portable.reason);
  const o = (value === true ? {} : { __proto__: null, ...value }) as PtyOptions;
  const term = o.term ?? DEFAULT_TERM;
  if (typeof term !== 'string') throw invalidArgType('options.pty.term', 'string', term);
  if (term === '' || term.includes('\0')) throw invalidArgValue('options.pty.term', term, 'must be a non-empty string without null bytes');
  const encoding = o.encoding ?? null;
  if (encoding !== null && (typeof encoding !== 'string' || !Buffer.isEncoding(encoding))) {
    throw invalidArgValue('options.pty.encoding', encoding, 'is invalid encoding');
  }
  return {
    cols: checkPtySize(o.cols, 'options.pty.cols', DEFAULT_COLS),
    rows: checkPtySize(o.rows, 'options.pty.rows', DEFAULT_ROWS),
    term,
    encoding,
  };
}

/**
 * With a terminal, fds 0–2 are its slave: `stdio` may still name fd 3 and
 * above, and may say 'pipe' (the default) for 0–2, but nothing else there.
 */
export function ptyStdio(stdio: readonly StdioEntry[], given: unknown): StdioEntry[] {
  if (stdio.slice(0, 3).some((e) => e.kind !== 'pipe')) {
    throw invalidArgValue('options.stdio', given, "cannot redirect fds 0-2 of a call with options.pty (they are the terminal)");
  }
  return [{ kind: 'pty' }, { kind: 'pty' }, { kind: 'pty' }, ...stdio.slice(3)];
}

/** The environment with TERM naming this terminal (an inherited TERM describes the harness's terminal, not this one). */
export function withTerm(env: readonly string[], term: string): string[] {
  return [...env.filter((e) => !e.startsWith('TERM=')), `TERM=${term}`];
}
