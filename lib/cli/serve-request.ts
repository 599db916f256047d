// The protocol's messages and the API's values of `proctree serve`, one into
// the other: a spawn request's options into SpawnOptions (refused with the
// API's error codes where they conflict or pass the operator's bound), and
// out again a collected result and a thrown error as the wire carries them.
import { invalidArgValue, outOfRange } from '../errors';
import { DEFAULT_MAX_BUFFER } from '../output';
import type { ReadyOptions, RunResult, SpawnOptions } from '../types';
import type { CollectedOutput, ProtocolError, ReadyRequestOptions, SpawnRequestOptions } from './protocol';

/** A request's answer (its fields beside rid and ok): at once, or when the promise settles. */
export type Answer = Record<string, unknown> | Promise<Record<string, unknown>>;

/** The protocol's options.ready as the API's: outputPattern becomes a RegExp. */
function readyOptions(r: ReadyRequestOptions): ReadyOptions {
  if (r.output !== undefined && r.outputPattern !== undefined) {
    throw invalidArgValue('options.ready.outputPattern', r.outputPattern, 'cannot be given with options.ready.output');
  }
  let output: string | RegExp | undefined = r.output;
  if (r.outputPattern !== undefined) {
    try {
      output = new RegExp(r.outputPattern);
    } catch (err) {
      throw invalidArgValue('options.ready.outputPattern', r.outputPattern, `is not a regular expression (${(err as Error).message})`);
    }
  }
  return { ...(r.listening !== undefined ? { listening: r.listening } : {}), ...(output !== undefined ? { output } : {}), ...(r.timeout !== undefined ? { timeout: r.timeout } : {}) };
}

/**
 * The result of a call spawned with `collect`, as the protocol carries it:
 * the library collected it as run() does (maxBuffer bytes a stream, head,
 * tail or both, never cutting a character in text) in bytes or UTF-8 text,
 * and bytes go as base64.
 */
export function collectedOutput(r: RunResult<string | Buffer>): CollectedOutput {
  const wire = (v: string | Buffer): string => (typeof v === 'string' ? v : v.toString('base64'));
  const out: CollectedOutput = { stdout: wire(r.stdout), stderr: wire(r.stderr), stdoutOmitted: r.stdoutOmitted, stderrOmitted: r.stderrOmitted };
  if (r.all !== undefined) {
    out.all = wire(r.all);
    out.allOmitted = r.allOmitted ?? 0;
  }
  return out;
}

/** The options that shape a collected result: refused without `collect`. */
const COLLECT_OPTIONS = ['maxBuffer', 'keep', 'marker', 'all', 'encoding'] as const;

/** A spawn request's options as the API takes them. */
export interface SpawnPlan {
  options: SpawnOptions;
  /** The call's result is collected and sent with its job or close event, not streamed as events. */
  collect: boolean;
  /** How a collected result is kept: UTF-8 text or bytes (sent as base64). */
  encoding: 'utf8' | 'buffer';
}

/** A spawn request's options checked and turned into the API's; `most` is the operator's --max-buffer. */
export function spawnPlan(o: SpawnRequestOptions, most: number): SpawnPlan {
  const { stdin, stdout, stderr, confinement, collect, maxBuffer, keep, marker, all, encoding, pty, ready, ...rest } = o;
  // What a client may have kept is the operator's to bound, not the client's.
  for (const [name, value] of [['maxBuffer', maxBuffer], ['jobBuffer', o.jobBuffer]] as const) {
    if (typeof value === 'number' && value > most) {
      throw outOfRange(`options.${name}`, `<= ${most} (the server's --max-buffer)`, value);
    }
  }
  if (!collect) {
    for (const name of COLLECT_OPTIONS) {
      if (o[name] !== undefined) throw invalidArgValue(`options.${name}`, o[name], 'needs options.collect: true');
    }
  }
  const options: SpawnOptions = { ...rest };
  if (ready !== undefined) options.ready = readyOptions(ready);
  if (pty !== undefined && pty !== false) {
    for (const [name, value] of [['stdin', stdin], ['stdout', stdout], ['stderr', stderr]] as const) {
      if (value !== undefined) throw invalidArgValue(`options.${name}`, value, 'cannot be given with options.pty: fds 0-2 are the terminal');
    }
    options.pty = pty;
  } else {
    options.stdio = [stdin ?? 'ignore', stdout ?? 'pipe', stderr ?? 'pipe'];
  }
  // Which tiers exist is the library's call; it rejects the ones it lacks.
  if (confinement !== undefined) options.confinement = confinement as SpawnOptions['confinement'];
  // With collect, the call's own result is sent: the library keeps
  // maxBuffer bytes a stream from the first byte (as run() does), until the
  // call is a job or closes.
  if (collect) Object.assign(options, { maxBuffer: maxBuffer ?? Math.min(DEFAULT_MAX_BUFFER, most), keep, marker, all });
  return { options, collect: Boolean(collect), encoding: encoding === 'utf8' ? 'utf8' : 'buffer' };
}

/** A thrown error as the protocol's error object: its Node-style code, its message, the leftovers it names. */
export function errorOf(err: unknown): ProtocolError {
  const e = err as Error & { code?: unknown; leftovers?: unknown };
  const out: ProtocolError = {
    code: typeof e?.code === 'string' ? e.code : 'ERR_PROCTREE_INTERNAL',
    message: typeof e?.message === 'string' ? e.message : String(err),
  };
  if (Array.isArray(e?.leftovers)) out.leftovers = e.leftovers as ProtocolError['leftovers'];
  return out;
}
