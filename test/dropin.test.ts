// proctree's spawn() where child_process.spawn was: each behaviour harness
// code relies on (events, stdio, AbortSignal, dispose, how arguments and
// options are read, errors, the duck-typed fields) checked against what Node
// does, and what harness code can do wrong or unluckily (a pipe handed
// outside the tree, a queued call aborted), with real processes, and
// outcomes read from /proc and the cgroup.
import { AsyncLocalStorage } from 'node:async_hooks';
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import { getEventListeners } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import util from 'node:util';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { getDefaultSupervisor, run, spawn, Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { inFreshNode, killTokens, liveWith, token, waitForLive, leafReleased, within } from './helpers';

const root = path.resolve(__dirname, '..');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-dropin-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Every token a test starts processes with: what still carries one after the
// test (it failed before its own cleanup) was started by this file, and is
// killed by pid; its call then ends and removes its cgroup.
const tokens: string[] = [];
function newToken(): string {
  const t = token();
  tokens.push(t);
  return t;
}
afterEach(() => {
  killTokens(tokens.splice(0));
});


/** The events of a call, in order, until 'close'. */
function eventsUntilClose(call: ToolCall): Promise<Array<[string, ...unknown[]]>> {
  const seen: Array<[string, ...unknown[]]> = [];
  for (const ev of ['spawn', 'exit', 'error', 'empty'] as const) {
    call.on(ev, (...args: unknown[]) => seen.push([ev, ...args]));
  }
  return new Promise((resolve) => {
    call.on('close', (code, signal) => {
      seen.push(['close', code, signal]);
      resolve(seen);
    });
  });
}

function readAll(stream: NodeJS.ReadableStream | null): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    stream?.setEncoding('utf8');
    stream?.on('data', (d: string) => (out += d));
    stream?.on('end', () => resolve(out));
  });
}

describe('unread stdout/stderr are flushed at exit, so close always comes', () => {
  it('nobody reads stdout or stderr: close comes', async () => {
    const call = spawn('sh', ['-c', 'echo out; echo err >&2']);
    const [code] = await within(new Promise<[number | null]>((r) => call.on('close', (c) => r([c]))), 5000, 'close');
    expect(code).toBe(0);
  });

  it('with maxConcurrent, the next queued call starts when an unread one ends', async () => {
    const sup = new Supervisor({ name: `flush-${process.pid}`, maxConcurrent: 1 });
    try {
      const first = sup.spawn('sh', ['-c', 'echo never read']);
      const second = sup.spawn('sh', ['-c', 'echo also never read']);
      const closed = Promise.all([first, second].map((c) => new Promise((r) => c.on('close', r))));
      await within(closed, 5000, 'both closes');
      expect(second.pid).toBeGreaterThan(0);
    } finally {
      await sup.shutdown();
    }
  });

  it('output read only after exit is still all there (flush is a tick after exit)', async () => {
    const call = spawn('sh', ['-c', 'echo late']);
    const out = await new Promise<string>((resolve) => call.on('exit', () => resolve(readAll(call.stdout))));
    expect(out).toBe('late\n');
  });
});

describe('a call that cannot start: error, then close with the negative errno', () => {
  it.each([
    ['ENOENT', () => spawn('proctree-no-such-command-xyz'), -2],
    ['bad cwd', () => spawn('true', [], { cwd: '/proctree-no-such-dir' }), -2],
  ])('%s', async (_name, make, errno) => {
    const call = make();
    const events = await within(eventsUntilClose(call), 5000, 'close');
    expect(events.map((e) => e[0])).toEqual(['error', 'close']);
    expect(events[0][1]).toMatchObject({ errno });
    expect(events[1]).toEqual(['close', errno, null]);
    expect(call.exitCode).toBe(errno);
    expect(call.pid).toBeUndefined();
  });

  it('EACCES', async () => {
    const file = path.join(tmp, 'not-executable');
    fs.writeFileSync(file, '#!/bin/sh\n', { mode: 0o644 });
    const events = await within(eventsUntilClose(spawn(file)), 5000, 'close');
    expect(events.map((e) => e[0])).toEqual(['error', 'close']);
    expect(events[1]).toEqual(['close', -13, null]);
  });

  it('EMFILE while making the pipes: error and close, no throw, no fd leaked', () => {
    // A harness of its own with a low fd limit, filled up to the limit.
    const script = `
      const fs = require('fs');
      const { spawn } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      const held = [];
      try { for (let i = 0; i < 4096; i++) held.push(fs.openSync('/dev/null', 'r')); } catch {}
      fs.closeSync(held.pop()); fs.closeSync(held.pop());
      const before = fs.readdirSync('/proc/self/fd').length;
      let threw = null;
      let call;
      try { call = spawn('true'); } catch (e) { threw = e.code; }
      const events = [];
      if (call) {
        call.on('error', (e) => events.push('error:' + e.code));
        call.on('close', (c) => {
          events.push('close:' + c);
          const after = fs.readdirSync('/proc/self/fd').length;
          for (const fd of held) fs.closeSync(fd);
          held.length = 0;
          console.log(JSON.stringify({ threw, events, leaked: after - before + 0 }));
        });
      } else console.log(JSON.stringify({ threw, events }));
    `;
    const r = spawnSync('bash', ['-c', `ulimit -n 256 && exec "${process.execPath}" -e "$0"`, script], { encoding: 'utf8', timeout: 20_000 });
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null');
    expect(out.threw).toBeNull();
    expect(out.events).toEqual(['error:EMFILE', 'close:-24']);
  });

  it('calls queued at the fd limit, then shutdown(): every fd they had is closed again', async () => {
    // A harness of its own with a low fd limit: a few calls start, the rest
    // wait in the queue or fail with EMFILE; shutdown() ends them all. The
    // descriptors open afterwards are exactly those open before.
    const script = `
      const fs = require('fs');
      const { Supervisor } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      const fds = () => new Set(fs.readdirSync('/proc/self/fd'));
      const sup = new Supervisor({ maxConcurrent: 3 });
      // Warm up (the probes, the loop's own descriptors, /dev/null for
      // 'ignore') before counting.
      sup.run('true').then(() => sup.run('true', [], { stdio: 'ignore' })).then(async () => {
        const held = [];
        try { for (let i = 0; i < 4096; i++) held.push(fs.openSync('/dev/null', 'r')); } catch {}
        // Room for one call's pipes, not for three.
        for (let i = 0; i < 6; i++) fs.closeSync(held.pop());
        const before = fds();
        const calls = Array.from({ length: 10 }, () => sup.spawn('sleep', ['30']));
        const closed = calls.map((c) => new Promise((resolve) => { c.on('error', () => {}); c.on('close', resolve); }));
        await sup.shutdown({ grace: 0 });
        await Promise.all(closed);
        const after = fds();
        for (const fd of held) fs.closeSync(fd);
        // (A subtree left behind may close its directory: fewer is fine.)
        console.log(JSON.stringify({ extra: [...after].filter((fd) => !before.has(fd)), closes: closed.length }));
      });
    `;
    const r = spawnSync('bash', ['-c', `ulimit -n 256 && exec "${process.execPath}" -e "$0"`, script], { encoding: 'utf8', timeout: 30_000 });
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null');
    expect(out).toEqual({ extra: [], closes: 10 });
  });
});

describe('AbortSignal as in Node', () => {
  it('abort: AbortError with cause, killed, the tree stopped; listener removed at exit', async () => {
    const t = newToken();
    const controller = new AbortController();
    const call = spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { signal: controller.signal, stdio: 'ignore' });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    const events = eventsUntilClose(call);
    const reason = new Error('boom');
    controller.abort(reason);
    const seen = await within(events, 10_000, 'close');
    const err = seen.find((e) => e[0] === 'error')?.[1] as Error & { code: string; cause: unknown };
    expect(err).toMatchObject({ name: 'AbortError', code: 'ABORT_ERR' });
    expect(err.cause).toBe(reason);
    expect(call.killed).toBe(true);
    expect(call.aborted).toBe(true);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    expect(liveWith(t)).toEqual([]);
  });

  it('a long-lived signal collects no listeners: removed at exit', async () => {
    const controller = new AbortController();
    for (let i = 0; i < 5; i++) {
      const call = spawn('true', [], { signal: controller.signal, stdio: 'ignore' });
      await new Promise((r) => call.on('exit', r));
    }
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('an already aborted signal: started, then stopped, AbortError with the reason', async () => {
    const call = spawn('sleep', ['30'], { signal: AbortSignal.abort('why'), stdio: 'ignore' });
    const seen = await within(eventsUntilClose(call), 10_000, 'close');
    expect(seen.map((e) => e[0])).toEqual(['spawn', 'error', 'exit', 'empty', 'close']);
    expect((seen[1][1] as Error & { cause: unknown }).cause).toBe('why');
    expect(seen[2]).toEqual(['exit', null, 'SIGTERM']);
  });

  it('killed is true after a timeout kill and after kill()', async () => {
    const timed = spawn('sleep', ['30'], { timeout: 50, stdio: 'ignore' });
    await new Promise((r) => timed.on('close', r));
    expect(timed.killed).toBe(true);
    expect(timed.timedOut).toBe(true);
    const killed = spawn('sleep', ['30'], { stdio: 'ignore' });
    await new Promise((r) => killed.on('spawn', r));
    expect(killed.killed).toBe(false);
    expect(killed.kill()).toBe(true);
    expect(killed.killed).toBe(true);
    await new Promise((r) => killed.on('close', r));
  });
});

describe('stdio as in Node', () => {
  it('call.stdio is [stdin, stdout, stderr]', () => {
    const call = spawn('true');
    expect(call.stdio).toEqual([call.stdin, call.stdout, call.stderr]);
    const ignored = spawn('true', [], { stdio: ['ignore', 'pipe', 'ignore'] });
    expect(ignored.stdio).toEqual([null, ignored.stdout, null]);
  });

  it("'overlapped' is a pipe", async () => {
    const call = spawn('sh', ['-c', 'cat'], { stdio: ['overlapped', 'overlapped', 'pipe'] });
    call.stdin?.end('through\n');
    expect(await readAll(call.stdout)).toBe('through\n');
  });

  it('a file stream with an fd as stdout', async () => {
    const file = path.join(tmp, 'stream-out.txt');
    const stream = fs.createWriteStream(file);
    await new Promise((r) => stream.on('open', r));
    const call = spawn('echo', ['into the file'], { stdio: ['ignore', stream, 'inherit'] });
    await new Promise((r) => call.on('close', r));
    stream.close();
    expect(fs.readFileSync(file, 'utf8')).toBe('into the file\n');
  });

  it("a socket as stdin, and another call's stdin as stdout", async () => {
    const sink = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
    const source = spawn('echo', ['piped'], { stdio: ['ignore', sink.stdin as net.Socket, 'inherit'] });
    await new Promise((r) => source.on('close', r));
    sink.stdin?.end();
    expect(await readAll(sink.stdout)).toBe('piped\n');
  });

  it("'ipc' is refused with a documented code; two with Node's ERR_IPC_ONE_PIPE", () => {
    expect(() => spawn('true', [], { stdio: ['pipe', 'pipe', 'pipe', 'ipc' as 'pipe'] })).toThrow(
      expect.objectContaining({ code: 'ERR_PROCTREE_IPC_UNSUPPORTED' }),
    );
    expect(() => spawn('true', [], { stdio: ['pipe', 'pipe', 'pipe', 'ipc' as 'pipe', 'ipc' as 'pipe'] })).toThrow(
      expect.objectContaining({ code: 'ERR_IPC_ONE_PIPE' }),
    );
  });

  it('an extra pipe at fd 3 is call.stdio[3] (needs the addon to accept more than 3 entries)', async () => {
    const call = spawn('sh', ['-c', 'echo on-three >&3; echo on-one'], { stdio: ['ignore', 'pipe', 'inherit', 'pipe'] });
    call.on('error', () => {});
    expect(call.stdio).toHaveLength(4);
    const [three, one] = await within(Promise.all([readAll(call.stdio[3] as net.Socket), readAll(call.stdout)]), 5000, 'output');
    expect(three).toBe('on-three\n');
    expect(one).toBe('on-one\n');
  });

  it('an fd of the harness at fd 4 (needs the addon to accept more than 3 entries)', async () => {
    const file = path.join(tmp, 'fd4.txt');
    const fd = fs.openSync(file, 'w');
    try {
      const call = spawn('sh', ['-c', 'echo on-four >&4'], { stdio: ['ignore', 'ignore', 'inherit', 'ignore', fd] });
      const seen = await within(eventsUntilClose(call), 5000, 'close');
      expect(seen.map((e) => e[0])).not.toContain('error');
      expect(fs.readFileSync(file, 'utf8')).toBe('on-four\n');
    } finally {
      fs.closeSync(fd);
    }
  });

  it('a non-blocking stdin from the harness is made blocking for the child (needs the addon)', async () => {
    // Our end of another call's stdout: libuv made it O_NONBLOCK. head reads
    // before the writer has written; with O_NONBLOCK left it fails with EAGAIN.
    const writer = spawn('sh', ['-c', 'sleep 0.3; echo hello; sleep 0.3'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const reader = spawn('head', ['-n1'], { stdio: [writer.stdout as net.Socket, 'pipe', 'pipe'] });
    const [out, err] = await within(Promise.all([readAll(reader.stdout), readAll(reader.stderr)]), 5000, 'head');
    expect(err).toBe('');
    expect(out).toBe('hello\n');
    await new Promise((r) => writer.on('close', r));
  });
});

describe("'close' after a listener that throws", () => {
  it("a listener of 'exit' that throws: 'close' still comes (Node's ChildProcess never sends it)", () => {
    const out = inFreshNode<{ close: number; caught: string }>(`
      let caught = '';
      process.on('uncaughtException', (e) => (caught = e.message));
      const c = proctree.spawn('sh', ['-c', 'echo hi']);
      c.stdout.resume();
      c.on('exit', () => { throw new Error('a listener that throws'); });
      c.on('close', (code) => console.log(JSON.stringify({ close: code, caught })));
    `);
    expect(out).toEqual({ close: 0, caught: 'a listener that throws' });
  });
});

describe('the async context of spawn(), as with a ChildProcess', () => {
  it("AsyncLocalStorage's store in every listener: events, pipes, a terminal, onOutput, a shim's tier", async () => {
    const als = new AsyncLocalStorage<string>();
    const seen: string[] = [];
    const note = (what: string) => () => void seen.push(`${what}:${als.getStore()}`);
    const closed: Promise<unknown>[] = [];
    als.run('child_process', () => {
      const c = cpSpawn('sh', ['-c', 'echo out']);
      c.stdout?.on('data', note('cp-data'));
      c.on('exit', note('cp-exit'));
      closed.push(new Promise((r) => c.on('close', r)));
    });
    als.run('pipes', () => {
      const c = spawn('sh', ['-c', 'echo out; echo err >&2']);
      c.on('spawn', note('spawn'));
      c.stdout?.on('data', note('stdout'));
      c.stderr?.on('data', note('stderr'));
      c.on('exit', note('exit'));
      c.on('close', note('close'));
      closed.push(new Promise((r) => c.on('close', r)));
    });
    als.run('terminal', () => {
      const c = spawn('sh', ['-c', 'echo out'], { pty: true });
      c.pty?.on('data', note('pty'));
      closed.push(new Promise((r) => c.on('close', r)));
    });
    als.run('run', () => void closed.push(run('sh', ['-c', 'echo out'], { onOutput: note('onOutput') })));
    als.run('pidns', () => {
      const c = spawn('sh', ['-c', 'echo out'], { confinement: 'pidns' });
      c.stdout?.on('data', note('pidns-data'));
      closed.push(new Promise((r) => c.on('close', r)));
    });
    await Promise.all(closed);
    expect([...new Set(seen)].sort()).toEqual(
      [
        'cp-data:child_process',
        'cp-exit:child_process',
        'spawn:pipes',
        'stdout:pipes',
        'stderr:pipes',
        'exit:pipes',
        'close:pipes',
        'pty:terminal',
        'onOutput:run',
        'pidns-data:pidns',
      ].sort(),
    );
  });
});

describe('stdio: a stream handed to another call', () => {
  it('is not read by us meanwhile, and can be read again once that call exited', async () => {
    const cat = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
    const head = spawn('head', ['-n1'], { stdio: [cat.stdout as net.Socket, 'pipe', 'inherit'] });
    cat.stdin?.write('first\n');
    expect(await within(readAll(head.stdout), 5000, 'head')).toBe('first\n');
    await new Promise((r) => head.on('close', r));
    cat.stdin?.end('second\n');
    // As with Node, the stream was paused when handed over: resume() to read it.
    const rest = readAll(cat.stdout);
    cat.stdout?.resume();
    expect(await within(rest, 5000, 'cat')).toBe('second\n');
  });
});

describe('Symbol.dispose and Symbol.asyncDispose', () => {
  it('asyncDispose stops the whole tree and waits for close', async () => {
    const t = newToken();
    const call = spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { stdio: 'ignore' });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    await within(call[Symbol.asyncDispose](), 10_000, 'asyncDispose');
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });

  it('dispose starts stopping the whole tree', async () => {
    const t = newToken();
    const call = spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { stdio: 'ignore' });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    call[Symbol.dispose]();
    await within(new Promise((r) => call.on('close', r)), 10_000, 'close');
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });
});

describe('arguments and options read as Node reads them', () => {
  it.each([undefined, null])('spawn(cmd, %s, options) keeps the options', async (args) => {
    const call = spawn('pwd', args as unknown as string[], { cwd: tmp, env: { PROCTREE_X: '1' }, timeout: 5000 });
    expect(await readAll(call.stdout)).toBe(`${fs.realpathSync(tmp)}\n`);
  });

  it('numbers and other values become strings, holes become "undefined"', async () => {
    // eslint-disable-next-line no-sparse-arrays
    const args = [1, 2.5, true, null, , { toString: () => 'obj' }] as unknown as string[];
    const call = spawn('echo', args);
    expect(await readAll(call.stdout)).toBe('1 2.5 true null undefined obj\n');
    const r = await run('echo', [, 'a'] as unknown as string[]); // eslint-disable-line no-sparse-arrays
    expect(r.stdout).toBe('undefined a\n');
  });

  it("env through for…in: inherited keys included, as Node", async () => {
    const env = Object.create({ PROCTREE_INHERITED: 'from-proto' }) as Record<string, string>;
    env.PROCTREE_OWN = 'own';
    env.PROCTREE_NULL = null as unknown as string;
    env.PROCTREE_UNDEF = undefined as unknown as string;
    const r = await run('/usr/bin/env', [], { env });
    const lines = r.stdout.split('\n');
    expect(lines).toContain('PROCTREE_INHERITED=from-proto');
    expect(lines).toContain('PROCTREE_OWN=own');
    expect(lines).toContain('PROCTREE_NULL=null');
    expect(r.stdout).not.toContain('PROCTREE_UNDEF');
  });

  it('a polluted Object.prototype does not reach the spawn', async () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.cwd = '/proctree-polluted';
    proto.uid = 12345;
    proto.shell = '/bin/false';
    proto.argv0 = 'polluted';
    try {
      const r = await run('sh', ['-c', 'echo $(id -u) "$0" "$PWD"'], { cwd: tmp });
      expect(r.stdout).toBe(`${process.getuid?.()} sh ${tmp}\n`);
    } finally {
      delete proto.cwd;
      delete proto.uid;
      delete proto.shell;
      delete proto.argv0;
    }
  });
});

describe("Node's codes, and uid/gid failures thrown as Node throws them", () => {
  it.each([
    ['timeout a string (Node 20: out of range)', { timeout: 'x' }, 'ERR_OUT_OF_RANGE'],
    ['timeout an object', { timeout: {} }, 'ERR_OUT_OF_RANGE'],
    ['timeout negative', { timeout: -1 }, 'ERR_OUT_OF_RANGE'],
    ['uid beyond int32', { uid: 2 ** 31 }, 'ERR_INVALID_ARG_TYPE'],
    ['gid beyond int32', { gid: 2 ** 63 }, 'ERR_INVALID_ARG_TYPE'],
    ['signal not an AbortSignal', { signal: {} }, 'ERR_INVALID_ARG_TYPE'],
    ['shell a number', { shell: 1 }, 'ERR_INVALID_ARG_TYPE'],
    ['argv0 an array', { argv0: [] }, 'ERR_INVALID_ARG_TYPE'],
    ['cwd a number', { cwd: 1 }, 'ERR_INVALID_ARG_TYPE'],
  ])('%s', (_name, options, code) => {
    expect(() => spawn('true', [], options as object)).toThrow(expect.objectContaining({ code }));
  });

  it.each([
    ['null', null],
    ['an array', []],
    ['a string', 'x'],
  ])('options %s: ERR_INVALID_ARG_TYPE', (_name, options) => {
    expect(() => spawn('true', [], options as object)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
  });

  it('messages and toString read like Node\'s', () => {
    let err: Error | undefined;
    try {
      spawn('true', [], { timeout: 'x' as unknown as number });
    } catch (e) {
      err = e as Error;
    }
    expect(String(err)).toBe(`RangeError [ERR_OUT_OF_RANGE]: The value of "timeout" is out of range. It must be an unsigned integer. Received 'x'`);
  });

  it.each(['pgroup', 'pidns'])('uid without the privilege (%s): spawn() throws EPERM synchronously, as Node', (confinement) => {
    // pidns: the command's user namespace maps only the harness's uid, where
    // the kernel says EINVAL for any other; Node says EPERM.
    const script = `
      const { spawn, capabilities } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      if ('${confinement}' in (capabilities().rejected ?? {})) { console.log('"unavailable"'); process.exit(0); }
      try { spawn('true', [], { uid: 0, confinement: '${confinement}' }); console.log('no throw'); }
      catch (e) { console.log(JSON.stringify({ code: e.code, errno: e.errno, syscall: e.syscall, message: e.message })); }
    `;
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', script], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    const out = JSON.parse(r.stdout.trim());
    if (out === 'unavailable') return;
    expect(out).toEqual({ code: 'EPERM', errno: -1, syscall: 'spawn', message: 'spawn EPERM' });
  });
});

describe('a harness that dropped root with process.setuid()', () => {
  it.skipIf(process.getuid?.() !== 0)('still runs calls: its tier is one that works for a process that is not dumpable', () => {
    // After setuid() a process is not dumpable: its /proc files are root's,
    // so a child cannot write its own uid_map before exec, and the pidns
    // tier (a user namespace when not root) cannot start anything. The probe
    // does that write too, so another tier is chosen.
    const script = `
      process.setgid(65534); process.setuid(65534);
      const { spawn, capabilities } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      const c = spawn('id', ['-u']);
      let out = '';
      c.stdout.on('data', (d) => (out += d));
      c.on('error', (e) => console.log(JSON.stringify({ error: e.code, step: e.step })));
      c.on('close', (code) => console.log(JSON.stringify({ tier: capabilities().tier, code, out, pidns: capabilities().rejected?.pidns })));
    `;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 });
    const last = JSON.parse(r.stdout.trim().split('\n').pop() as string);
    expect(last).toMatchObject({ code: 0, out: '65534\n' });
    expect(last.tier).not.toBe('pidns');
    // Why pidns was passed over, when that was the reason: named.
    if (String(last.pidns).includes('EACCES')) expect(last.pidns).toContain('not dumpable');
  });
});

describe('options nobody reads are reported; Node-only options accepted', () => {
  // process.emitWarning delivers on a later tick.
  async function warningsOf(fn: () => void): Promise<Array<{ code?: string; message: string }>> {
    const seen: Array<{ code?: string; message: string }> = [];
    const onWarning = (w: Error & { code?: string }): void => {
      seen.push({ code: w.code, message: w.message });
    };
    process.on('warning', onWarning);
    try {
      fn();
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      process.off('warning', onWarning);
    }
    return seen;
  }

  it('a misspelled option: one warning with a code, once per name', async () => {
    const calls: ToolCall[] = [];
    const seen = await warningsOf(() => {
      calls.push(spawn('true', [], { maxBufer: 10 } as object));
      calls.push(spawn('true', [], { maxBufer: 10 } as object));
    });
    expect(seen).toHaveLength(1);
    expect(seen[0].code).toBe('PROCTREE_UNKNOWN_OPTION');
    expect(seen[0].message).toContain('"maxBufer"');
    expect(seen[0].message).toContain('"maxBuffer"');
    await Promise.all(calls.map((c) => c.done));
  });

  it("a library's own options passed through (execa's) are not reported; a maxBuffer that is not a number is left to it", async () => {
    // What execa hands spawn() besides Node's options: per-fd arrays among them.
    const execaLike = {
      lines: [false, false, false, false],
      buffer: [true, true, true, true],
      maxBuffer: [1e8, 1e8, 1e8, 1e8],
      stripFinalNewline: [true, true, true, true],
      verbose: ['none', 'none', 'none', 'none'],
      reject: true,
      cleanup: true,
      extendEnv: true,
      forceKillAfterDelay: 5000,
      ipc: false,
      timeoutDuration: 0,
    };
    const calls: ToolCall[] = [];
    const seen = await warningsOf(() => calls.push(spawn('echo', ['ok'], execaLike as object)));
    expect(seen).toEqual([]);
    expect((await calls[0].done).stdout).toBe('ok\n');
    // run() is exec's kind: there, as in Node's exec, it is an error.
    await expect(run('true', [], { maxBuffer: [1] } as object)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
  });

  it("assigning to one of ToolCall's getters makes an own property, as on a ChildProcess (execa sets `all`)", async () => {
    const call = spawn('true', [], { stdio: 'ignore' });
    const mine = { theirs: true };
    (call as unknown as { all: unknown }).all = mine;
    (call as unknown as { done: unknown }).done = 42;
    expect(call.all).toBe(mine);
    expect(Object.keys(call)).toEqual(expect.arrayContaining(['all', 'done']));
    expect((call as unknown as { done: unknown }).done).toBe(42);
    await new Promise((resolve) => call.once('close', resolve));
  });

  it('run() reports its unknown options too', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      await run('true', [], { inptu: 'x' } as object);
      await new Promise((r) => setTimeout(r, 20));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.some((m) => m.includes('run()') && m.includes('"inptu"'))).toBe(true);
  });

  it('detached, windowsHide, windowsVerbatimArguments, serialization: accepted, no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      const t = newToken();
      const call = spawn('sleep', [t], { detached: true, windowsHide: true, windowsVerbatimArguments: false, serialization: 'advanced', stdio: 'ignore' });
      expect(await waitForLive(t, 1, 'sleep')).toHaveLength(1);
      // detached: still confined and stoppable.
      const report = await call.terminate({ grace: 500 });
      expect(report.signaled).toBe(1);
      expect(liveWith(t)).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });
});

describe('the error of a failed start has the shape harness code matches', () => {
  it("spawn <file> ENOENT, syscall 'spawn <file>', path, spawnargs without the file, negative errno", async () => {
    const call = spawn('proctree-no-such-tool-abc', ['x', 'y']);
    const err = (await new Promise<Error>((r) => call.on('error', r))) as Error & Record<string, unknown>;
    expect(err.message).toBe('spawn proctree-no-such-tool-abc ENOENT');
    expect(err).toMatchObject({
      code: 'ENOENT',
      errno: -2,
      syscall: 'spawn proctree-no-such-tool-abc',
      path: 'proctree-no-such-tool-abc',
      spawnargs: ['x', 'y'],
      step: 'execve',
    });
  });
});

describe('a script without #! runs through /bin/sh, as execvp does', () => {
  it('runs it (needs the addon)', async () => {
    const file = path.join(tmp, 'no-shebang');
    fs.writeFileSync(file, 'echo "from sh: $1"\n', { mode: 0o755 });
    const r = await run(file, ['arg']);
    expect(r.stdout).toBe('from sh: arg\n');
    expect(r.exitCode).toBe(0);
  });
});

describe('kill() and timeout keep reaching the whole tree', () => {
  it('kill(signal) reaches every process, escapees included; names in any case as Node', async () => {
    const t = newToken();
    const call = spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { stdio: 'ignore' });
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    expect(call.kill('sigterm' as NodeJS.Signals)).toBe(true);
    expect(call.killed).toBe(true);
    await within(new Promise((r) => call.on('close', r)), 5000, 'close');
    expect(liveWith(t)).toEqual([]);
    // Nothing left to signal: false, as Node's kill() of an exited child.
    expect(call.kill()).toBe(false);
  });

  it('timeout: killSignal to the whole tree, then SIGKILL after grace', async () => {
    const t = newToken();
    // 3 s: bash must have run its trap before the timeout's SIGTERM, or it
    // dies of that (a loaded machine can take longer than 300 ms).
    const call = spawn('bash', ['-c', `trap '' TERM; setsid bash -c "trap '' TERM; sleep ${t}" & sleep ${t}`], {
      stdio: 'ignore',
      timeout: 3000,
      grace: 300,
    });
    const events = await within(eventsUntilClose(call), 15_000, 'close');
    expect(call.timedOut).toBe(true);
    expect(call.killed).toBe(true);
    expect(call.cleanupReport).toMatchObject({ reason: 'timeout', leftovers: [] });
    expect((call.cleanupReport?.killed ?? 0) > 0).toBe(true);
    expect(events.find((e) => e[0] === 'exit')).toEqual(['exit', null, 'SIGKILL']);
    expect(liveWith(t)).toEqual([]);
  });
});

describe('the fields harness code duck-types', () => {
  it('spawnfile, spawnargs, connected, stdio, pid, exitCode, signalCode, killed', async () => {
    const call = spawn('echo', ['a', 'b'], { argv0: 'say' });
    expect(call.spawnfile).toBe('echo');
    expect(call.spawnargs).toEqual(['say', 'a', 'b']);
    expect(call.connected).toBe(false);
    expect(Array.isArray(call.stdio)).toBe(true);
    expect(call.exitCode).toBeNull();
    expect(call.signalCode).toBeNull();
    expect(call.killed).toBe(false);
    const shell = spawn('echo hi', { shell: true });
    expect(shell.spawnfile).toBe('/bin/sh');
    expect(shell.spawnargs).toEqual(['/bin/sh', '-c', 'echo hi']);
    await Promise.all([call.done, shell.done]);
    expect(typeof call.pid).toBe('number');
    expect(call.exitCode).toBe(0);
  });

  it("pid is an own property, as Node's: Object.keys, spread and util.inspect show it (undefined for a failed start)", async () => {
    const ok = spawn('true', [], { stdio: 'ignore' });
    const bad = spawn('proctree-no-such-command-keys', [], { stdio: 'ignore' });
    const node = cpSpawn('true', [], { stdio: 'ignore' });
    const badNode = cpSpawn('proctree-no-such-command-keys', [], { stdio: 'ignore' });
    const closed = (c: { on(e: string, f: (...a: unknown[]) => void): unknown }) =>
      new Promise((resolve) => {
        c.on('error', () => {}); // the failed starts' ENOENT
        c.on('close', resolve);
      });
    await Promise.all([ok, bad, node, badNode].map(closed));
    for (const [ours, theirs] of [
      [ok, node],
      [bad, badNode],
    ] as const) {
      expect(Object.keys(ours).includes('pid')).toBe(Object.keys(theirs).includes('pid'));
      expect(({ ...ours } as { pid?: number }).pid).toBe(ours.pid);
    }
    expect(Object.keys(ok)).toContain('pid');
    expect(util.inspect(ok, { depth: 0 })).toContain(`pid: ${ok.pid}`);
    expect(bad.pid).toBeUndefined();
    expect(Object.prototype.hasOwnProperty.call(bad, 'pid')).toBe(true);
  });
});

describe('harness code that misuses or races the API', () => {
  it('stdout handed to a process outside the tree cannot hang close or run()', async () => {
    // A holder outside every call receives the call's fds 1 and 2 over a unix
    // socket and keeps them, as ssh's ControlMaster or systemd-run --pipe would.
    const sock = path.join(tmp, `holder-${token()}.sock`);
    const holderPy = [
      'import socket, sys, time',
      's = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)',
      'print("ready", flush=True)',
      'c, _ = s.accept()',
      'msg, fds, _, _ = socket.recv_fds(c, 16, 4)',
      'print("holding", len(fds), flush=True)',
      'time.sleep(60)',
    ].join('\n');
    const holder = cpSpawn('python3', ['-c', holderPy, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
    let said = '';
    holder.stdout.on('data', (d: Buffer) => (said += String(d)));
    const saying = async (what: string): Promise<void> => {
      for (let i = 0; i < 250 && !said.includes(what); i++) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      await saying('ready');
      const passPy = [
        'import socket, sys',
        's = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])',
        'socket.send_fds(s, [b"x"], [1, 2])',
      ].join('\n');
      const started = Date.now();
      const r = await within(
        run('sh', ['-c', `echo before; python3 -c '${passPy}' ${sock}`], { timeout: 30_000 }),
        10_000,
        'run()',
      );
      expect(r.stdout).toBe('before\n');
      expect(r.timedOut).toBe(false);
      expect(Date.now() - started).toBeLessThan(5000);
      // The holder really had our pipes while run() settled.
      await saying('holding');
      expect(said).toContain('holding 2');
      expect(holder.exitCode).toBeNull();
    } finally {
      holder.kill('SIGKILL');
    }
  });

  // Bash: wait (bounded, 5 s) until process $p leads a session of its own.
  const escapedWait =
    'for i in $(seq 250); do read -r _ _ _ _ _ sid _ < /proc/$p/stat && [ "$sid" = "$p" ] && break; sleep 0.02; done;';

  it('pgroup: an escaped daemon holding stdout cannot hang run(); pipes released after grace', async () => {
    const t = newToken();
    try {
      const started = Date.now();
      const r = await within(
        // "started" once the sleep is in a session of its own (escaped): a
        // kill of the group before its setsid() would otherwise get it.
        run('bash', ['-c', `setsid sleep ${t} & p=$!; ${escapedWait} echo started`], {
          confinement: 'pgroup',
          timeout: 20_000,
          grace: 300,
        }),
        10_000,
        'run()',
      );
      expect(r.stdout).toBe('started\n');
      expect(r.cleanup === null || r.cleanup.verified === 'none').toBe(true);
      expect(Date.now() - started).toBeLessThan(5000);
      // pgroup cannot see it: the escapee is still running (the documented limit).
      expect(liveWith(t, 'sleep')).toHaveLength(1);
    } finally {
      // Started by this test (the scan finds its unique token).
      for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGKILL');
    }
  });

  it('pgroup: the timeout still ends the wait when it comes before grace', async () => {
    const t = newToken();
    try {
      // bash says "started" only once the sleep has left its session (its
      // sid differs from bash's; bounded: 10 s at most): on a loaded machine
      // a main that exited first left it in the group, where the leftovers
      // ladder stopped it, and the call closed before the timeout. The
      // timeout is far from both that wait and the grace (20 s).
      const settled = `setsid sleep ${t} & for i in $(seq 1 1000); do [ "$(cut -d' ' -f6 /proc/$!/stat)" != "$(cut -d' ' -f6 /proc/$$/stat)" ] && break; sleep 0.01; done; echo started`;
      const r = await within(run('bash', ['-c', settled], { confinement: 'pgroup', timeout: 5000, grace: 20_000 }), 18_000, 'run()');
      expect(r.stdout).toBe('started\n');
      expect(r.timedOut).toBe(true);
    } finally {
      for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGKILL');
    }
  });

  it('an aborted queued call never starts; terminate() and shutdown() of queued calls raise no error', async () => {
    const sup = new Supervisor({ name: `queue-${process.pid}`, maxConcurrent: 1 });
    try {
      const supErrors: Error[] = [];
      sup.on('error', (e) => supErrors.push(e));
      const t = newToken();
      const blocker = sup.spawn('sleep', ['0.5'], { stdio: 'ignore' });
      const controller = new AbortController();
      const aborted = sup.spawn('sleep', [t], { signal: controller.signal, stdio: 'ignore' });
      const seen = eventsUntilClose(aborted);
      controller.abort();
      const events = await within(seen, 5000, 'close of the aborted call');
      expect(events.map((e) => e[0])).toEqual(['error', 'close']);
      expect(events[0][1]).toMatchObject({ name: 'AbortError' });
      await new Promise((r) => blocker.on('close', r));
      // The queue is first in, first out: once a call queued after it has run
      // in the freed slot, the aborted one would have started before it.
      const probe = await within(sup.run('echo', ['after']), 5000, 'a call after the aborted one');
      expect(probe.stdout).toBe('after\n');
      // It never ran, not even once the slot was free.
      expect(liveWith(t)).toEqual([]);
      expect(aborted.pid).toBeUndefined();

      const blocker2 = sup.spawn('sleep', ['5'], { stdio: 'ignore' });
      const queued = sup.spawn('sleep', [t], { stdio: 'ignore' });
      const queuedRun = sup.run('sleep', [t]).catch((e: unknown) => Promise.reject(e));
      const queuedRunSettled = queuedRun.then(
        () => null,
        (e: unknown) => e,
      );
      const report = await queued.terminate();
      expect(report).toMatchObject({ signaled: 0, leftovers: [] });
      await within(new Promise((r) => queued.on('close', r)), 5000, 'close of the terminated queued call');
      const reports = await sup.shutdown({ grace: 500 });
      expect(await queuedRunSettled).toMatchObject({ code: 'ERR_PROCTREE_SUPERVISOR_CLOSED' });
      expect(reports).toHaveLength(1);
      await new Promise((r) => blocker2.on('close', r));
      expect(supErrors).toEqual([]);
      expect(liveWith(t)).toEqual([]);
    } finally {
      await sup.shutdown({ grace: 100 });
    }
  });

  it('the default supervisor is exported: errors of module-level calls can be listened to', async () => {
    const sup = getDefaultSupervisor();
    const got = new Promise<Error>((resolve) => sup.once('error', resolve));
    spawn('proctree-no-such-command-for-default'); // no 'error' listener on the call
    await expect(within(got, 5000, 'error on the default supervisor')).resolves.toMatchObject({ code: 'ENOENT' });
  });

  it('bad input: killSignal 0, a Symbol in env; sparse args are "undefined"', async () => {
    expect(() => spawn('true', [], { killSignal: 0 })).toThrow(expect.objectContaining({ code: 'ERR_UNKNOWN_SIGNAL' }));
    expect(() => spawn('true', [], { env: { A: Symbol('s') as unknown as string } })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }),
    );
    // eslint-disable-next-line no-sparse-arrays
    expect((await run('echo', [, 'a'] as unknown as string[])).stdout).toBe('undefined a\n');
  });
});

// Each row of the README's "Differences from child_process" table, checked.
describe('differences from child_process (README table)', () => {
  it('kill() after the main process exited still reaches what is left of the tree', async () => {
    const t = newToken();
    const call = spawn('bash', ['-c', `setsid sleep ${t} & exit 0`], { stdio: 'ignore', leftovers: 'wait' });
    await new Promise((r) => call.on('exit', r));
    expect(await waitForLive(t, 1, 'sleep')).toHaveLength(1);
    expect(call.kill('SIGKILL')).toBe(true);
    await within(new Promise((r) => call.on('close', r)), 5000, 'close');
    expect(liveWith(t)).toEqual([]);
  });

  it('a detached call is still stopped when the harness exits', () => {
    const t = newToken();
    const script = `
      const { spawn } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      const fs = require('node:fs');
      const call = spawn('sleep', ['${t}'], { detached: true, stdio: 'ignore' });
      call.unref();
      // Exits once the sleep runs (its argv in /proc), at most 5 s later.
      const deadline = Date.now() + 5000;
      const exitOnceRunning = () => {
        let running = false;
        try {
          running = fs.readFileSync('/proc/' + call.pid + '/cmdline', 'utf8').includes('${t}');
        } catch {}
        if (running) {
          console.log('running ' + call.pid);
          process.exit(0);
        }
        if (Date.now() > deadline) process.exit(3);
        setTimeout(exitOnceRunning, 10);
      };
      call.on('spawn', exitOnceRunning);
    `;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 });
    // The sleep was running when the harness exited (else nothing proves it was stopped).
    expect(r.stdout).toMatch(/^running \d+\n$/);
    expect(r.status).toBe(0);
    expect(liveWith(t)).toEqual([]);
  });

  it('no IPC: connected is false and there is no send()', () => {
    const call = spawn('true', [], { stdio: 'ignore' });
    expect(call.connected).toBe(false);
    expect((call as unknown as { send?: unknown }).send).toBeUndefined();
  });

  it('not an instance of ChildProcess (duck-typed instead)', async () => {
    const { ChildProcess } = await import('node:child_process');
    const call = spawn('true', [], { stdio: 'ignore' });
    expect(call instanceof ChildProcess).toBe(false);
    for (const field of ['pid', 'stdin', 'stdout', 'stderr', 'stdio', 'exitCode', 'signalCode', 'killed', 'spawnfile', 'spawnargs', 'connected']) {
      expect(field in call).toBe(true);
    }
  });

  it("stdio pipes at fds 0-2 are pipes (Node's are unix sockets); extra 'pipe' entries are socketpairs, duplex as Node's", async () => {
    const r = await run('sh', ['-c', 'readlink /proc/self/fd/1 /proc/self/fd/3'], { stdio: ['pipe', 'pipe', 'pipe', 'pipe'] });
    expect(r.stdout).toMatch(/^pipe:\[\d+\]\nsocket:\[\d+\]\n$/);
    const call = spawn('true', [], { stdio: ['ignore', 'ignore', 'ignore', 'pipe'] });
    call.on('error', () => {});
    const extra = call.stdio[3] as net.Socket;
    expect(extra.readable).toBe(true);
    expect(extra.writable).toBe(true);
    await new Promise((r2) => call.on('close', r2));
  });

  it("start failures Node throws for (ENOTDIR cwd) are an 'error' event", async () => {
    const file = path.join(tmp, 'a-file');
    fs.writeFileSync(file, '');
    const call = spawn('true', [], { cwd: file });
    const seen = await within(eventsUntilClose(call), 5000, 'close');
    expect(seen.map((e) => e[0])).toEqual(['error', 'close']);
    expect(seen[0][1]).toMatchObject({ code: 'ENOTDIR', step: 'chdir' });
  });

  it("pid is a number at 'spawn' in every tier (pidns/subreaper may set it only then)", async () => {
    const ran: string[] = [];
    for (const confinement of ['cgroup', 'subreaper', 'pgroup'] as const) {
      let call: ToolCall;
      try {
        call = spawn('true', [], { confinement, stdio: 'ignore' });
      } catch {
        continue; // a tier this host cannot run
      }
      const pidAtSpawn = await new Promise<number | undefined>((r) => call.on('spawn', () => r(call.pid)));
      expect(typeof pidAtSpawn).toBe('number');
      await new Promise((r) => call.on('close', r));
      ran.push(confinement);
    }
    // Not vacuous: pgroup runs on every Linux host, so at least it was checked.
    expect(ran).toContain('pgroup');
  });

  it('a timeout beyond 2^31-1 ms means "not in this run", not 1 ms as Node', async () => {
    const call = spawn('sleep', ['0.3'], { timeout: 2 ** 40, stdio: 'ignore' });
    const [code] = await new Promise<[number | null]>((r) => call.on('close', (c) => r([c])));
    expect(code).toBe(0);
    expect(call.timedOut).toBe(false);
  });

  it('spawn and run only: no exec, execFile, fork or spawnSync', async () => {
    const api = (await import('../dist/cjs/index.js')) as Record<string, unknown>;
    for (const name of ['exec', 'execFile', 'fork', 'spawnSync', 'execSync', 'execFileSync']) expect(api[name]).toBeUndefined();
  });
});
