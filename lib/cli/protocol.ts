// The JSON-lines protocol of `proctree serve`: message types, and validation
// against docs/protocol.schema.json — the one description of the protocol,
// shared by the docs, the server and the tests.
import fs from 'node:fs';
import path from 'node:path';

import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';

import type { CleanupReport, ProcessInfo } from '../types';

export const PROTOCOL_VERSION = 1;

/** dist/cjs/cli → the package root, where docs/ ships. */
export const schemaPath = path.resolve(__dirname, '..', '..', '..', 'docs', 'protocol.schema.json');

export type Rid = string | number;

export interface SpawnRequestOptions {
  cwd?: string;
  env?: Record<string, string>;
  argv0?: string;
  shell?: boolean | string;
  timeout?: number;
  grace?: number;
  killSignal?: NodeJS.Signals | number;
  leftovers?: 'kill' | 'wait';
  confinement?: string;
  uid?: number;
  gid?: number;
  stdin?: 'pipe' | 'ignore';
  stdout?: 'pipe' | 'ignore';
  stderr?: 'pipe' | 'ignore';
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
  | { rid: Rid; op: 'capabilities' };

export type Op = Request['op'];

export interface ProtocolError {
  code: string;
  message: string;
  leftovers?: ProcessInfo[];
}

export type Event =
  | { event: 'spawn'; id: string; pid: number }
  | { event: 'stdout' | 'stderr'; id: string; data: string }
  | { event: 'exit'; id: string; code: number | null; signal: NodeJS.Signals | null }
  | { event: 'leftover'; id: string; processes: ProcessInfo[] }
  | { event: 'cleanup'; id: string; report: CleanupReport }
  | {
      event: 'close';
      id: string;
      code: number | null;
      signal: NodeJS.Signals | null;
      timedOut: boolean;
      durationMs: number;
      cleanup: CleanupReport | null;
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

export class RequestValidator {
  readonly #envelope: ValidateFunction;
  readonly #byOp = new Map<string, ValidateFunction>();

  constructor(schema: object = JSON.parse(fs.readFileSync(schemaPath, 'utf8')) as object) {
    const ajv = new Ajv2020({ allErrors: false, strict: true, allowUnionTypes: true });
    ajv.addSchema(schema, 'protocol');
    this.#envelope = ajv.getSchema('protocol#/$defs/requestEnvelope') as ValidateFunction;
    for (const op of ['spawn', 'write', 'closeStdin', 'kill', 'terminate', 'pause', 'resume', 'list', 'shutdown', 'capabilities'] as const) {
      this.#byOp.set(op, ajv.getSchema(`protocol#/$defs/${op}Request`) as ValidateFunction);
    }
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
    const check = this.#byOp.get((raw as { op: string }).op) as ValidateFunction;
    if (!check(value)) throw new ProtocolViolation('ERR_PROCTREE_INVALID_REQUEST', describeErrors(check.errors), rid);
    return value as Request;
  }
}
