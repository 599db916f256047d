// What a call listens on: the normalization of what the addon reports
// (kernel/sockets.h) into the public Listener (types.ts), and the pure
// parts of the `ready` option: its validation, whether a set of listeners
// satisfies `listening`, and a streaming matcher for `output`. Nothing here
// touches the addon or a process, so it is unit-tested alone.
import type { NativeListener } from './binding/contract';
import { invalidArgType, invalidArgValue, outOfRange } from './errors';
import type { Listener, ListenerProtocol } from './types';

const protocolOrder: Record<ListenerProtocol, number> = { tcp: 0, udp: 1, unix: 2 };

function isProtocol(p: string): p is ListenerProtocol {
  return p === 'tcp' || p === 'udp' || p === 'unix';
}

/** Orders listeners by protocol (tcp, udp, unix), address, port, then pid (unknown last). */
export function compareListeners(a: Listener, b: Listener): number {
  return (
    protocolOrder[a.protocol] - protocolOrder[b.protocol] ||
    (a.address < b.address ? -1 : a.address > b.address ? 1 : 0) ||
    (a.port ?? 0) - (b.port ?? 0) ||
    (a.pid ?? Number.MAX_SAFE_INTEGER) - (b.pid ?? Number.MAX_SAFE_INTEGER)
  );
}

function sameListener(a: Listener, b: Listener): boolean {
  return a.protocol === b.protocol && a.address === b.address && a.port === b.port && a.pid === b.pid;
}

/**
 * The addon's answer as the public API returns it: unknown protocols
 * dropped, `port` only for tcp/udp, `pid` only when known, sorted
 * ({@link compareListeners}) and without duplicates. An entry whose pid is
 * unknown is dropped when the same socket address is listed with a pid.
 */
export function normalizeListeners(raw: readonly NativeListener[]): Listener[] {
  const out: Listener[] = [];
  for (const r of raw) {
    if (!isProtocol(r.protocol)) continue;
    const l: Listener = { protocol: r.protocol, address: r.address };
    if (r.protocol !== 'unix') {
      if (!Number.isInteger(r.port) || r.port <= 0 || r.port > 65535) continue;
      l.port = r.port;
    }
    if (Number.isInteger(r.pid) && r.pid > 0) l.pid = r.pid;
    out.push(l);
  }
  out.sort(compareListeners);
  const withPid = new Set(out.filter((l) => l.pid !== undefined).map(endpointKey));
  return out.filter((l, i) => {
    if (i > 0 && sameListener(l, out[i - 1] as Listener)) return false;
    return l.pid !== undefined || !withPid.has(endpointKey(l));
  });
}

function endpointKey(l: Listener): string {
  return `${l.protocol} ${l.port ?? ''} ${l.address}`;
}

/**
 * A listener as one reads it in a message: `tcp 127.0.0.1:3000`,
 * `tcp [::1]:3000`, `unix /run/app.sock`, with ` (pid N)` when known.
 */
export function formatListener(l: Listener): string {
  let where: string;
  if (l.protocol === 'unix') where = l.address;
  else where = `${l.address.includes(':') ? `[${l.address}]` : l.address}:${l.port ?? 0}`;
  return `${l.protocol} ${where}${l.pid !== undefined ? ` (pid ${l.pid})` : ''}`;
}

/** The `ready` option checked: at least one condition, each of the right type. */
export interface ResolvedReady {
  listening: true | number | null;
  output: string | RegExp | null;
  timeout: number | null;
}

/**
 * Validates a `ready` option the way Node validates options
 * (ERR_INVALID_ARG_TYPE, ERR_OUT_OF_RANGE, ERR_INVALID_ARG_VALUE); null
 * when it is undefined or null. When both `listening` and `output` are
 * given, both must hold.
 */
export function resolveReady(value: unknown, name = 'options.ready'): ResolvedReady | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidArgType(name, 'object', value);
  const v = value as Record<string, unknown>;
  let listening: true | number | null = null;
  if (v.listening !== undefined && v.listening !== null) {
    if (v.listening === true) listening = true;
    else if (typeof v.listening === 'number') {
      if (!Number.isInteger(v.listening) || v.listening < 1 || v.listening > 65535) {
        throw outOfRange(`${name}.listening`, 'an integer >= 1 and <= 65535', v.listening);
      }
      listening = v.listening;
    } else throw invalidArgType(`${name}.listening`, ['true', 'number'], v.listening);
  }
  let output: string | RegExp | null = null;
  if (v.output !== undefined && v.output !== null) {
    if (typeof v.output === 'string') {
      if (v.output === '') throw invalidArgValue(`${name}.output`, v.output, 'must not be empty');
      output = v.output;
    } else if (v.output instanceof RegExp) output = v.output;
    else throw invalidArgType(`${name}.output`, ['string', 'RegExp'], v.output);
  }
  let timeout: number | null = null;
  if (v.timeout !== undefined && v.timeout !== null) {
    if (typeof v.timeout !== 'number') throw invalidArgType(`${name}.timeout`, 'number', v.timeout);
    if (!Number.isFinite(v.timeout) || v.timeout <= 0) throw outOfRange(`${name}.timeout`, '> 0', v.timeout);
    timeout = v.timeout;
  }
  if (listening === null && output === null) {
    throw invalidArgValue(name, value, "must have 'listening' or 'output'");
  }
  return { listening, output, timeout };
}

/**
 * Whether these listeners satisfy `listening`: `true` wants any listener,
 * a port number a TCP or UDP listener on that port (any address).
 */
export function matchesListening(listeners: readonly Listener[], want: true | number): boolean {
  if (want === true) return listeners.length > 0;
  return listeners.some((l) => l.protocol !== 'unix' && l.port === want);
}

/** Whether every condition of a resolved `ready` holds, given what was seen so far. */
export function readyReached(ready: ResolvedReady, state: { listeners: readonly Listener[] | null; outputMatched: boolean }): boolean {
  if (ready.listening !== null && !(state.listeners !== null && matchesListening(state.listeners, ready.listening))) {
    return false;
  }
  if (ready.output !== null && !state.outputMatched) return false;
  return true;
}

/** A matcher fed the output chunk by chunk; true once the text was seen. */
export interface OutputMatcher {
  /** Feeds one more chunk (decoded text); whether the output matched by now. */
  push(chunk: string): boolean;
  readonly matched: boolean;
  /** The text that matched (the string itself, or the RegExp's match), once matched. */
  readonly match: string | null;
}

/**
 * Looks for `want` across chunk boundaries ("lis" + "tening" matches
 * "listening"). A string keeps only the last `want.length - 1` characters
 * between chunks; a RegExp is tested on a window of the last `windowChars`
 * characters (64 KiB by default), so a pattern longer than that can be
 * missed, and memory stays bounded whatever the output's size. The
 * RegExp's `g` and `y` flags are dropped: their lastIndex would make a
 * repeated test skip text.
 */
export function outputMatcher(want: string | RegExp, windowChars = 65536): OutputMatcher {
  let tail = '';
  let matched = false;
  let match: string | null = null;
  const re = typeof want === 'string' ? null : new RegExp(want.source, want.flags.replace(/[gy]/g, ''));
  const keep = typeof want === 'string' ? Math.max(want.length - 1, 0) : windowChars;
  return {
    get matched() {
      return matched;
    },
    get match() {
      return match;
    },
    push(chunk: string): boolean {
      if (matched) return true;
      const text = tail + chunk;
      if (re) {
        const m = re.exec(text);
        matched = m !== null;
        if (m) match = m[0];
      } else {
        matched = text.includes(want as string);
        if (matched) match = want as string;
      }
      tail = keep === 0 ? '' : text.slice(-keep);
      return matched;
    },
  };
}
