// `proctree serve` driven as a real process over its stdin/stdout, with real
// spawns. Every line the server writes is checked against
// docs/protocol.schema.json; survivors are found by a /proc scan.
import { type ChildProcess, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { liveWith, token, waitForLive } from './helpers';

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

function newToken(): string {
  const t = token();
  tokens.push(t);
  return t;
}

class Server {
  readonly child: ChildProcess;
  readonly messages: Message[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #buf = '';
  #waiters: (() => void)[] = [];
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

  /** Sends a request with a fresh rid and resolves with its response. */
  async request(op: string, fields: Record<string, unknown> = {}): Promise<Message> {
    this.#rid += 1;
    const rid = this.#rid;
    const req = { rid, op, ...fields };
    expect(requestSchema?.(req), `our own request ${JSON.stringify(req)}`).toBe(true);
    this.line(JSON.stringify(req));
    return this.waitFor((m) => m.rid === rid);
  }

  async waitFor(pred: (m: Message) => boolean, timeoutMs = 10_000): Promise<Message> {
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

  output(id: string, stream: 'stdout' | 'stderr' = 'stdout'): string {
    return Buffer.concat(this.events(id).filter((m) => m.event === stream).map((m) => Buffer.from(m.data as string, 'base64'))).toString();
  }

  closed(id: string): Promise<Message> {
    return this.waitFor((m) => m.event === 'close' && m.id === id);
  }
}

afterEach(() => {
  // Whatever still carries a token of ours was started by this file: by pid.
  for (const t of tokens.splice(0)) {
    for (const pid of liveWith(t)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
});

afterAll(async () => {
  for (const s of servers) s.child.stdin?.end();
  await Promise.all(servers.map((s) => s.exited));
});

describe('requests and events', () => {
  it('spawn: the answer (with the pid) comes first, then spawn, output, exit, close', async () => {
    const s = new Server();
    const res = await s.request('spawn', { id: 'a', file: 'sh', args: ['-c', 'echo out; echo err >&2; exit 3'] });
    expect(res).toMatchObject({ ok: true, id: 'a' });
    const close = await s.closed('a');
    expect(close).toMatchObject({ code: 3, signal: null, timedOut: false, cleanup: null });
    const kinds = s.events('a').map((m) => m.event);
    expect(s.messages.indexOf(res)).toBeLessThan(s.messages.findIndex((m) => m.event === 'spawn'));
    expect(kinds[0]).toBe('spawn');
    expect(kinds.at(-1)).toBe('close');
    expect(kinds).toContain('exit');
    expect(s.events('a').find((m) => m.event === 'spawn')?.pid).toBe(res.pid);
    expect(s.output('a')).toBe('out\n');
    expect(s.output('a', 'stderr')).toBe('err\n');
    // The id is free again once closed.
    expect(await s.request('spawn', { id: 'a', file: 'true' })).toMatchObject({ ok: true });
    await s.closed('a');
  });

  it('write and closeStdin feed the call; binary data survives base64', async () => {
    const s = new Server();
    await s.request('spawn', { id: 'cat', file: 'cat', options: { stdin: 'pipe' } });
    const bytes = Buffer.from([0, 1, 2, 255, 10, 200]);
    expect(await s.request('write', { id: 'cat', data: bytes.toString('base64') })).toEqual({ rid: expect.anything(), ok: true });
    expect(await s.request('closeStdin', { id: 'cat' })).toMatchObject({ ok: true });
    expect(await s.closed('cat')).toMatchObject({ code: 0 });
    const out = Buffer.concat(s.events('cat').filter((m) => m.event === 'stdout').map((m) => Buffer.from(m.data as string, 'base64')));
    expect(out.equals(bytes)).toBe(true);
  });

  it('errors for calls: unknown id, duplicate id, no stdin pipe, ENOENT, a tier the library lacks', async () => {
    const s = new Server();
    await s.request('spawn', { id: 'x', file: 'sleep', args: ['5'] });
    const [unknown, duplicate, noStdin, enoent, tier, badSignal] = await Promise.all([
      s.request('terminate', { id: 'nope' }),
      s.request('spawn', { id: 'x', file: 'true' }),
      s.request('write', { id: 'x', data: 'aGk=' }),
      s.request('spawn', { id: 'y', file: 'proctree-no-such-command-xyz' }),
      s.request('spawn', { id: 'z', file: 'true', options: { confinement: 'no-such-tier' } }),
      s.request('kill', { id: 'x', signal: 'SIGNOPE' }),
    ]);
    expect(unknown.error?.code).toBe('ERR_PROCTREE_UNKNOWN_CALL');
    expect(duplicate.error?.code).toBe('ERR_PROCTREE_DUPLICATE_CALL');
    expect(noStdin.error?.code).toBe('ERR_PROCTREE_NO_STDIN');
    expect(enoent.error).toMatchObject({ code: 'ENOENT', message: 'spawn proctree-no-such-command-xyz ENOENT' });
    expect(tier.error?.code).toBe('ERR_INVALID_ARG_VALUE');
    expect(badSignal.error?.code).toBe('ERR_UNKNOWN_SIGNAL');
    // A failed spawn has no events.
    expect(s.events('y')).toEqual([]);
    expect(s.events('z')).toEqual([]);
    expect((await s.request('terminate', { id: 'x', grace: 500 })).report).toMatchObject({ reason: 'terminate' });
  });

  it('terminate stops double-fork + setsid and nohup escapes: zero survivors', async () => {
    const s = new Server();
    const t = newToken();
    await s.request('spawn', { id: 'esc', file: 'bash', args: ['-c', `(setsid sleep ${t} &); nohup sleep ${t} >/dev/null 2>&1 & sleep ${t}`] });
    expect(await waitForLive(t, 3, 'sleep')).toHaveLength(3);
    const listed = await s.request('list');
    const entry = (listed.calls as { id: string; members: number[] }[]).find((c) => c.id === 'esc');
    expect(entry?.members.length).toBeGreaterThanOrEqual(3);
    const res = await s.request('terminate', { id: 'esc', grace: 1000 });
    const report = res.report as { reason: string; escaped: number; leftovers: unknown[]; signaled: number };
    expect(report.reason).toBe('terminate');
    expect(report.signaled).toBeGreaterThanOrEqual(3);
    expect(report.escaped).toBeGreaterThanOrEqual(1);
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
    expect((await s.closed('esc')).cleanup).toEqual(report);
    expect(s.events('esc').some((m) => m.event === 'cleanup')).toBe(true);
  });

  it('kill sends one signal to the whole tree', async () => {
    const s = new Server();
    const t = newToken();
    await s.request('spawn', { id: 'k', file: 'bash', args: ['-c', `setsid sleep ${t} & sleep ${t}; wait`] });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    expect(await s.request('kill', { id: 'k', signal: 'SIGKILL' })).toMatchObject({ ok: true, delivered: true });
    // The main process may be reaped while the others are still dying: then
    // an (empty) leftovers ladder runs too.
    const close = await s.closed('k');
    expect(close.signal).toBe('SIGKILL');
    expect((close.cleanup as { signaled: number } | null)?.signaled ?? 0).toBe(0);
    expect(liveWith(t)).toEqual([]);
  });

  it('timeout, and a daemon left when the main process exits: leftover, cleanup, close', async () => {
    const s = new Server();
    const t1 = newToken();
    const t2 = newToken();
    await s.request('spawn', { id: 'slow', file: 'bash', args: ['-c', `(setsid sleep ${t1} &); sleep ${t1}`], options: { timeout: 300, grace: 500 } });
    await s.request('spawn', { id: 'daemon', file: 'bash', args: ['-c', `setsid sleep ${t2} & disown; exit 0`], options: { grace: 500 } });
    const [slow, daemon] = await Promise.all([s.closed('slow'), s.closed('daemon')]);
    expect(slow).toMatchObject({ timedOut: true, cleanup: { reason: 'timeout', leftovers: [] } });
    expect(daemon).toMatchObject({ code: 0, timedOut: false, cleanup: { reason: 'leftovers', leftovers: [] } });
    expect(s.events('daemon').map((m) => m.event)).toEqual(['spawn', 'exit', 'leftover', 'cleanup', 'close']);
    expect(liveWith(t1)).toEqual([]);
    expect(liveWith(t2)).toEqual([]);
  });

  it('a shim tier (its start reported later): the answer still comes first, a failed start has no events', async () => {
    const s = new Server();
    const probes = ((await s.request('capabilities')).capabilities as { probes: Record<string, { ok: boolean }> }).probes;
    const tiers = ['subreaper', 'pidns'].filter((t) => probes[t]?.ok && probes.helper?.ok);
    if (tiers.length === 0) return; // no helper here: the tiers tests say why
    for (const tier of tiers) {
      const res = await s.request('spawn', { id: tier, file: 'sh', args: ['-c', 'echo out; exit 4'], options: { confinement: tier } });
      expect(res).toMatchObject({ ok: true, id: tier, confinement: tier });
      expect(await s.closed(tier)).toMatchObject({ code: 4 });
      expect(s.events(tier)[0]).toMatchObject({ event: 'spawn', pid: res.pid });
      expect(s.messages.indexOf(res)).toBeLessThan(s.messages.indexOf(s.events(tier)[0]));
      expect(s.output(tier)).toBe('out\n');
      const missing = await s.request('spawn', { id: `${tier}-x`, file: 'proctree-no-such-command-xyz', options: { confinement: tier } });
      expect(missing.error?.code).toBe('ENOENT');
      expect(s.events(`${tier}-x`)).toEqual([]);
      expect(await s.request('list')).toMatchObject({ calls: [] });
    }
  });

  it('capabilities and list', async () => {
    const s = new Server();
    const caps = await s.request('capabilities');
    expect(caps).toMatchObject({ ok: true, protocol: 1 });
    expect((caps.capabilities as { tier: string }).tier).toBeTypeOf('string');
    expect(await s.request('list')).toMatchObject({ ok: true, calls: [] });
  });
});

describe('malformed input', () => {
  it('every bad line gets exactly one error answer and the server keeps going', async () => {
    const s = new Server();
    const bad: [string, unknown, string][] = [
      ['garbage', null, 'ERR_PROCTREE_INVALID_JSON'],
      ['{"rid":1', null, 'ERR_PROCTREE_INVALID_JSON'],
      ['[1,2]', null, 'ERR_PROCTREE_INVALID_REQUEST'],
      ['"spawn"', null, 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{}', null, 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"op":"list"}', null, 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":1.5,"op":"list"}', null, 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b1","op":"nope"}', 'b1', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b2","op":"spawn"}', 'b2', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b3","op":"spawn","id":"q","file":"true","options":{"timeout":-1}}', 'b3', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b4","op":"spawn","id":"q","file":"true","options":{"timeot":5}}', 'b4', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b5","op":"list","extra":true}', 'b5', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b6","op":"write","id":"q","data":"not base64!"}', 'b6', 'ERR_PROCTREE_INVALID_REQUEST'],
      ['{"rid":"b7","op":"spawn","id":"","file":"true"}', 'b7', 'ERR_PROCTREE_INVALID_REQUEST'],
    ];
    for (const [line] of bad) s.line(line);
    s.line('   ');
    const ok = await s.request('list');
    expect(ok).toMatchObject({ ok: true, calls: [] });
    const errors = s.messages.filter((m) => m.ok === false);
    expect(errors).toHaveLength(bad.length);
    bad.forEach(([line, rid, code], i) => {
      expect(errors[i].rid, line).toBe(rid);
      expect(errors[i].error?.code, line).toBe(code);
      expect(errors[i].error?.message, line).toMatch(/\S/);
    });
    expect(errors[10].error?.message).toContain('timeot');
    expect(errors[9].error?.message).toContain('timeout');
  });

  it('a line longer than 16 MiB is refused and skipped', async () => {
    const s = new Server();
    const big = `{"rid":"big","op":"write","id":"x","data":"${'A'.repeat(17 * 1024 * 1024)}"}`;
    s.line(big);
    const answer = await s.waitFor((m) => m.ok === false);
    expect(answer).toMatchObject({ rid: null, error: { code: 'ERR_PROCTREE_LINE_TOO_LONG' } });
    expect(await s.request('list')).toMatchObject({ ok: true });
    expect(s.messages.filter((m) => m.ok === false)).toHaveLength(1);
  });
});

describe('the end of the client', () => {
  it('stdin closing (the client died) stops every call, then the server exits', async () => {
    const s = new Server();
    const t = newToken();
    await s.request('spawn', { id: 'a', file: 'bash', args: ['-c', `(setsid sleep ${t} &); sleep ${t}`] });
    await s.request('spawn', { id: 'b', file: 'bash', args: ['-c', `trap '' TERM; nohup sleep ${t} >/dev/null 2>&1 & sleep ${t}`], options: { grace: 300 } });
    expect(await waitForLive(t, 4, 'sleep')).toHaveLength(4);
    const before = Date.now();
    s.child.stdin?.end();
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - before).toBeLessThan(3000);
    expect(liveWith(t)).toEqual([]);
    expect(s.events('a').at(-1)?.event).toBe('close');
    const closeB = s.events('b').at(-1) as { event: string; cleanup: { killed: number; leftovers: unknown[] } };
    expect(closeB).toMatchObject({ event: 'close', cleanup: { leftovers: [] } });
    // Those ignoring SIGTERM needed the SIGKILL after grace.
    expect(closeB.cleanup.killed).toBeGreaterThanOrEqual(2);
  });

  it('shutdown answers after every call closed, then the server exits 0', async () => {
    const s = new Server();
    const t = newToken();
    await s.request('spawn', { id: 'a', file: 'bash', args: ['-c', `(setsid sleep ${t} &); sleep ${t}`] });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    const res = await s.request('shutdown', { grace: 500 });
    expect(res).toMatchObject({ ok: true, stopped: 1 });
    expect(s.messages.indexOf(res)).toBeGreaterThan(s.messages.findIndex((m) => m.event === 'close' && m.id === 'a'));
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(liveWith(t)).toEqual([]);
  });

  it('SIGTERM to the server stops every call too', async () => {
    const s = new Server();
    const t = newToken();
    await s.request('spawn', { id: 'a', file: 'bash', args: ['-c', `(setsid sleep ${t} &); sleep ${t}`] });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(liveWith(t)).toEqual([]);
  });
});

describe('backpressure', () => {
  /** VmHWM of a process: the most resident memory it ever had, in bytes. */
  const peakRss = (pid: number): number => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) * 1024;

  it('a client that reads slowly keeps the server under 100 MB for 100 MB of output, and loses nothing', async () => {
    // A raw reader that keeps no messages: only the byte count.
    const child = cpSpawn(process.execPath, [bin, 'serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    try {
      child.stdin?.write(`${JSON.stringify({ rid: 1, op: 'spawn', id: 'flood', file: 'head', args: ['-c', '100000000', '/dev/zero'] })}\n`);
      // Nobody reads for a while: without backpressure the server would hold it all.
      await new Promise((r) => setTimeout(r, 1500));
      const stdout = child.stdout as NonNullable<typeof child.stdout>;
      let buf = '';
      let bytes = 0;
      let floodPid = 0;
      let stillRunningWhileUnread = false;
      const closed = new Promise<void>((resolve) => {
        stdout.on('data', (d: Buffer) => {
          buf += d.toString();
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const msg = JSON.parse(buf.slice(0, nl)) as Message;
            buf = buf.slice(nl + 1);
            if (msg.rid === 1) {
              floodPid = msg.pid as number;
              // The command is blocked on its full pipe, not done.
              stillRunningWhileUnread = fs.existsSync(`/proc/${floodPid}`);
            }
            if (msg.event === 'stdout') bytes += Buffer.from(msg.data as string, 'base64').length;
            if (msg.event === 'close') resolve();
          }
          // A slow reader: a pause after every chunk.
          stdout.pause();
          setTimeout(() => stdout.resume(), 1);
        });
      });
      await closed;
      expect(bytes).toBe(100_000_000);
      expect(stillRunningWhileUnread).toBe(true);
      const peak = peakRss(child.pid as number);
      expect(peak).toBeLessThan(100 * 1024 * 1024);
    } finally {
      child.stdin?.end();
      await exited;
    }
  }, 120_000);

  it('pause holds one call and no other; resume delivers all of it', async () => {
    const s = new Server();
    // The flood starts only once we say so, after the pause is in place.
    await s.request('spawn', { id: 'flood', file: 'sh', args: ['-c', 'read go; head -c 5000000 /dev/zero'], options: { stdin: 'pipe' } });
    expect(await s.request('pause', { id: 'flood' })).toMatchObject({ ok: true });
    await s.request('write', { id: 'flood', data: Buffer.from('go\n').toString('base64') });
    await new Promise((r) => setTimeout(r, 500));
    const held = (): number => s.events('flood').filter((m) => m.event === 'stdout').reduce((n, m) => n + Buffer.from(m.data as string, 'base64').length, 0);
    // At most what one read of the pipe gave before the pause took hold.
    expect(held()).toBeLessThan(1_000_000);
    // Another call goes on meanwhile.
    await s.request('spawn', { id: 'other', file: 'sh', args: ['-c', 'echo hi'] });
    expect(await s.closed('other')).toMatchObject({ code: 0 });
    expect(s.output('other')).toBe('hi\n');
    expect(s.events('flood').some((m) => m.event === 'close')).toBe(false);
    expect(await s.request('resume', { id: 'flood' })).toMatchObject({ ok: true });
    expect(await s.closed('flood')).toMatchObject({ code: 0 });
    expect(held()).toBe(5_000_000);
    expect((await s.request('pause', { id: 'flood' })).error?.code).toBe('ERR_PROCTREE_UNKNOWN_CALL');
  });

  it('a paused call still closes once its tree is empty: terminate never hangs on a pause', async () => {
    const s = new Server();
    await s.request('spawn', { id: 'flood', file: 'sh', args: ['-c', 'read go; head -c 50000000 /dev/zero'], options: { stdin: 'pipe' } });
    await s.request('pause', { id: 'flood' });
    await s.request('write', { id: 'flood', data: Buffer.from('go\n').toString('base64') });
    await new Promise((r) => setTimeout(r, 300));
    const res = await s.request('terminate', { id: 'flood', grace: 500 });
    expect(res.report).toMatchObject({ reason: 'terminate', leftovers: [] });
    // What the pipe still held is delivered, and the call closes.
    expect(await s.closed('flood')).toMatchObject({ signal: 'SIGTERM' });
  });
});
