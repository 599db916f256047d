// Terminals (options.pty): real programs on a real pseudo-terminal, nothing
// mocked. What the command sees is read from the command itself (tty, stty,
// isatty); that nothing is left is read from the kernel (cgroup membership,
// a /proc scan for each test's token, /proc/self/fd, /dev/pts).
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { afterAll, describe, expect, it } from 'vitest';

import { type Confinement, PtyStream, run, spawn, Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { STDIO_DRAIN_MS } from '../dist/cjs/call/ladder.js';
import { cgroupMembers, killCgroup, killTokens, liveWith, openFdCount, readHeldPastEmpty, statFields, token, waitForLive, waitUntil, zombieChildren } from './helpers';

const tiers: Confinement[] = ['cgroup', 'pidns', 'subreaper', 'pgroup'];

// The cleanup test starts a tmux server inside a call's terminal. CI installs
// tmux (.ci/run) and sets PROCTREE_REQUIRE_TMUX=1, so there it never skips.
const tmuxRuns = spawnSync('tmux', ['-V'], { encoding: 'utf8' }).status === 0;
if (!tmuxRuns) {
  if (process.env.PROCTREE_REQUIRE_TMUX === '1') throw new Error('tmux is required (PROCTREE_REQUIRE_TMUX=1) but does not run: apt-get install tmux');
  console.warn('test/pty.test.ts: tmux is not installed, the tmux cleanup test is skipped (apt-get install tmux)');
}
const calls: ToolCall[] = [];
const tokens: string[] = [];
const tmpDirs: string[] = [];

const closes = new WeakMap<ToolCall, Promise<[number | null, NodeJS.Signals | null]>>();

function track(call: ToolCall): ToolCall {
  calls.push(call);
  call.on('error', () => {});
  closes.set(call, new Promise((resolve) => call.once('close', (code, signal) => resolve([code, signal]))));
  return call;
}

function tmpDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-pty-'));
  tmpDirs.push(dir);
  return dir;
}

afterAll(() => {
  for (const c of calls) killCgroup(c.cgroup);
  killTokens(tokens);
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

/** What a terminal has shown so far, and a wait for the next thing to show. */
class Screen {
  text = '';
  constructor(readonly call: ToolCall) {
    call.pty?.on('data', (chunk: Buffer | string) => {
      this.text += chunk.toString();
    });
  }

  /** Resolves with the match once `re` matches what was shown since the last take; consumes up to it. */
  async take(re: RegExp, timeoutMs = 10_000): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = re.exec(this.text);
      if (m) {
        this.text = this.text.slice(m.index + m[0].length);
        return m;
      }
      if (Date.now() > deadline) throw new Error(`the terminal never showed ${re}; it shows ${JSON.stringify(this.text)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** Entries of /dev/pts that are terminals (not ptmx). */
function ptsEntries(): Set<string> {
  return new Set(fs.readdirSync('/dev/pts').filter((n) => /^\d+$/.test(n)));
}

/**
 * Pids holding the master of /dev/pts/<n> open: a ptmx descriptor whose
 * fdinfo says `tty-index: n`. The entry lives exactly as long as one does.
 */
function masterHolders(n: string): number[] {
  const out: number[] = [];
  for (const pid of fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    let fds: string[];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // exited, or a kernel thread
    }
    for (const fd of fds) {
      try {
        if (!fs.readlinkSync(`/proc/${pid}/fd/${fd}`).endsWith('ptmx')) continue;
        if (new RegExp(`^tty-index:\\s*${n}$`, 'm').test(fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))) out.push(Number(pid));
      } catch {
        // closed while we looked
      }
    }
  }
  return out;
}

/** Our own fds that are a terminal's master or slave. */
function ptyFds(): string[] {
  const out: string[] = [];
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
      if (target === '/dev/ptmx' || target.startsWith('/dev/pts/')) out.push(`${fd} -> ${target}`);
    } catch {
      // the readdir's own fd
    }
  }
  return out;
}

/** An interactive bash in a terminal, at its first prompt (a PS1 of its own, matched at the end of the screen). */
async function interactiveBash(): Promise<{ call: ToolCall; screen: Screen; prompt: RegExp }> {
  const ps1 = `pt-${randomBytes(3).toString('hex')}$ `;
  const call = track(
    spawn('bash', ['--norc', '--noprofile', '--noediting', '-i'], { pty: true, env: { PATH: process.env.PATH, PS1: ps1, HOME: os.tmpdir() } }),
  );
  const screen = new Screen(call);
  const prompt = new RegExp(`${ps1.replace(/\$/g, '\\$')}$`);
  await screen.take(prompt);
  return { call, screen, prompt };
}

/** 'close' of a tracked call (listened for from the start: it may come before the test awaits it). */
const closed = (call: ToolCall): Promise<[number | null, NodeJS.Signals | null]> => {
  const p = closes.get(call);
  if (!p) throw new Error('closed() needs a tracked call');
  return p;
};

describe('what the command sees', () => {
  it('tty prints the /dev/pts path the call reports', async () => {
    const call = track(spawn('tty', [], { pty: true }));
    const screen = new Screen(call);
    await closed(call);
    expect(call.exitCode).toBe(0);
    expect(call.pty?.path).toMatch(/^\/dev\/pts\/\d+$/);
    expect(screen.text).toBe(`${call.pty?.path}\r\n`);
    expect(call.stdin).toBeNull();
    expect(call.stdout).toBeNull();
    expect(call.stderr).toBeNull();
  });

  it('python sees a terminal on stdin, stdout and stderr, TERM set, a session and controlling terminal of its own', async () => {
    const py = 'import os, sys; print(sys.stdin.isatty(), sys.stdout.isatty(), sys.stderr.isatty(), os.environ["TERM"], os.getsid(0) == os.getpid(), os.tcgetpgrp(0) == os.getpid())';
    const r = await run('python3', ['-c', py], { pty: true, env: { ...process.env, TERM: 'dumb' } });
    expect(r.stdout).toBe('True True True xterm-256color True True\r\n');
    expect(r.stderr).toBe('');
    const named = await run('python3', ['-c', 'import os; print(os.environ["TERM"])'], { pty: { term: 'vt100' } });
    expect(named.stdout).toBe('vt100\r\n');
  });

  it('stty size prints the size given, and what resize() set after a resize, with SIGWINCH to the foreground', async () => {
    const py = [
      'import os, signal, sys',
      "signal.signal(signal.SIGWINCH, lambda *a: print('winch', *os.get_terminal_size(), flush=True))",
      "os.system('stty size')",
      "print('ready', flush=True)",
      'sys.stdin.readline()',
      "os.system('stty size')",
    ].join('\n');
    const call = track(spawn('python3', ['-c', py], { pty: { cols: 100, rows: 30 } }));
    const screen = new Screen(call);
    await screen.take(/^30 100\r\nready\r\n$/);
    expect([call.pty?.cols, call.pty?.rows]).toEqual([100, 30]);
    call.resize(132, 43);
    expect([call.pty?.cols, call.pty?.rows]).toEqual([132, 43]);
    // The kernel sends SIGWINCH to the foreground group (python, the session leader).
    await screen.take(/^winch 132 43\r\n$/);
    call.pty?.write('\r');
    await screen.take(/^\r\n43 132\r\n$/);
    await closed(call);
    expect(call.exitCode).toBe(0);
  });

  it('the default window is 80x24; a size set while queued is the one it starts with; Supervisor#spawn and #run', async () => {
    expect((await run('stty', ['size'], { pty: true })).stdout).toBe('24 80\r\n');
    const sup = new Supervisor({ name: `ptyq-${process.pid}`, maxConcurrent: 1 });
    try {
      const first = track(sup.spawn('sleep', ['0.3'], { stdio: 'ignore' }));
      const queued = track(sup.spawn('stty', ['size'], { pty: true }));
      expect(first.started).toBe(true);
      expect(queued.started).toBe(false);
      queued.resize(90, 10);
      const screen = new Screen(queued);
      await closed(queued);
      expect(screen.text).toBe('10 90\r\n');
      const r = await sup.run('sh', ['-c', 'tty; stty size'], { pty: { cols: 40, rows: 5 } });
      expect(r.stdout).toMatch(/^\/dev\/pts\/\d+\r\n5 40\r\n$/);
    } finally {
      await sup.shutdown();
    }
  });

  it('a program that reads a line from the terminal gets what write() sent', async () => {
    const call = track(spawn('bash', ['-c', 'echo ready; read -r line; printf "got:%s:\\n" "$line"'], { pty: true }));
    const screen = new Screen(call);
    await screen.take(/ready\r\n/);
    call.pty?.write('hello terminal\r');
    // The terminal echoes what is typed, then the program prints what it read.
    await screen.take(/^hello terminal\r\ngot:hello terminal:\r\n$/);
    await closed(call);
    expect(call.exitCode).toBe(0);
  });

  it('writes before the start are typed once the terminal exists', async () => {
    const call = track(spawn('head', ['-n', '1'], { pty: true }));
    call.pty?.write('early line\n');
    const screen = new Screen(call);
    await closed(call);
    expect(screen.text).toBe('early line\r\nearly line\r\n');
  });

  it('bash -i with a prompt: commands typed run, the foreground group is what runs now, exit ends the call', async () => {
    const { call, screen, prompt } = await interactiveBash();
    expect(call.pty?.foreground()).toMatchObject({ pid: call.pid, comm: 'bash' });
    call.pty?.write('echo $((6 * 7))\r');
    await screen.take(new RegExp(`^echo \\$\\(\\(6 \\* 7\\)\\)\\r\\n42\\r\\n${prompt.source}`));
    // A duration unique to this test: its sleep is found by it alone.
    const t = token(30);
    tokens.push(t);
    call.pty?.write(`sleep ${t}\r`);
    await screen.take(new RegExp(`sleep ${t.replace('.', '\\.')}\r\n`));
    await waitUntil(() => call.pty?.foreground()?.comm === 'sleep', 5000);
    const fg = call.pty?.foreground();
    expect(fg?.comm).toBe('sleep');
    expect(fg?.pgid).toBe(fg?.pid);
    expect(fg?.sid).toBe(call.pid);
    // ^C is the terminal's interrupt: the line discipline signals the foreground group.
    call.pty?.write('\x03');
    await screen.take(prompt);
    expect(call.pty?.foreground()?.comm).toBe('bash');
    call.pty?.write('exit 7\r');
    const [code] = await closed(call);
    expect(code).toBe(7);
    expect(call.pty?.foreground()).toBeNull();
  });

  it("foreground() when the group's leader is gone: a process of the call in that group", async () => {
    const { call, screen, prompt } = await interactiveBash();
    const t = token(30);
    tokens.push(t);
    // The pipeline's group is named after its first process, which exits at
    // once and is reaped by bash; sleep holds the terminal in that group.
    call.pty?.write(`/bin/true | sleep ${t}\r`);
    await waitUntil(() => call.pty?.foreground()?.comm === 'sleep', 10_000);
    const fg = call.pty?.foreground();
    expect(fg?.pgid).not.toBe(fg?.pid);
    expect(fg?.sid).toBe(call.pid);
    // The kernel's view: the process named is in the group its terminal
    // has in the foreground (stat's pgrp and tpgid), and no process of the
    // group's number is in that group any more.
    const mine = statFields(fg?.pid ?? 0);
    expect(mine && [Number(mine[2]), Number(mine[5])]).toEqual([fg?.pgid, fg?.pgid]);
    const leader = statFields(fg?.pgid ?? 0);
    expect(leader === null || Number(leader[2]) !== fg?.pgid).toBe(true);
    call.pty?.write('\x03');
    await screen.take(prompt);
    expect(call.pty?.foreground()?.comm).toBe('bash');
    call.pty?.write('exit\r');
    await closed(call);
  });
});

describe('output and its end', () => {
  it('EIO at the end is a normal end: no error, the last bytes (no newline) arrive, the stream and the call close', async () => {
    const call = track(spawn('printf', ['last words'], { pty: true }));
    const errors: Error[] = [];
    call.on('error', (e) => errors.push(e));
    call.pty?.on('error', (e) => errors.push(e));
    const screen = new Screen(call);
    const ptyClosed = new Promise((r) => call.pty?.once('close', r));
    await closed(call);
    await ptyClosed;
    expect(screen.text).toBe('last words');
    expect(errors).toEqual([]);
    expect(call.pty?.readableEnded).toBe(true);
    // Typing into a terminal that is gone goes nowhere, without an error.
    expect(call.pty?.writable).toBe(false);
  });

  it('everything a daemon wrote before the tree emptied is delivered (leftovers: wait)', async () => {
    // The main process waits until the daemon is in a session of its own:
    // when a terminal's session leader exits, its foreground group gets SIGHUP.
    // The daemon prints once the main has printed (the main makes a file
    // then), not after a fixed 0.3 s a loaded machine can outlast.
    const dir = tmpDir();
    const up = path.join(dir, 'up');
    const go = path.join(dir, 'go');
    const script = `setsid sh -c ": > ${up}; while [ ! -e ${go} ]; do sleep 0.01; done; echo from the daemon" & while [ ! -e ${up} ]; do sleep 0.01; done; echo main done; : > ${go}`;
    const r = await run('bash', ['-c', script], { pty: true, leftovers: 'wait' });
    expect(r.stdout).toBe('main done\r\nfrom the daemon\r\n');
    expect(r.cleanup).toBeNull();
  });

  it('a terminal held paused past the wait for its end after the tree is gone still gives every byte', async () => {
    // As for pipes (streams.test.ts): the library stops waiting for the
    // terminal's end 100 ms after the tree is empty; what the reader has not
    // read by then (it holds the stream paused) must still arrive. It was
    // dropped: 0 of 3000 bytes.
    const call = spawn('head', ['-c', '3000', '/dev/zero'], { pty: true });
    const { code, total } = await readHeldPastEmpty(call, call.pty as PtyStream, 5 * STDIO_DRAIN_MS);
    expect(code).toBe(0);
    expect(total).toBe(3000);
  });

  it('a daemon that escaped and holds the terminal is a leftover: the ladder stops it, the call closes by itself', async () => {
    const t = token(30);
    tokens.push(t);
    const up = path.join(tmpDir(), 'up');
    const script = `setsid sh -c ": > ${up}; echo daemon up; exec sleep ${t}" & while [ ! -e ${up} ]; do sleep 0.01; done; echo main done`;
    const call = track(spawn('bash', ['-c', script], { pty: true, grace: 500 }));
    const leftovers = new Promise<number>((resolve) => call.once('leftover', (procs) => resolve(procs.length)));
    const r = await call.done;
    expect(await leftovers).toBe(1);
    expect(r.stdout).toContain('daemon up\r\n');
    expect(r.stdout).toContain('main done\r\n');
    expect(r.cleanup).toMatchObject({ reason: 'leftovers', escaped: 1, leftovers: [] });
    expect(liveWith(t)).toEqual([]);
  });

  it('10 MB through the terminal (set raw) arrive complete, by run() and by reading call.pty', async () => {
    const dir = tmpDir();
    const file = path.join(dir, 'data');
    const data = randomBytes(10 * 1024 * 1024);
    fs.writeFileSync(file, data);
    const want = createHash('sha256').update(data).digest('hex');
    // raw: no \n → \r\n, no ^C or ^S interpreted; what the command writes is what arrives.
    const cmd = `stty raw -echo && cat ${file}`;
    const r = await run('sh', ['-c', cmd], { pty: true, encoding: 'buffer' });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.length).toBe(data.length);
    expect(createHash('sha256').update(r.stdout).digest('hex')).toBe(want);

    const call = track(spawn('sh', ['-c', cmd], { pty: true }));
    const hash = createHash('sha256');
    let size = 0;
    call.pty?.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      size += chunk.length;
    });
    await closed(call);
    expect(size).toBe(data.length);
    expect(hash.digest('hex')).toBe(want);
  });

  it('1 MB typed into a raw terminal arrives complete (writes wait while the input queue is full)', async () => {
    const data = randomBytes(1024 * 1024);
    const call = track(spawn('sh', ['-c', `stty raw -echo && echo ready && head -c ${data.length} | sha256sum`], { pty: true }));
    const screen = new Screen(call);
    // raw: no output processing either, so no \r before the \n.
    await screen.take(/ready\n/);
    const written = new Promise<void>((resolve, reject) => call.pty?.write(data, (err) => (err ? reject(err) : resolve())));
    await written;
    await closed(call);
    expect(screen.text.trim()).toBe(`${createHash('sha256').update(data).digest('hex')}  -`);
  });

  it('run(): maxBuffer keeps the first bytes of the terminal output; input is typed, then end of input', async () => {
    // Typed before the command runs: the terminal echoes it at once, then cat prints what it read.
    const r = await run('sh', ['-c', 'cat; echo "after eof"'], { pty: true, input: 'a line\nno newline', maxBuffer: 1024 });
    expect(r.stdout).toBe('a line\r\nno newlinea line\r\nno newlineafter eof\r\n');
    expect(r.stdoutTruncated).toBe(false);
    const big = await run('sh', ['-c', 'head -c 100000 /dev/zero | tr "\\0" x'], { pty: true, maxBuffer: 1000 });
    expect(big.stdout).toBe('x'.repeat(1000));
    expect(big.stdoutTruncated).toBe(true);
    expect(big.exitCode).toBe(0);
    // Without input, end of input comes at once: cat ends as on a closed stdin pipe.
    const eof = await run('cat', [], { pty: true, timeout: 5000 });
    expect(eof.timedOut).toBe(false);
    expect(eof.exitCode).toBe(0);
  });

  it('a command that closes its terminal fds before it exits (cat at EOF) is not hung up: the master stays open until the tree is empty', async () => {
    // cat closes stdin, stdout and stderr, then exits: in between, no fd of
    // the slave is open and reading the master gives EIO (the output's end).
    // Closing the master then would SIGHUP cat; before the fix, 30-40 % of
    // these runs ended with signal SIGHUP.
    const results = [];
    for (let i = 0; i < 25; i++) results.push(await run('cat', [], { pty: true, timeout: 10_000 }));
    expect(results.map((r) => r.signal ?? r.exitCode)).toEqual(results.map(() => 0));
  });

  it('pty.encoding gives text on call.pty while done still collects the bytes', async () => {
    const call = track(spawn('printf', ['h\\303\\251llo'], { pty: { encoding: 'utf8' } }));
    const chunks: Array<string | Buffer> = [];
    call.pty?.on('data', (c: string | Buffer) => chunks.push(c));
    const r = await call.done;
    expect(chunks.every((c) => typeof c === 'string')).toBe(true);
    expect(chunks.join('')).toBe('héllo');
    expect(r.stdout).toBe('héllo');
  });

  it("the output options work on a terminal (one stream, 'stdout'): onOutput, lines(), all, idleTimeout, keep", async () => {
    const seen: string[] = [];
    const call = track(
      spawn('sh', ['-c', 'echo one; echo two >&2; printf three'], { pty: true, all: true, onOutput: (chunk, stream) => seen.push(`${stream}:${chunk}`) }),
    );
    const lines: string[] = [];
    for await (const line of call.lines()) lines.push(line);
    const r = await call.done;
    expect(lines).toEqual(['one', 'two', 'three']);
    expect(seen.join('').replace(/stdout:/g, '')).toBe('one\r\ntwo\r\nthree');
    expect(seen.every((c) => c.startsWith('stdout:'))).toBe(true);
    expect(r.stdout).toBe('one\r\ntwo\r\nthree');
    expect(r.all).toBe(r.stdout);
    expect(r.stderr).toBe('');
    // A command waiting for input on its terminal shows nothing: idleTimeout
    // stops it (spawn: run() would type the end of input).
    // 2 s: the idle clock runs from the start, and a loaded machine may take long to print.
    const idle = await track(spawn('sh', ['-c', 'echo waiting; read x'], { pty: true, idleTimeout: 2000, timeout: 10_000 })).done;
    expect(idle.cleanup?.reason).toBe('idle');
    expect(idle.stdout).toBe('waiting\r\n');
    const tail = await run('sh', ['-c', 'for i in $(seq 1 200); do echo "line $i"; done'], { pty: true, maxBuffer: 20, keep: 'tail' });
    expect(tail.stdout).toBe('\r\nline 199\r\nline 200\r\n'.slice(-20));
    expect(tail.stdoutTruncated).toBe(true);
  });

  it('destroying call.pty hangs the terminal up (SIGHUP to the session): the call still ends and closes', async () => {
    const t = token(30);
    tokens.push(t);
    const call = track(spawn('sleep', [t], { pty: true }));
    await new Promise((r) => call.once('spawn', r));
    call.pty?.destroy();
    const [code, signal] = await closed(call);
    expect(code).toBeNull();
    expect(signal).toBe('SIGHUP');
  });
});

describe('validation', () => {
  it('rejects what a terminal cannot be', () => {
    expect(() => spawn('true', [], { pty: 'yes' as unknown as boolean })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => spawn('true', [], { pty: { cols: 0 } })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => spawn('true', [], { pty: { rows: 70000 } })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => spawn('true', [], { pty: { cols: 1.5 } })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => spawn('true', [], { pty: { term: '' } })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => spawn('true', [], { pty: { encoding: 'klingon' as BufferEncoding } })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }),
    );
    expect(() => spawn('true', [], { pty: true, stdio: 'inherit' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => spawn('true', [], { pty: true, stdio: ['pipe', 'ignore', 'pipe'] })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }),
    );
    const plain = track(spawn('true', [], { stdio: 'ignore' }));
    expect(plain.pty).toBeNull();
    expect(() => plain.resize(80, 24)).toThrow(expect.objectContaining({ code: 'ERR_PROCTREE_NO_PTY' }));
    const call = track(spawn('true', [], { pty: true }));
    expect(call.pty).toBeInstanceOf(PtyStream);
    expect(() => call.resize(0, 24)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => call.resize('80' as unknown as number, 24)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
  });

  it('an extra pipe (fd 3) still works beside the terminal; a command that cannot start ends the terminal too', async () => {
    const call = track(spawn('sh', ['-c', 'echo to-terminal; echo to-fd3 >&3'], { pty: true, stdio: [null, null, null, 'pipe'] }));
    const screen = new Screen(call);
    let fd3 = '';
    (call.stdio[3] as NodeJS.ReadableStream).on('data', (d: Buffer) => (fd3 += d.toString()));
    await closed(call);
    expect(screen.text).toBe('to-terminal\r\n');
    expect(fd3).toBe('to-fd3\n');
    const err = await run('proctree-no-such-command', [], { pty: true }).catch((e: Error) => e);
    expect(err).toMatchObject({ code: 'ENOENT' });
  });
});

describe.each(tiers)('confinement %s', (tier) => {
  const escapeProof = tier !== 'pgroup';

  it('tty, stty size and a resize work', async () => {
    const call = track(spawn('bash', ['-c', 'tty; stty size; read x; stty size'], { pty: { cols: 77, rows: 11 }, confinement: tier }));
    expect(call.confinement).toBe(tier);
    const screen = new Screen(call);
    await screen.take(/^\/dev\/pts\/\d+\r\n11 77\r\n$/);
    call.resize(50, 20);
    call.pty?.write('\r');
    await screen.take(/^\r\n20 50\r\n$/);
    await closed(call);
    expect(call.exitCode).toBe(0);
  });

  it(`a shell that starts \`setsid sleep &\`${tmuxRuns ? ' and a tmux server' : ''} leaves nothing after terminate()`, async () => {
    const t = token(1000);
    tokens.push(t);
    const tmuxDir = tmpDir();
    // tmux's server double-forks into a session of its own, its pane's sleep
    // in another; its socket lives in the test's own TMUX_TMPDIR.
    const tmux = tmuxRuns ? `tmux new-session -d -s s${t.replace('.', '')} "sleep ${t}"; ` : '';
    const script = `setsid sleep ${t} & ${tmux}echo started; exec sleep ${t}`;
    const call = track(
      spawn('bash', ['-c', script], { pty: true, confinement: tier, env: { PATH: process.env.PATH, TMUX_TMPDIR: tmuxDir, HOME: tmuxDir } }),
    );
    const screen = new Screen(call);
    await screen.take(/started\r\n/);
    // setsid's sleep, tmux's pane sleep and the main sleep; the tmux server.
    const sleeps = tmuxRuns ? 3 : 2;
    expect((await waitForLive(t, sleeps, 'sleep')).length).toBe(sleeps);
    const sleepPids = liveWith(t, 'sleep');
    expect(sleepPids).toHaveLength(sleeps);
    const server = tmuxRuns ? await waitForLive(t, 1, 'tmux: server') : [];
    expect(server.length).toBe(tmuxRuns ? 1 : 0);
    // The sleeps (never an empty list) and the tmux server are members of the call's cgroup.
    if (tier === 'cgroup') expect(cgroupMembers(call.cgroup as string)).toEqual(expect.arrayContaining([...sleepPids, ...server]));
    const report = await call.terminate({ grace: 1000 });
    await closed(call);
    expect(report.leftovers).toEqual([]);
    if (escapeProof) {
      // The whole tree, tmux's server and pane included, is gone (a /proc scan for the token).
      expect(liveWith(t)).toEqual([]);
      if (tier === 'cgroup') {
        expect(cgroupMembers(call.cgroup as string)).toEqual([]);
        expect(fs.existsSync(call.cgroup as string)).toBe(false);
      }
    } else {
      // pgroup: what left the session is a known miss; the test stops it itself.
      for (const pid of liveWith(t)) process.kill(pid, 'SIGKILL');
    }
  });

  it('a worker thread runs a terminal call', async () => {
    const dist = path.resolve(__dirname, '../dist/cjs/index.js');
    const worker = new Worker(
      `const { run } = require(${JSON.stringify(dist)});
       const { parentPort } = require('node:worker_threads');
       run('sh', ['-c', 'tty; stty size'], { pty: { cols: 33, rows: 3 }, confinement: ${JSON.stringify(tier)} })
         .then((r) => parentPort.postMessage(r.stdout), (e) => parentPort.postMessage('error ' + e.message));`,
      { eval: true },
    );
    const out = await new Promise<string>((resolve) => worker.once('message', resolve));
    await worker.terminate();
    expect(out).toMatch(/^\/dev\/pts\/\d+\r\n3 33\r\n$/);
  });
});

describe('proctree run --pty', () => {
  const bin = path.resolve(__dirname, '..', 'bin', 'proctree.js');

  it('stdin not a terminal: the command still gets one, bytes are piped through, the end of stdin is ^D', () => {
    const r = spawnSync(process.execPath, [bin, 'run', '--pty', '--', 'bash', '-c', 'tty; stty size; read -r x; echo "got $x"; cat; echo "status of cat $?"'], {
      input: 'hello\nrest',
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.status).toBe(0);
    // What was typed is echoed by the terminal when it arrives (which may be
    // before or after the first lines), then read; the last partial line,
    // then the end of input, reach cat.
    const shown = r.stdout.replace('hello\r\nrest', '');
    expect(shown).toMatch(/^\/dev\/pts\/\d+\r\n24 80\r\ngot hello\r\nreststatus of cat 0\r\n$/);
    const py = spawnSync(process.execPath, [bin, 'run', '--pty', '--', 'python3', '-c', 'import sys; print(sys.stdout.isatty())'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
    });
    expect(py.stdout).toBe('True\r\n');
  });

  it("on a user's terminal: raw keys, size and TERM forwarded, SIGWINCH followed, the mode restored, the status passed on", async () => {
    const dir = tmpDir();
    const py = path.join(dir, 'winch.py');
    fs.writeFileSync(
      py,
      [
        'import os, signal, sys, time',
        "signal.signal(signal.SIGWINCH, lambda *a: print('winch', *os.get_terminal_size(), flush=True))",
        "print('size', *os.get_terminal_size(), os.environ['TERM'], flush=True)",
        "print('read', repr(sys.stdin.readline()), flush=True)",
        'time.sleep(30)',
      ].join('\n'),
    );
    // The user's terminal is a proctree terminal too; bash shows its mode before and after.
    const script = `stty -g; ${JSON.stringify(process.execPath)} ${bin} run --pty -- python3 ${py}; echo "status $?"; stty -g`;
    const call = track(spawn('bash', ['-c', script], { pty: { cols: 100, rows: 30, term: 'screen' } }));
    const screen = new Screen(call);
    const before = (await screen.take(/^([0-9a-f:]+)\r\n/))[1];
    await screen.take(/^size 100 30 screen\r\n$/);
    call.resize(120, 40);
    await screen.take(/^winch 120 40\r\n$/);
    call.pty?.write('abc\r');
    // Output passes through unprocessed (no \r\r\n): the user's terminal is raw, output processing included.
    await screen.take(/^abc\r\nread 'abc\\n'\r\n$/);
    // ^C is a key like any other: the command's terminal makes it SIGINT for python, not for proctree.
    call.pty?.write('\x03');
    await screen.take(/KeyboardInterrupt\r\nstatus 130\r\n/);
    const after = (await screen.take(/^([0-9a-f:]+)\r\n/))[1];
    expect(after).toBe(before);
    await closed(call);
    expect(call.exitCode).toBe(0);
  });
});

describe('resources', () => {
  it('200 terminal calls leave no fd, no /dev/pts entry, no zombie and no cgroup', async () => {
    const first = await run('true', [], { pty: true });
    const subtree = path.dirname(first.cgroup);
    // Its terminal closed before the count starts.
    await waitUntil(() => ptyFds().length === 0, 5000);
    expect(ptyFds()).toEqual([]);
    const fdsBefore = openFdCount();
    // Durations unique to this test: its sleeps are found by it alone.
    const t = token(30);
    tokens.push(t);
    const ptsBefore = ptsEntries();
    const used = new Set<string>();
    for (let batch = 0; batch < 20; batch++) {
      await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          switch (i % 5) {
            case 0: {
              const r = await run('tty', [], { pty: true });
              used.add(r.stdout.trim());
              return;
            }
            case 1: {
              // Stopped by the ladder, with a daemon holding the terminal.
              const call = track(spawn('sh', ['-c', `setsid sleep ${t} & echo up; sleep ${t}`], { pty: true, grace: 100 }));
              const screen = new Screen(call);
              await screen.take(/up/);
              used.add(call.pty?.path ?? '');
              await call.terminate();
              await closed(call);
              return;
            }
            case 2: {
              // The harness hangs up first.
              const call = track(spawn('sleep', [t], { pty: true, grace: 100 }));
              await new Promise((r) => call.once('spawn', r));
              call.pty?.destroy();
              await closed(call);
              return;
            }
            case 3:
              await run('proctree-no-such-command-xyz', [], { pty: true }).catch(() => null);
              return;
            default: {
              const r = await run('sh', ['-c', 'read x; echo $x'], { pty: true, input: 'typed\n' });
              expect(r.stdout).toBe('typed\r\ntyped\r\n');
            }
          }
        }),
      );
    }
    // Every terminal the calls had is gone from /dev/pts, unless it was there
    // before, or its number was freed and then taken by a terminal of another
    // test file running alongside (a master held by none of this harness's
    // processes).
    const foreign = (n: string): boolean => {
      const holders = masterHolders(n);
      const ours = new Set([process.pid, ...cgroupMembers(subtree)]);
      return holders.length > 0 && holders.every((pid) => !ours.has(pid));
    };
    const left = (): string[] => [...ptsEntries()].filter((n) => !ptsBefore.has(n) && used.has(`/dev/pts/${n}`) && !foreign(n));
    // Closing descriptors and reaping take a turn or two after the last close: polled, bounded.
    await waitUntil(() => ptyFds().length === 0 && openFdCount() <= fdsBefore && zombieChildren().length === 0 && left().length === 0, 5000);
    expect(ptyFds()).toEqual([]);
    expect(openFdCount()).toBeLessThanOrEqual(fdsBefore);
    expect(zombieChildren()).toEqual([]);
    expect(left()).toEqual([]);
    expect(liveWith(t)).toEqual([]);
    const leaves = fs.existsSync(subtree) ? fs.readdirSync(subtree).filter((n) => /^c\d+$/.test(n)) : [];
    expect(leaves).toEqual([]);
  });
});

