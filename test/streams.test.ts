// A call's pipes are read and written by the addon (native/loop/streams.h),
// not by net.Socket: stdio[3] is duplex as Node's socketpair is, and
// backpressure holds both ways (a paused stdout stops our reading and the
// writer blocks on its full pipe; a stdin write completes only once its
// bytes are in the pipe).
import { spawn as cpSpawn } from 'node:child_process';
import { type EventEmitter, once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import { Duplex, Readable, Writable } from 'node:stream';

import { describe, expect, it } from 'vitest';

import { spawn, type ToolCall } from '../dist/cjs/index.js';
import { STDIO_DRAIN_MS } from '../dist/cjs/call/ladder.js';
import { blockedIn, readHeldPastEmpty, waitUntil, within } from './helpers';


function readAll(stream: NodeJS.ReadableStream | null | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    stream?.setEncoding('utf8');
    stream?.on('data', (d: string) => (out += d));
    stream?.on('end', () => resolve(out));
    stream?.on('error', reject);
  });
}

function closed(call: EventEmitter): Promise<[number | null, string | null]> {
  return new Promise((resolve) => call.on('close', (code: number | null, signal: string | null) => resolve([code, signal])));
}

describe('stdio streams over the addon', () => {
  it("an extra 'pipe' at fd 3 is duplex: what the harness writes into it comes back, as with child_process", async () => {
    const script = 'cat <&3 >&3; echo done';
    const text = 'into fd 3 and back\n'.repeat(5000);
    const results: Array<{ back: string; out: string; status: [number | null, string | null] }> = [];
    for (const start of [cpSpawn, spawn] as const) {
      const call = (start as typeof spawn)('sh', ['-c', script], { stdio: ['ignore', 'pipe', 'inherit', 'pipe'] });
      try {
        const three = call.stdio[3] as Duplex;
        expect(three.readable).toBe(true);
        expect(three.writable).toBe(true);
        const back = readAll(three);
        const out = readAll(call.stdout);
        three.end(text);
        const status = closed(call);
        results.push(await within(Promise.all([back, out, status]).then(([b, o, s]) => ({ back: b, out: o, status: s })), 10_000, start.name));
      } finally {
        call.kill('SIGKILL');
      }
    }
    expect(results[1].back).toBe(text);
    expect(results[1]).toEqual(results[0]);
  });

  it('the streams are plain Readable/Writable/Duplex streams, no net.Socket; stdin is not readable', () => {
    const call = spawn('true', [], { stdio: ['pipe', 'pipe', 'pipe', 'pipe'] });
    expect(call.stdin).toBeInstanceOf(Writable);
    expect((call.stdin as { readable?: boolean } | null)?.readable).toBe(false);
    expect(call.stdout).toBeInstanceOf(Readable);
    expect((call.stdout as { writable?: boolean } | null)?.writable).toBe(false);
    expect(call.stdio[3]).toBeInstanceOf(Duplex);
    for (const s of call.stdio) expect(s instanceof net.Socket).toBe(false);
    return closed(call as ToolCall);
  });

  it('a stdout nobody reads stops our reading: the command blocks on its full pipe, then everything arrives', async () => {
    const size = 8_000_000;
    const call = spawn('head', ['-c', String(size), '/dev/zero'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await within(new Promise((r) => call.on('spawn', r)), 10_000, 'spawn');
      const pid = call.pid as number;
      // Without backpressure the addon would read all 8 MB into the stream's
      // buffer and head would exit: it never blocks.
      await waitUntil(() => blockedIn(pid, 'write', 1), 10_000);
      expect(blockedIn(pid, 'write', 1)).toBe(true);
      expect(call.exitCode).toBe(null);
      const stdout = call.stdout as Readable;
      // What the stream holds: its high-water mark and one chunk at most.
      expect(stdout.readableLength).toBeLessThanOrEqual(stdout.readableHighWaterMark + 64 * 1024);
      let total = 0;
      stdout.on('data', (d: Buffer) => (total += d.length));
      const [code] = await within(closed(call), 20_000, 'close');
      expect(code).toBe(0);
      expect(total).toBe(size);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it('a stream held paused past the wait for EOF after the tree is gone still gets every byte', async () => {
    // The tree ends with its output in the pipe while the reader holds the
    // stream paused (a server whose own stdout is full does, and a busy
    // machine delays reading as much) for longer than the library waits for
    // the pipe's EOF once the tree is empty (a holder outside the tree must
    // not hang 'close'). Ending that wait must not drop what the pipe holds:
    // it did (0 of 60000 bytes arrived).
    const size = 60_000; // fits in the pipe: the command exits at once
    const call = spawn('head', ['-c', String(size), '/dev/zero'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const { code, total } = await within(readHeldPastEmpty(call, call.stdout as Readable, 5 * STDIO_DRAIN_MS), 30_000, 'close');
      expect(code).toBe(0);
      expect(total).toBe(size);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it('a stdin write completes once its bytes are in the pipe, not before the command reads them', async () => {
    const size = 4_000_000;
    // fd 3 is the gate: stdin is not read until a line arrives there.
    const call = spawn('sh', ['-c', 'read gate <&3; exec wc -c'], { stdio: ['pipe', 'pipe', 'inherit', 'pipe'] });
    try {
      await within(new Promise((r) => call.on('spawn', r)), 10_000, 'spawn');
      const pid = call.pid as number;
      let gateOpen = false;
      let completedBeforeGate = false;
      const written = new Promise<Error | null | undefined>((resolve) => {
        const more = call.stdin?.write(Buffer.alloc(size, 0x61), (err) => {
          if (!gateOpen) completedBeforeGate = true;
          resolve(err);
        });
        expect(more).toBe(false);
      });
      const out = readAll(call.stdout);
      // (`read gate <&3` reads fd 3 as its fd 0.)
      await waitUntil(() => blockedIn(pid, 'read', 0), 10_000);
      expect(blockedIn(pid, 'read', 0)).toBe(true);
      // The pipe holds 64 KiB: the rest waits in the addon.
      expect(completedBeforeGate).toBe(false);
      expect(call.stdin?.writableLength).toBe(size);
      gateOpen = true;
      (call.stdio[3] as Duplex).write('go\n');
      expect(await within(written, 10_000, 'write')).toBeFalsy();
      expect(completedBeforeGate).toBe(false);
      call.stdin?.end();
      expect((await within(out, 10_000, 'wc')).trim()).toBe(String(size));
      (call.stdio[3] as Duplex).end();
      expect((await within(closed(call), 10_000, 'close'))[0]).toBe(0);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it('writes buffered while corked (or while one is in flight) go to the pipe in one system call, in order', async () => {
    const call = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      await within(new Promise((r) => call.once('spawn', r)), 10_000, 'spawn');
      const out = readAll(call.stdout);
      const stdin = call.stdin as Writable;
      const lines = Array.from({ length: 2000 }, (_, i) => `line ${i}\n`);
      // This process's write system calls, every thread's (the kernel's count).
      const writeCalls = (): number => Number((/syscw:\s*(\d+)/.exec(fs.readFileSync('/proc/self/io', 'utf8')) as RegExpExecArray)[1]);
      const before = writeCalls();
      stdin.cork();
      const done = lines.map((l) => new Promise<void>((resolve, reject) => stdin.write(l, (err) => (err ? reject(err) : resolve()))));
      stdin.uncork();
      await within(Promise.all(done), 10_000, 'writes');
      const writes = writeCalls() - before;
      stdin.end();
      expect(await within(out, 10_000, 'cat')).toBe(lines.join(''));
      // One write per chunk would be 2000.
      expect(writes).toBeLessThan(200);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it('writing to a command that closed its stdin: EPIPE on the write, not fatal, and the call closes', async () => {
    const call = spawn('sh', ['-c', 'exec <&-; read gate <&3'], { stdio: ['pipe', 'ignore', 'inherit', 'pipe'] });
    try {
      await within(new Promise((r) => call.on('spawn', r)), 10_000, 'spawn');
      const pid = call.pid as number;
      await waitUntil(() => blockedIn(pid, 'read', 0), 10_000);
      expect(blockedIn(pid, 'read', 0)).toBe(true);
      const err = await within(
        new Promise<Error | null | undefined>((resolve) => call.stdin?.write(Buffer.alloc(1_000_000), resolve)),
        10_000,
        'write',
      );
      expect(err).toMatchObject({ code: 'EPIPE', syscall: 'write' });
      (call.stdio[3] as Duplex).end('go\n');
      expect(await within(closed(call), 10_000, 'close')).toEqual([0, null]);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it("reading stdout to its end, then waiting for 'close': it comes, even when the tree was gone before the end", async () => {
    // The tree exits and is empty while the reader is still on its first
    // chunk: a stream's 'end' waits for its reader, so it comes after both.
    // A ChildProcess emits 'close' a turn after its last stream's 'close' (a
    // net.Socket's comes from its handle's close callback); so does a call,
    // or this 'close' would come before the loop ends (`for await` ends at
    // the stream's 'close') and never be seen.
    const call = spawn('sh', ['-c', 'echo one; sleep 0.2; echo two']);
    try {
      const gone = once(call, 'empty');
      let text = '';
      for await (const chunk of call.stdout as Readable) {
        if (text === '') await within(gone, 10_000, 'empty');
        text += String(chunk);
      }
      expect(text).toBe('one\ntwo\n');
      expect(await within(once(call, 'close'), 10_000, "'close' after reading stdout to its end")).toEqual([0, null]);
    } finally {
      call.kill('SIGKILL');
    }
  });

  it("reading stdout to its end, then waiting for 'exit': what was in the pipe at the exit, and its end, come first", async () => {
    // With child_process this works: the kernel closes the dying command's
    // end of the pipe before it reports the exit, and a net.Socket that is
    // reading reads what is there (and the EOF) before Node hears of it.
    // Our reads are the addon's, a chunk per turn, and 'exit' overtook the
    // last of them 9 times in 10 here: 'exit' waits for that backlog now.
    const input = Buffer.alloc(1 << 20, 'a');
    for (let i = 0; i < 5; i++) {
      const call = spawn('cat', []);
      try {
        call.stdin?.end(input);
        let n = 0;
        for await (const chunk of call.stdout as Readable) n += (chunk as Buffer).length;
        expect(n).toBe(input.length);
        expect(await within(once(call, 'exit'), 10_000, "'exit' after reading stdout to its end")).toEqual([0, null]);
      } finally {
        call.kill('SIGKILL');
      }
    }
  });

  it("'exit' does not wait for a pipe that another process keeps filling, nor for one nobody reads", async () => {
    // The daemon writes for as long as it lives: only what the pipe held at
    // the exit is waited for, so 'exit' comes while stdout is still open.
    const writer = '(while :; do echo 0123456789abcdef0123456789abcdef; done) & sleep 0.2; exit 3';
    for (const read of [true, false]) {
      const call = spawn('sh', ['-c', writer], { grace: 100 });
      try {
        if (read) call.stdout?.on('data', () => {});
        expect(await within(once(call, 'exit'), 10_000, `'exit' with the pipe ${read ? 'read' : 'unread'}`)).toEqual([3, null]);
        expect(call.stdout?.readableEnded).toBe(false);
      } finally {
        await call.terminate();
      }
    }
  });
});
