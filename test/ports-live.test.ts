// What a call listens on, against real servers: call.ports() and
// job(id).ports() list the tree's listening TCP, bound UDP and listening unix
// sockets, escapees included, with the member holding each; never the
// harness's own sockets nor an unrelated process's; a stopped job's port is
// free at once. The pids are checked against a /proc scan for each test's
// unique token, the ports against what the servers print themselves.
import { spawn as cpSpawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { type Confinement, job, jobs, type Listener, run, spawn, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, killTokens, serverDir, token, waitForLive } from './helpers';

const cgroups: string[] = [];
const tokens: string[] = [];
const dirs: string[] = [];
const calls: ToolCall[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of calls) if (c.cgroup) killCgroup(c.cgroup);
  for (const c of cgroups) killCgroup(c);
  for (const c of children) c.kill('SIGKILL');
  killTokens(tokens);
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

// Listens on TCP (127.0.0.1), UDP (127.0.0.1) and a unix stream socket,
// prints "READY <tcp> <udp> <pid>", then sleeps <token> seconds.
const server = String.raw`
import os, socket, sys, time
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(('127.0.0.1', 0)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0))
x = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); x.bind(sys.argv[1]); x.listen()
print('READY', t.getsockname()[1], u.getsockname()[1], os.getpid(), flush=True)
time.sleep(float(sys.argv[2]))
`;

function tmpSocket(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-ports-'));
  dirs.push(dir);
  return path.join(dir, 's.sock');
}

function track(call: ToolCall): ToolCall {
  calls.push(call);
  call.on('error', () => {});
  return call;
}

/** The first line matching `re` on the call's stdout. */
function lineOf(call: ToolCall, re: RegExp): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let text = '';
    call.stdout?.setEncoding('utf8');
    call.stdout?.on('data', (d: string) => {
      text += d;
      const m = re.exec(text);
      if (m) resolve(m);
    });
    call.once('close', () => reject(new Error(`no ${re} in ${JSON.stringify(text)}`)));
  });
}

async function until(get: () => Promise<Listener[]>, ok: (l: Listener[]) => boolean): Promise<Listener[]> {
  let last: Listener[] = [];
  for (let i = 0; i < 250; i++) {
    last = await get();
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`never seen: ${JSON.stringify(last)}`);
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** python3 -m http.server on 127.0.0.1, port 0, as a background job: its id and the server's needle. */
async function httpServerJob(): Promise<{ id: string; needle: string }> {
  const made = serverDir('proctree-ports');
  dirs.push(made.dir);
  tokens.push(made.needle);
  const r = await run('python3', ['-u', '-m', 'http.server', '--bind', '127.0.0.1', '--directory', made.dir, '0'], {
    background: true,
  });
  cgroups.push(r.cgroup);
  return { id: r.jobId as string, needle: made.needle };
}

/** The port the job's server printed once bound (0 if it never did). */
async function printedPort(id: string): Promise<number> {
  for (let i = 0; i < 500; i++) {
    const m = /Serving HTTP on 127\.0\.0\.1 port (\d+)/.exec(job(id).read().text);
    if (m) return Number(m[1]);
    await new Promise((res) => setTimeout(res, 20));
  }
  return 0;
}

describe('call.ports()', () => {
  it("a background job's http.server: its port appears once bound, with the server's pid; stop() frees it at once", async () => {
    const { id, needle } = await httpServerJob();
    const port = await printedPort(id);
    expect(port).toBeGreaterThan(0);
    // The server printed its port after binding: the very next question
    // finds it (the kernel's answer, no polling and no delay to wait out).
    const seen = await job(id).ports();
    const [pid] = await waitForLive(needle, 1);
    expect(seen).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port, pid }]);
    // jobs() is synchronous: its entry carries what ports() read last, and when.
    const listed = jobs().find((j) => j.id === id);
    expect(listed?.listeners).toEqual(seen);
    expect(listed?.listenersAt).toBeGreaterThan(Date.now() - 60_000);

    const report = await job(id).stop();
    expect(report.heldOutside).toBeUndefined();
    expect(await canBind(port)).toBe(true);
    expect(await job(id).ports()).toEqual([]);
    expect(jobs().find((j) => j.id === id)?.listeners).toEqual([]);
  });

  it('a listening socket handed to a process outside the tree: the report says its port is still held', async () => {
    // The outsider (the test's own child, not the call's) takes a socket
    // over a unix socket (SCM_RIGHTS) and keeps it.
    const sock = tmpSocket();
    const outT = token();
    tokens.push(outT);
    const taker = String.raw`
import socket, sys, time
srv = socket.socket(socket.AF_UNIX); srv.bind(sys.argv[1]); srv.listen()
print('LISTENING', flush=True)
c, _ = srv.accept()
msg, fds, _, _ = socket.recv_fds(c, 16, 1)
print('GOT', len(fds), flush=True)
time.sleep(float(sys.argv[2]))
`;
    const outsider = cpSpawn('python3', ['-c', taker, sock, outT], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(outsider);
    let said = '';
    outsider.stdout?.on('data', (d: Buffer) => (said += String(d)));
    const saw = async (re: RegExp): Promise<void> => {
      for (let i = 0; i < 1000 && !re.test(said); i++) await new Promise((res) => setTimeout(res, 20));
      expect(said).toMatch(re);
    };
    await saw(/LISTENING/);
    const t = token();
    tokens.push(t);
    const giver = String.raw`
import socket, sys, time
t = socket.socket(); t.bind(('127.0.0.1', 0)); t.listen()
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
socket.send_fds(c, [b'x'], [t.fileno()])
print('PORT', t.getsockname()[1], flush=True)
time.sleep(float(sys.argv[2]))
`;
    const r = await run('python3', ['-c', giver, sock, t], { background: true, ready: { output: /PORT \d+/, timeout: 20_000 } });
    cgroups.push(r.cgroup);
    const id = r.jobId as string;
    const port = Number(/PORT (\d+)/.exec(job(id).read().text)?.[1]);
    await saw(/GOT 1/);
    const report = await job(id).stop({ grace: 200 });
    expect(report.leftovers).toEqual([]);
    // The tree is gone, the port is not free: the outsider holds it.
    expect(report.heldOutside).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port }]);
    expect(await canBind(port)).toBe(false);
    outsider.kill('SIGKILL');
    await new Promise((res) => outsider.once('exit', res));
    expect(await canBind(port)).toBe(true);
  });

  it('jobs() learns a listener by itself: each jobs() asks the kernel again, off the JS thread', async () => {
    const { id, needle } = await httpServerJob();
    try {
      // Nothing here calls ports(): only jobs(), until its entry shows the server's port.
      let listed = jobs().find((j) => j.id === id);
      for (let i = 0; i < 500 && (listed?.listeners.length ?? 0) === 0; i++) {
        await new Promise((res) => setTimeout(res, 20));
        listed = jobs().find((j) => j.id === id);
      }
      // What the server prints once bound (it may come after the kernel shows the socket).
      const port = await printedPort(id);
      const [pid] = await waitForLive(needle, 1);
      expect(listed?.listeners).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port, pid }]);
    } finally {
      await job(id).stop();
    }
  });

  it('finds TCP, UDP and unix sockets of a setsid-daemonized member, and neither the harness nor an outsider', async () => {
    // The harness's own listener, and an unrelated process's.
    const own = net.createServer();
    await new Promise<void>((res) => own.listen(0, '127.0.0.1', res));
    const ownPort = (own.address() as net.AddressInfo).port;
    const outT = token();
    tokens.push(outT);
    const outsider = cpSpawn('python3', ['-c', server, tmpSocket(), outT], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(outsider);
    const outLine = await new Promise<string>((res) => outsider.stdout?.once('data', (d: Buffer) => res(String(d))));
    const outPort = Number(outLine.split(' ')[1]);

    try {
      const t = token();
      tokens.push(t);
      const sock = tmpSocket();
      // The daemon leaves the session and its parent exits: an escapee.
      const call = track(
        spawn('bash', ['-c', `setsid python3 -c "$0" ${sock} ${t} & exec sleep ${t}`, server], { stdio: ['ignore', 'pipe', 'inherit'] }),
      );
      const m = await lineOf(call, /READY (\d+) (\d+) (\d+)/);
      const [tcp, udp] = [Number(m[1]), Number(m[2])];
      const [pid] = await waitForLive(t, 1, 'python3');
      expect(Number(m[3])).toBe(pid);
      const seen = await until(
        () => call.ports(),
        (l) => l.length >= 3,
      );
      expect(seen).toEqual([
        { protocol: 'tcp', address: '127.0.0.1', port: tcp, pid },
        { protocol: 'udp', address: '127.0.0.1', port: udp, pid },
        { protocol: 'unix', address: sock, pid },
      ]);
      // Both outside listeners are tcp4; a udp port may share their number.
      for (const l of seen) if (l.protocol === 'tcp') expect([ownPort, outPort]).not.toContain(l.port);
      await call.terminate();
      expect(await call.ports()).toEqual([]);
    } finally {
      own.close();
    }
  });

  it("a job's report waits for its leaf's listeners, and 'close' still comes after terminate() resumed its caller", async () => {
    const t = token();
    tokens.push(t);
    // A job keeps its leaf's id, so its report asks the kernel for what the
    // leaf's sockets still listen on; the tree can be reported empty meanwhile.
    const call = track(spawn('sh', ['-c', `echo up; exec sleep ${t}`], { background: true }));
    await lineOf(call, /^up$/m);
    const events: string[] = [];
    for (const e of ['empty', 'cleanup', 'close'] as const) call.on(e, () => events.push(e));
    await call.terminate({ grace: 0 });
    events.push('terminate() resumed');
    // A listener added now still hears 'close'.
    await new Promise<void>((resolve) => (events.includes('close') ? resolve() : call.once('close', () => resolve())));
    expect(events.indexOf('terminate() resumed')).toBeLessThan(events.indexOf('close'));
    expect(events).toContain('cleanup');
  });

  it('a call that listens on nothing has no ports', async () => {
    const t = token();
    tokens.push(t);
    const call = track(spawn('sleep', [t], { stdio: 'ignore' }));
    expect(await call.ports()).toEqual([]);
    await call.terminate();
  });

  describe.each(['pidns', 'subreaper'] as Confinement[])('the /proc way, tier %s', (tier) => {
    it('gives the same answer: every socket, with the host pid of its holder', async () => {
      const t = token();
      tokens.push(t);
      const sock = tmpSocket();
      const call = track(
        spawn('bash', ['-c', `setsid python3 -c "$0" ${sock} ${t} & exec sleep ${t}`, server], {
          stdio: ['ignore', 'pipe', 'inherit'],
          confinement: tier,
        }),
      );
      expect(call.confinement).toBe(tier);
      const m = await lineOf(call, /READY (\d+) (\d+) (\d+)/);
      const [pid] = await waitForLive(t, 1, 'python3');
      const seen = await until(
        () => call.ports(),
        (l) => l.length >= 3,
      );
      expect(seen).toEqual([
        { protocol: 'tcp', address: '127.0.0.1', port: Number(m[1]), pid },
        { protocol: 'udp', address: '127.0.0.1', port: Number(m[2]), pid },
        { protocol: 'unix', address: sock, pid },
      ]);
      await call.terminate();
      expect(await canBind(Number(m[1]))).toBe(true);
    });
  });
});
