// The `ready` option: run() of a background job settles when the
// tree listens (on anything, or on the port named) and/or its output matches;
// the port named accepts a connection at that moment; past ready.timeout the
// ladder stops the tree (cleanup.reason 'not-ready') and nothing survives —
// read from the cgroup and /proc, not from the library's bookkeeping.
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { job, run, spawn, type ToolCall } from '../dist/cjs/index.js';
import { cgroupMembers, killCgroup, killTokens, leafReleased, liveWith, token } from './helpers';

const cgroups: string[] = [];
const tokens: string[] = [];
afterAll(() => {
  for (const c of cgroups) killCgroup(c);
  killTokens(tokens);
});

// Waits <delay> s, then listens on TCP port <port> (0: any), prints
// "up <port>", and sleeps <token> s. With <first> = 1 it listens on another
// port (any) first, at once.
const server = String.raw`
import socket, sys, time
delay, port, first, t = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == '1', float(sys.argv[4])
keep = []
if first:
    a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(); keep.append(a)
    print('first', a.getsockname()[1], flush=True)
time.sleep(delay)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port)); s.listen()
print('up', s.getsockname()[1], flush=True)
time.sleep(t)
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

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((res) => s.listen(0, '127.0.0.1', res));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((res) => s.close(res));
  return port;
}

describe('options.ready', () => {
  it('listening: true settles only after the bind, and the port accepts a connection then', async () => {
    const t = token();
    tokens.push(t);
    const r = await run('python3', ['-c', server, '0.5', '0', '0', t], { background: true, ready: { listening: true } });
    cgroups.push(r.cgroup);
    expect(r.ready).not.toBeNull();
    expect(r.ready?.listening).toHaveLength(1);
    const l = r.ready?.listening[0];
    expect(l?.protocol).toBe('tcp');
    expect(liveWith(t, 'python3')).toEqual([l?.pid]);
    expect(await connects(l?.port as number)).toBe(true);
    expect(r.ready?.afterMs).toBeGreaterThan(0);
    expect(r.jobId).toMatch(/^c\d+$/);
    await job(r.jobId as string).stop();
  });

  it('listening: <port> waits for that port, not the first one the tree opens', async () => {
    const t = token();
    tokens.push(t);
    const port = await freePort();
    const r = await run('python3', ['-c', server, '0.5', String(port), '1', t], {
      background: true,
      ready: { listening: port },
    });
    cgroups.push(r.cgroup);
    expect(await connects(port)).toBe(true);
    expect(r.ready?.listening.map((l) => l.port)).toContain(port);
    expect(r.ready?.listening.length).toBe(2);
    await job(r.jobId as string).stop();
  });

  it("output matches (leftovers: 'keep'): result.ready.output is the match, the job runs on", async () => {
    const t = token();
    tokens.push(t);
    const r = await run('python3', ['-c', server, '0.2', '0', '0', t], { leftovers: 'keep', ready: { output: /up (\d+)/ } });
    cgroups.push(r.cgroup);
    const port = Number(/up (\d+)/.exec(r.ready?.output ?? '')?.[1]);
    expect(port).toBeGreaterThan(0);
    expect(r.stdout).toContain(`up ${port}`);
    expect(r.exitCode).toBeNull();
    expect(r.cleanup).toBeNull();
    expect(cgroupMembers(r.cgroup)).toEqual(liveWith(t, 'python3'));
    expect(await connects(port)).toBe(true);
    await job(r.jobId as string).stop();
  });

  it('ready in a tree of 200: result.remaining names every one of them (read off the JS thread past 64)', async () => {
    const t = token();
    tokens.push(t);
    const r = await run('bash', ['-c', `for i in $(seq 200); do sleep ${t} & done; echo up; wait`], { leftovers: 'keep', ready: { output: 'up' } });
    cgroups.push(r.cgroup);
    expect(r.ready?.output).toBe('up');
    const members = cgroupMembers(r.cgroup);
    expect(new Set(r.remaining.map((p) => p.pid))).toEqual(new Set(members));
    // A sleep still between its fork and its exec shows bash's command line;
    // one inside its exec, past the new name but before the new stack's
    // arguments are set up, shows comm 'sleep' and an empty command line.
    const described = (p: { comm: string; cmdline: string }): boolean =>
      p.cmdline === `sleep ${t}` || p.cmdline.startsWith('bash ') || (p.cmdline === '' && p.comm === 'sleep');
    expect(r.remaining.filter((p) => !described(p))).toEqual([]);
    await job(r.jobId as string).stop();
    expect(liveWith(t)).toEqual([]);
  });

  it("ready.timeout stops the tree: cleanup.reason 'not-ready', the output so far, 0 survivors", async () => {
    const t = token();
    tokens.push(t);
    // 2 s: bash must have printed 'starting' before the ready timeout stops
    // it, which a loaded machine can delay past a few hundred ms.
    const r = await run('bash', ['-c', `echo starting; setsid sleep ${t} & exec sleep ${t}`], {
      background: true,
      ready: { listening: true, timeout: 2000 },
    });
    cgroups.push(r.cgroup);
    expect(r.ready).toBeNull();
    expect(r.cleanup?.reason).toBe('not-ready');
    expect(r.cleanup?.leftovers).toEqual([]);
    expect(r.stdout).toBe('starting\n');
    expect(liveWith(t)).toEqual([]);
    expect(cgroupMembers(r.cgroup)).toEqual([]);
    expect(leafReleased(r.cgroup)).toBe(true);
  });

  it("spawn() emits 'ready' with the same state as result.ready", async () => {
    const t = token();
    tokens.push(t);
    const call: ToolCall = spawn('python3', ['-c', server, '0', '0', '0', t], { background: true, ready: { listening: true, output: 'up' } });
    call.on('error', () => {});
    const [state] = await once(call, 'ready');
    cgroups.push(call.cgroup as string);
    const r = await call.done;
    expect(r.ready).toEqual(state);
    expect(state.output).toBe('up');
    expect(state.listening).toHaveLength(1);
    await call.terminate();
  });

  it('a tree that ends before it is ready: ready null, no ladder', async () => {
    const r = await run('true', [], { background: true, ready: { listening: true, timeout: 20000 } });
    expect(r.ready).toBeNull();
    expect(r.cleanup).toBeNull();
    expect(r.exitCode).toBe(0);
  });

  it('the portable binding cannot see sockets: ready.listening and ports() are refused with ERR_PROCTREE_PORTS_UNSUPPORTED', () => {
    const script = `
      const { spawn } = require(${JSON.stringify(path.resolve(__dirname, '../dist/cjs/index.js'))});
      let thrown = null;
      try { spawn('true', [], { background: true, ready: { listening: true } }); } catch (e) { thrown = e.code; }
      const c = spawn('sleep', ['0.1'], { stdio: 'ignore' });
      c.ports().then(() => console.log(JSON.stringify({ thrown, ports: 'resolved' })), (e) => console.log(JSON.stringify({ thrown, ports: e.code })));
    `;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, PROCTREE_PORTABLE: 'ps' }, timeout: 20000 });
    expect(JSON.parse(r.stdout)).toEqual({ thrown: 'ERR_PROCTREE_PORTS_UNSUPPORTED', ports: 'ERR_PROCTREE_PORTS_UNSUPPORTED' });
  });

  it("ready needs background or leftovers: 'keep'", () => {
    expect(() => spawn('true', [], { ready: { listening: true } })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => spawn('true', [], { background: true, ready: {} as never })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }),
    );
  });
});
