// The JSON-lines protocol of `proctree serve`: message types, and validation
// against docs/protocol.schema.json — the one description of the protocol,
// shared by the docs, the server and the tests. The schema's request
// validators are compiled at build time (scripts/build-protocol.js).
import type { ErrorObject, ValidateFunction } from 'ajv';

import type { CleanupReport, Listener, ProcessInfo, ResourceUsage } from '../types';

/**
 * Raised whenever the protocol gains something; version 2 (jobs, output
 * collection, terminals) only added to version 1, version 3 (ports,
 * jobPorts, options.ready and the ready event) to 2, version 4 (limits,
 * oomKilled and pidsLimited in close, pauseTree, resumeTree, jobPause,
 * jobResume) to 3, version 5 (options.seal, capabilities' seal) to 4, so
 * every exchange of version 1 means the same. A client checks `protocol >= ` the version whose
 * features it uses.
 */
export const PROTOCOL_VERSION = 5;

/** spawn's options.ready: a RegExp travels as its source (outputPattern). */
export interface ReadyRequestOptions {
  listening?: true | number;
  output?: string;
  outputPattern?: string;
  timeout?: number;
}

export type Rid = string | number;

export interface SpawnRequestOptions {
  cwd?: string;
  env?: Record<string, string>;
  argv0?: string;
  shell?: boolean | string;
  timeout?: number;
  grace?: number;
  killSignal?: NodeJS.Signals | number;
  leftovers?: 'kill' | 'wait' | 'keep';
  confinement?: string;
  uid?: number;
  gid?: number;
  stdin?: 'pipe' | 'ignore';
  stdout?: 'pipe' | 'ignore';
  stderr?: 'pipe' | 'ignore';
  background?: boolean;
  ready?: ReadyRequestOptions;
  idleTimeout?: number;
  jobBuffer?: number;
  collect?: boolean;
  maxBuffer?: number;
  keep?: 'head' | 'tail' | 'both';
  marker?: boolean | string;
  all?: boolean;
  encoding?: 'base64' | 'utf8';
  pty?: boolean | { cols?: number; rows?: number; term?: string };
  limits?: { memoryBytes?: number; pids?: number; cpu?: number };
  seal?: boolean;
}

/** What `collect` gathered: the output as text (`encoding: "utf8"`) or base64. */
export interface CollectedOutput {
  stdout: string;
  stderr: string;
  all?: string;
  stdoutOmitted: number;
  stderrOmitted: number;
  allOmitted?: number;
}

export type Request =
  | { rid: Rid; op: 'spawn'; id: string; file: string; args?: string[]; options?: SpawnRequestOptions }
  | { rid: Rid; op: 'write'; id: string; data: string }
  | { rid: Rid; op: 'closeStdin'; id: string }
  | { rid: Rid; op: 'kill'; id: string; signal?: NodeJS.Signals | number }
  | { rid: Rid; op: 'terminate'; id: string; grace?: number }
  | { rid: Rid; op: 'pause'; id: string }
  | { rid: Rid; op: 'resume'; id: string }
  | { rid: Rid; op: 'list' }
  | { rid: Rid; op: 'shutdown'; grace?: number }
  | { rid: Rid; op: 'capabilities' }
  | { rid: Rid; op: 'resize'; id: string; cols: number; rows: number }
  | { rid: Rid; op: 'foreground'; id: string }
  | { rid: Rid; op: 'jobs' }
  | { rid: Rid; op: 'jobRead'; job: string; from?: number; maxBytes?: number }
  | { rid: Rid; op: 'jobTail'; job: string; bytes?: number }
  | { rid: Rid; op: 'jobStop'; job: string; grace?: number }
  | { rid: Rid; op: 'jobWait'; job: string }
  | { rid: Rid; op: 'ports'; id: string }
  | { rid: Rid; op: 'jobPorts'; job: string }
  | { rid: Rid; op: 'pauseTree' | 'resumeTree'; id: string }
  | { rid: Rid; op: 'jobPause' | 'jobResume'; job: string };

export interface ProtocolError {
  code: string;
  message: string;
  leftovers?: ProcessInfo[];
}

export type Event =
  | { event: 'spawn'; id: string; pid: number }
  | { event: 'stdout' | 'stderr' | 'pty'; id: string; data: string }
  | { event: 'exit'; id: string; code: number | null; signal: NodeJS.Signals | null }
  | { event: 'leftover'; id: string; processes: ProcessInfo[] }
  | { event: 'cleanup'; id: string; report: CleanupReport }
  | { event: 'job'; id: string; jobId: string; remaining: ProcessInfo[]; usage: ResourceUsage; result?: CollectedOutput }
  | { event: 'ready'; id: string; listening: Listener[]; output?: string; afterMs: number }
  | {
      event: 'close';
      id: string;
      code: number | null;
      signal: NodeJS.Signals | null;
      timedOut: boolean;
      durationMs: number;
      cleanup: CleanupReport | null;
      usage: ResourceUsage | null;
      jobId: string | null;
      oomKilled: boolean;
      pidsLimited: boolean;
      result?: CollectedOutput;
    }
  | { event: 'error'; id: string; error: ProtocolError };

export type Response = { rid: Rid | null; ok: false; error: ProtocolError } | ({ rid: Rid; ok: true } & Record<string, unknown>);

export class ProtocolViolation extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** The rid of the bad request when it had a usable one, so the answer can carry it. */
    readonly rid: Rid | null,
  ) {
    super(message);
    this.name = 'ProtocolViolation';
  }
}

function describeErrors(errors: ErrorObject[] | null | undefined): string {
  if (!errors || errors.length === 0) return 'invalid request';
  // The deepest error says the most; ajv reports it first for one branch.
  const e = errors[0];
  const where = e.instancePath === '' ? 'request' : `request${e.instancePath.replace(/\//g, '.')}`;
  const extra = (e.params as { additionalProperty?: string }).additionalProperty;
  const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues;
  let message = `${where} ${e.message ?? 'is invalid'}`;
  if (extra !== undefined) message += `: '${extra}'`;
  if (allowed !== undefined) message += `: ${allowed.map((v) => JSON.stringify(v)).join(', ')}`;
  return message;
}

/** The validators scripts/build-protocol.js compiled from the schema: `requestEnvelope` and one per op. */
type CompiledValidators = Record<string, ValidateFunction | undefined>;

export class RequestValidator {
  readonly #validators: CompiledValidators;
  readonly #envelope: ValidateFunction;

  constructor() {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    this.#validators = require('./protocol-validators.js') as CompiledValidators;
    this.#envelope = this.#validators.requestEnvelope as ValidateFunction;
  }

  /** Parses one line into a request, or throws a ProtocolViolation saying why not. */
  parse(line: string): Request {
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      throw new ProtocolViolation('ERR_PROCTREE_INVALID_JSON', `not a JSON line: ${(err as Error).message}`, null);
    }
    const raw = value as { rid?: unknown; op?: unknown } | null;
    const rid =
      raw !== null && typeof raw === 'object' && (typeof raw.rid === 'string' || (typeof raw.rid === 'number' && Number.isInteger(raw.rid)))
        ? (raw.rid as Rid)
        : null;
    if (!this.#envelope(value)) {
      throw new ProtocolViolation('ERR_PROCTREE_INVALID_REQUEST', describeErrors(this.#envelope.errors), rid);
    }
    const check = this.#validators[(raw as { op: string }).op] as ValidateFunction;
    if (!check(value)) throw new ProtocolViolation('ERR_PROCTREE_INVALID_REQUEST', describeErrors(check.errors), rid);
    return value as Request;
  }
}
