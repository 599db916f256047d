// `proctree serve`'s side of limits and pauses (protocol 4), as a real process over
// its stdin/stdout: spawn's `limits` (refused here, where the cgroup2 mount
// has no controllers, with ERR_PROCTREE_LIMITS_UNAVAILABLE and no events;
// bad values refused by the schema), the verdicts in `close`, and
// pauseTree/resumeTree/jobPause/jobResume, proved by cgroup.events. Every
// line the server writes is checked against docs/protocol.schema.json.
import { type ChildProcess, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { capabilities } from '../dist/cjs/index.js';
import { killTokens, token } from './helpers';

const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'proctree.js');
const schema = JSON.parse(fs.readFileSync(path.join(root, 'docs', 'protocol.schema.json'), 'utf8')) as object;
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
ajv.addSchema(schema, 'protocol');
const serverMessage = ajv.getSchema('protocol#/$defs/serverMessage');
const requestSchema = ajv.getSchema('protocol#/$defs/request');

type Message = Record<string, unknown> & { rid?: unknown; ok?: boolean; event?: string; id?: string; error?: { code: string; message: string } };

const tokens: string[] = [];
const servers: Server[] = [];
const caps = capabilities();
const noControllers = caps.tier === 'cgroup' && !caps.limits.memory && !caps.limits.pids && !caps.limits.cpu;

class Server {
  readonly child: ChildProcess;
  readonly messages: Message[] = [];
  readonly exited: Promise<unknown>;
  stderr = '';
  #buf = '';
  #rid = 0;

  constructor() {
    this.child = cpSpawn(process.execPath, [bin, 'serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
    servers.push(this);
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
    });
    this.child.stderr?.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => this.child.on('exit', resolve));
  }

  /** A request with a fresh rid (checked against the schema unless `raw`), and its response. */
  request(op: string, fields: Record<string, unknown> = {}, raw = false): Promise<Message> {
    const rid = ++this.#rid;
    const req = { rid, op, ...fields };
    if (!raw) expect(requestSchema?.(req), `our own request ${JSON.stringify(req)}`).toBe(true);
    this.child.stdin?.write(`${JSON.stringify(req)}\n`);
    return this.waitFor((m) => m.rid === rid);
  }

  async waitFor(pred: (m: Message) => boolean, timeoutMs = 10_000): Promise<Message> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.find(pred);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`timed out; got ${JSON.stringify(this.messages)}; stderr ${this.stderr}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  events(id: string): Message[] {
    return this.messages.filter((m) => m.event !== undefined && m.id === id);
  }

  closed(id: string): Promise<Message> {
    return this.waitFor((m) => m.event === 'close' && m.id === id);
  }
}

function events(cgroup: string): string {
  return fs.readFileSync(`${cgroup}/cgroup.events`, 'utf8');
}

afterEach(() => killTokens(tokens.splice(0)));
afterAll(async () => {
  for (const s of servers) s.child.stdin?.end();
  await Promise.all(servers.map((s) => s.exited));
});

describe('proctree serve: limits and pauses (protocol 4)', () => {
  it('says protocol 4, and capabilities carry limits', async () => {
    const s = new Server();
    const res = await s.request('capabilities');
    expect(res).toMatchObject({ ok: true, protocol: 4 });
    expect((res.capabilities as { limits: unknown }).limits).toEqual(JSON.parse(JSON.stringify(caps.limits)));
  });

  it.skipIf(!noControllers)('spawn with limits it cannot enforce: ERR_PROCTREE_LIMITS_UNAVAILABLE, and no events', async () => {
    const s = new Server();
    const res = await s.request('spawn', { id: 'l', file: 'true', options: { limits: { memoryBytes: 512 * 2 ** 20, pids: 256, cpu: 1.5 } } });
    expect(res.ok).toBe(false);
    expect(res.error?.code).toBe('ERR_PROCTREE_LIMITS_UNAVAILABLE');
    expect(res.error?.message).toMatch(/memory,pids,cpu: not on this cgroup2 hierarchy/);
    expect(s.events('l')).toEqual([]);
  });

  it('limits out of the schema are refused before anything runs', async () => {
    const s = new Server();
    for (const limits of [{ pids: 0 }, { memoryBytes: 1000 }, { cpu: 0 }, { pids: 1.5 }, { swap: 1 }]) {
      const res = await s.request('spawn', { id: 'bad', file: 'true', options: { limits } }, true);
      expect(res.error?.code, JSON.stringify(limits)).toBe('ERR_PROCTREE_INVALID_REQUEST');
    }
    expect(s.events('bad')).toEqual([]);
  });

  it('close carries the verdicts', async () => {
    const s = new Server();
    await s.request('spawn', { id: 'v', file: 'true' });
    expect(await s.closed('v')).toMatchObject({ code: 0, oomKilled: false, pidsLimited: false });
  });

  it.skipIf(caps.tier !== 'cgroup')('pauseTree and resumeTree answer once cgroup.events shows it; terminate still works', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const res = await s.request('spawn', { id: 'p', file: 'sh', args: ['-c', `while :; do :; done # ${t}`] });
    const cgroup = res.cgroup as string;
    expect(await s.request('pauseTree', { id: 'p' })).toMatchObject({ ok: true, paused: true });
    expect(events(cgroup)).toMatch(/^frozen 1$/m);
    expect(await s.request('resumeTree', { id: 'p' })).toMatchObject({ ok: true, paused: false });
    expect(events(cgroup)).toMatch(/^frozen 0$/m);
    expect(await s.request('pauseTree', { id: 'p' })).toMatchObject({ paused: true });
    const stopped = await s.request('terminate', { id: 'p', grace: 0 });
    expect(stopped).toMatchObject({ ok: true, report: { leftovers: [] } });
    expect(await s.closed('p')).toMatchObject({ oomKilled: false, pidsLimited: false });
    expect((await s.request('pauseTree', { id: 'p' })).error?.code).toBe('ERR_PROCTREE_UNKNOWN_CALL');
  });

  it.skipIf(caps.tier !== 'cgroup')('jobPause and jobResume pause a job; jobs lists it paused', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const res = await s.request('spawn', { id: 'j', file: 'sleep', args: [t], options: { background: true } });
    const jobId = res.jobId as string;
    expect(await s.request('jobPause', { job: jobId })).toMatchObject({ ok: true, paused: true });
    expect(events(res.cgroup as string)).toMatch(/^frozen 1$/m);
    const listed = (await s.request('jobs')).jobs as Array<{ id: string; paused: boolean }>;
    expect(listed.find((j) => j.id === jobId)?.paused).toBe(true);
    expect(await s.request('jobResume', { job: jobId })).toMatchObject({ ok: true, paused: false });
    expect(events(res.cgroup as string)).toMatch(/^frozen 0$/m);
    await s.request('jobStop', { job: jobId, grace: 0 });
    expect((await s.request('jobPause', { job: 'c999999' })).error?.code).toBe('ERR_PROCTREE_UNKNOWN_JOB');
  });

  it.skipIf(!caps.probes.pgroup.ok)('pauseTree of a pgroup call: ERR_PROCTREE_PAUSE_UNSUPPORTED', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    await s.request('spawn', { id: 'g', file: 'sleep', args: [t], options: { confinement: 'pgroup' } });
    const res = await s.request('pauseTree', { id: 'g' });
    expect(res.error?.code).toBe('ERR_PROCTREE_PAUSE_UNSUPPORTED');
    await s.request('terminate', { id: 'g', grace: 0 });
  });
});
