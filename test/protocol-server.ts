// `proctree serve` as a real process, for the server's test files: every
// line it writes is checked against docs/protocol.schema.json, and so is
// every request the tests send (unless a test sends a malformed one on
// purpose). The servers a file starts are ended by stopServers() in its
// afterAll: their stdin closes, and each stops every call it still has.
import { type ChildProcess, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020';
import { expect } from 'vitest';

const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'proctree.js');
const schema = JSON.parse(fs.readFileSync(path.join(root, 'docs', 'protocol.schema.json'), 'utf8')) as object;
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
ajv.addSchema(schema, 'protocol');
const serverMessage = ajv.getSchema('protocol#/$defs/serverMessage');
export const requestSchema = ajv.getSchema('protocol#/$defs/request');

export type Message = Record<string, unknown> & {
  rid?: unknown;
  ok?: boolean;
  event?: string;
  id?: string;
  error?: { code: string; message: string };
};

/** The servers this test file started (vitest gives each file its own module). */
const started: ServerProcess[] = [];

export class ServerProcess {
  readonly child: ChildProcess;
  readonly messages: Message[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #buf = '';
  #waiters: (() => void)[] = [];
  #rid = 0;

  constructor(flags: string[] = [], env: NodeJS.ProcessEnv = process.env) {
    this.child = cpSpawn(process.execPath, [bin, 'serve', ...flags], { stdio: ['pipe', 'pipe', 'pipe'], env });
    started.push(this);
    this.child.stdout?.on('data', (d: Buffer) => {
      this.#buf += d.toString();
      let nl: number;
      while ((nl = this.#buf.indexOf('\n')) >= 0) {
        const line = this.#buf.slice(0, nl);
        this.#buf = this.#buf.slice(nl + 1);
        const msg = JSON.parse(line) as Message;
        // The protocol's own description must hold for everything we get.
        if (!serverMessage?.(msg)) throw new Error(`off-schema message ${line}: ${ajv.errorsText(serverMessage?.errors)}`);
        this.messages.push(msg);
      }
      for (const w of this.#waiters.splice(0)) w();
    });
    this.child.stderr?.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => this.child.on('exit', (code, signal) => resolve({ code, signal })));
  }

  /** Writes a raw line (no validation). */
  line(text: string): void {
    this.child.stdin?.write(`${text}\n`);
  }

  /** Sends a request with a fresh rid (checked against the schema unless `raw`) and resolves with its response. */
  async request(op: string, fields: Record<string, unknown> = {}, raw = false): Promise<Message> {
    this.#rid += 1;
    const rid = this.#rid;
    const req = { rid, op, ...fields };
    if (!raw) expect(requestSchema?.(req), `our own request ${JSON.stringify(req)}`).toBe(true);
    this.line(JSON.stringify(req));
    return this.waitFor((m) => m.rid === rid);
  }

  /** The first message that matches, once it came (deadline far from what any test measures). */
  async waitFor(pred: (m: Message) => boolean, timeoutMs = 15_000): Promise<Message> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.find(pred);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`timed out; got ${JSON.stringify(this.messages)}; stderr ${this.stderr}`);
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  events(id: string): Message[] {
    return this.messages.filter((m) => m.event !== undefined && m.id === id);
  }

  output(id: string, stream: 'stdout' | 'stderr' | 'pty' = 'stdout'): string {
    return Buffer.concat(this.events(id).filter((m) => m.event === stream).map((m) => Buffer.from(m.data as string, 'base64'))).toString();
  }

  closed(id: string): Promise<Message> {
    return this.waitFor((m) => m.event === 'close' && m.id === id);
  }
}

/** Ends every server this file started and waits for them to exit (each stops its calls first). */
export async function stopServers(): Promise<void> {
  for (const s of started) s.child.stdin?.end();
  await Promise.all(started.map((s) => s.exited));
}
