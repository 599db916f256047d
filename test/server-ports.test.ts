// `proctree serve`'s side of ports and readiness (protocol 3), as a real process over
// its stdin/stdout: options.ready and the ready event, the ports and
// jobPorts requests, jobs with their ports, and a not-ready cleanup that
// leaves nothing. Every line the server writes is checked against
// docs/protocol.schema.json; survivors are found by a /proc scan.
import { type ChildProcess, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020';
import { afterAll, describe, expect, it } from 'vitest';

import { killTokens, liveWith, token, waitForLive } from './helpers';

const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'proctree.js');
const schema = JSON.parse(fs.readFileSync(path.join(root, 'docs', 'protocol.schema.json'), 'utf8')) as object;
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
ajv.addSchema(schema, 'protocol');
const serverMessage = ajv.getSchema('protocol#/$defs/serverMessage');
const requestSchema = ajv.getSchema('protocol#/$defs/request');

type Message = Record<string, unknown> & { rid?: unknown; ok?: boolean; event?: string; id?: string };

const tokens: string[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  killTokens(tokens);
});

class Server {
  readonly child: ChildProcess;
  readonly messages: Message[] = [];
  #buf = '';
  #rid = 0;
  #waiters: (() => void)[] = [];

  constructor() {
    this.child = cpSpawn(process.execPath, [bin, 'serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(this.child);
    this.child.stdout?.on('data', (d: Buffer) => {
      this.#buf += d.toString();
      let nl: number;
      while ((nl = this.#buf.indexOf('\n')) >= 0) {
        const line = this.#buf.slice(0, nl);
        this.#buf = this.#buf.slice(nl + 1);
        const msg = JSON.parse(line) as Message;
        if (!serverMessage?.(msg)) throw new Error(`off-schema message ${line}: ${ajv.errorsText(serverMessage?.errors)}`);
        this.messages.push(msg);
      }
      for (const w of this.#waiters.splice(0)) w();
    });
  }

  async request(op: string, fields: Record<string, unknown> = {}): Promise<Message> {
    const rid = ++this.#rid;
    const req = { rid, op, ...fields };
    expect(requestSchema?.(req), `our own request ${JSON.stringify(req)}`).toBe(true);
    this.child.stdin?.write(`${JSON.stringify(req)}\n`);
    return this.waitFor((m) => m.rid === rid);
  }

  async waitFor(pred: (m: Message) => boolean, timeoutMs = 15_000): Promise<Message> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.find(pred);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`timed out; got ${JSON.stringify(this.messages)}`);
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  async close(): Promise<void> {
    await this.request('shutdown');
  }
}

const server = String.raw`
import socket, sys, time
time.sleep(float(sys.argv[1]))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 0)); s.listen()
print('up', s.getsockname()[1], flush=True)
time.sleep(float(sys.argv[2]))
`;

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

describe('proctree serve: ports and ready', () => {
  it('a background call with ready: the ready event carries the listener; ports, jobPorts and jobs agree', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const answer = await s.request('spawn', {
      id: 'web',
      file: 'python3',
      args: ['-c', server, '0.3', t],
      options: { background: true, ready: { listening: true, outputPattern: 'up \\d+', timeout: 20000 } },
    });
    expect(answer.ok).toBe(true);
    const ready = await s.waitFor((m) => m.event === 'ready' && m.id === 'web');
    const [pid] = await waitForLive(t, 1, 'python3');
    const listening = ready.listening as Array<{ port: number }>;
    expect(listening).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port: listening[0]?.port, pid }]);
    expect(ready.output).toBe(`up ${listening[0]?.port}`);
    expect(await connects(listening[0]?.port as number)).toBe(true);

    const byCall = await s.request('ports', { id: 'web' });
    expect(byCall.ports).toEqual(listening);
    const byJob = await s.request('jobPorts', { job: answer.jobId });
    expect(byJob.ports).toEqual(listening);
    const list = await s.request('jobs');
    expect((list.jobs as Array<{ id: string; ports: unknown }>).find((j) => j.id === answer.jobId)?.ports).toEqual(listening);

    await s.request('jobStop', { job: answer.jobId });
    expect((await s.request('jobPorts', { job: answer.jobId })).ports).toEqual([]);
    await s.close();
  });

  it("ready.timeout: the cleanup's reason is not-ready and nothing is left", async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    await s.request('spawn', {
      id: 'slow',
      file: 'bash',
      args: ['-c', `setsid sleep ${t} & sleep ${t}`],
      options: { background: true, ready: { listening: true, timeout: 300 } },
    });
    const cleanup = await s.waitFor((m) => m.event === 'cleanup' && m.id === 'slow');
    expect(cleanup.report).toMatchObject({ reason: 'not-ready', leftovers: [] });
    await s.waitFor((m) => m.event === 'close' && m.id === 'slow');
    expect(s.messages.some((m) => m.event === 'ready')).toBe(false);
    expect(liveWith(t)).toEqual([]);
    await s.close();
  });

  it('refuses a ready with both output and outputPattern, and a bad pattern', async () => {
    const s = new Server();
    for (const ready of [{ output: 'a', outputPattern: 'b' }, { outputPattern: '(' }]) {
      const r = await s.request('spawn', { id: 'x', file: 'true', options: { background: true, ready } });
      expect(r).toMatchObject({ ok: false, error: { code: 'ERR_INVALID_ARG_VALUE' } });
    }
    const unknown = await s.request('ports', { id: 'nope' });
    expect(unknown).toMatchObject({ ok: false, error: { code: 'ERR_PROCTREE_UNKNOWN_CALL' } });
    await s.close();
  });
});
