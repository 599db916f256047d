// Output a model can read: head/tail/both within a byte budget, exact on 50 MB
// of multi-byte text; stdout and stderr merged in arrival order; streaming
// (onOutput, lines()); idleTimeout; output collected from the first byte
// whenever `done` is read; and the usage of the whole tree.
import fs from 'node:fs';

import { afterAll, describe, expect, it } from 'vitest';

import { type Confinement, run, type RunResult, spawn, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, liveWith, token, leafReleased } from './helpers';
import { fileSupervisors } from './supervisors';

const calls: ToolCall[] = [];
const cgroups: string[] = [];
afterAll(async () => {
  for (const c of calls) killCgroup(c.cgroup);
  for (const c of cgroups) killCgroup(c);
});

const { supervisor } = fileSupervisors('output');

// 50 MiB of numbered lines of 1-, 2-, 3- and 4-byte characters: no two
// lines alike, so an off-by-one anywhere shows. The test and the command
// build it with the same function; the command writes it in 77777-byte
// writes, so reads from the pipe end anywhere, inside characters too.
const GEN = `function gen() {
  const parts = [];
  let n = 0;
  for (let i = 0; n < 50 * 1024 * 1024; i++) {
    const line = i + ' é€😀' + 'x'.repeat(i % 7) + '\\n';
    parts.push(line);
    n += Buffer.byteLength(line);
  }
  return Buffer.from(parts.join(''));
}`;
const WRITER = `${GEN}
const b = gen();
let o = 0;
(function next() {
  while (o < b.length) {
    const piece = b.subarray(o, o + 77777);
    o += piece.length;
    if (!process.stdout.write(piece)) return process.stdout.once('drain', next);
  }
})();`;
// eslint-disable-next-line @typescript-eslint/no-implied-eval
const full = new Function(`${GEN}; return gen();`)() as Buffer;
const total = full.length;
const isContinuation = (at: number): boolean => (full[at] & 0xc0) === 0x80;

// What a reader of the text expects, computed without the library's code:
// decode the kept bytes and drop the replacement characters that a cut
// character decodes to (the text itself has none).
const expectedHead = (bytes: number): string => full.subarray(0, bytes).toString('utf8').replace(/\ufffd+$/, '');
const expectedTail = (bytes: number): string => full.subarray(total - bytes).toString('utf8').replace(/^\ufffd+/, '');

/** A budget near 1 MB whose cuts fall inside characters: at `head` from the start and `tail` from the end. */
function budget(head: (m: number) => number, tail: (m: number) => number): number {
  for (let m = 1_000_000; ; m++) {
    const h = head(m);
    const t = tail(m);
    if ((h === 0 || isContinuation(h)) && (t === 0 || isContinuation(total - t))) return m;
  }
}

function writer<T extends string | Buffer = string>(options: object): Promise<RunResult<T>> {
  return run(process.execPath, ['-e', WRITER], options) as Promise<RunResult<T>>;
}

describe('maxBuffer with keep, exact on 50 MB of multi-byte text', () => {
  it("keep: 'head' — the first bytes, a character cut by the limit left out whole", async () => {
    const m = budget((x) => x, () => 0);
    const r = await writer({ maxBuffer: m, keep: 'head' });
    expect(r.exitCode).toBe(0);
    const head = expectedHead(m);
    expect(Buffer.byteLength(head)).toBeLessThan(m);
    expect(r.stdout).toBe(head);
    expect(r.stdoutOmitted).toBe(total - Buffer.byteLength(head));
    expect(r.stdoutTruncated).toBe(true);
  });

  it("keep: 'tail' — the last bytes, starting on a whole character", async () => {
    const m = budget(() => 0, (x) => x);
    const r = await writer({ maxBuffer: m, keep: 'tail' });
    const tail = expectedTail(m);
    expect(Buffer.byteLength(tail)).toBeLessThan(m);
    expect(r.stdout).toBe(tail);
    expect(r.stdoutOmitted).toBe(total - Buffer.byteLength(tail));
  });

  it("keep: 'both' — head and tail with the marker between, the same for all", async () => {
    const m = budget((x) => Math.floor(x / 2), (x) => x - Math.floor(x / 2));
    const r = await writer({ maxBuffer: m, keep: 'both', marker: true, all: true });
    const head = expectedHead(Math.floor(m / 2));
    const tail = expectedTail(m - Math.floor(m / 2));
    const omitted = total - Buffer.byteLength(head) - Buffer.byteLength(tail);
    expect(r.stdoutOmitted).toBe(omitted);
    expect(r.stdout === `${head}\n[... ${omitted} bytes omitted ...]\n${tail}`).toBe(true);
    expect(r.all === r.stdout).toBe(true);
    expect(r.allOmitted).toBe(omitted);
    expect(r.stderr).toBe('');
    expect(r.stderrOmitted).toBe(0);
  });

  it("encoding 'buffer' keeps exact bytes, and a custom marker", async () => {
    const r = await writer<Buffer>({ maxBuffer: 1000, keep: 'tail', encoding: 'buffer', marker: '<{omitted} cut>' });
    const marker = Buffer.from(`<${total - 1000} cut>`);
    expect(r.stdout.equals(Buffer.concat([marker, full.subarray(total - 1000)]))).toBe(true);
    expect(r.stdoutOmitted).toBe(total - 1000);
  });

  it('under the limit nothing is omitted and no marker is added', async () => {
    const r = await run('printf', ['é€😀'], { maxBuffer: 9, keep: 'both', marker: true });
    expect(r).toMatchObject({ stdout: 'é€😀', stdoutOmitted: 0, stdoutTruncated: false });
  });
});

// Writes `count` lines alternately to stdout and stderr, flushing each and
// waiting until the harness has read it from the pipe (FIONREAD 0) before
// the next: the order of arrival is then the order of writing.
const ALTERNATE = `
import fcntl, struct, sys, termios, time
def drained(fd):
    end = time.monotonic() + 5
    while time.monotonic() < end:
        if struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, b'0000'))[0] == 0:
            return
        time.sleep(0.0005)
for i in range(int(sys.argv[1])):
    out = sys.stdout if i % 2 == 0 else sys.stderr
    out.write(('out' if i % 2 == 0 else 'err') + ' ' + str(i) + '\\n')
    out.flush()
    drained(out.fileno())
`;
const alternating = (n: number): string => Array.from({ length: n }, (_, i) => `${i % 2 === 0 ? 'out' : 'err'} ${i}\n`).join('');

describe('all: stdout and stderr merged in arrival order', () => {
  it('keeps the interleaving of a program alternating flushed writes: result.all, call.all, onOutput', async () => {
    const seen: string[] = [];
    const call = spawn('python3', ['-c', ALTERNATE, '200'], {
      all: true,
      onOutput: (chunk, stream) => seen.push(`${stream}:${chunk.toString()}`),
    });
    calls.push(call);
    let streamed = '';
    call.all?.setEncoding('utf8').on('data', (d: string) => (streamed += d));
    const r = await call.done;
    expect(r.all).toBe(alternating(200));
    expect(streamed).toBe(alternating(200));
    expect(r.stdout).toBe(alternating(200).split('\n').filter((l) => l.startsWith('out')).map((l) => `${l}\n`).join(''));
    expect(r.stderr).toBe(alternating(200).split('\n').filter((l) => l.startsWith('err')).map((l) => `${l}\n`).join(''));
    expect(seen.join('')).toBe(
      alternating(200)
        .split('\n')
        .filter(Boolean)
        .map((l) => `${l.startsWith('out') ? 'stdout' : 'stderr'}:${l}\n`)
        .join(''),
    );
  });

  it('is absent without all: true', async () => {
    const call = spawn('true');
    calls.push(call);
    expect(call.all).toBeNull();
    expect('all' in (await call.done)).toBe(false);
  });
});

describe('streaming', () => {
  it('lines(): whole lines, \\r\\n and a character split across writes, the last line without a newline', async () => {
    const script = `
      const w = (b) => process.stdout.write(b);
      w('one\\r\\ntwo\\nthr');
      w(Buffer.from('é').subarray(0, 1));
      setTimeout(() => { w(Buffer.from('é').subarray(1)); w('e\\nlast'); }, 50);`;
    const call = spawn(process.execPath, ['-e', script]);
    calls.push(call);
    const lines: string[] = [];
    for await (const line of call.lines()) lines.push(line);
    expect(lines).toEqual(['one', 'two', 'thrée', 'last']);
  });

  it("lines({ stream: 'all' }) in arrival order; breaking out early does not hold the call", async () => {
    const call = spawn('python3', ['-c', ALTERNATE, '10']);
    calls.push(call);
    const lines: string[] = [];
    for await (const line of call.lines({ stream: 'all' })) lines.push(line);
    expect(lines).toEqual(alternating(10).trimEnd().split('\n'));

    const long = spawn('seq', ['1', '100000']);
    calls.push(long);
    const first: string[] = [];
    for await (const line of long.lines()) {
      first.push(line);
      if (first.length === 3) break;
    }
    expect(first).toEqual(['1', '2', '3']);
    expect((await long.done).stdout.endsWith('\n99999\n100000\n')).toBe(true);
  });

  it('onOutput gets every chunk of a run, in order', async () => {
    const chunks: Record<string, Buffer[]> = { stdout: [], stderr: [] };
    const r = await run('sh', ['-c', 'seq 1 20000; seq 1 5000 >&2'], { onOutput: (c, s) => chunks[s].push(c) });
    expect(Buffer.concat(chunks.stdout).toString()).toBe(r.stdout);
    expect(Buffer.concat(chunks.stderr).toString()).toBe(r.stderr);
    expect(r.stdout.length).toBeGreaterThan(100_000);
  });

  it('done read after close still has everything (collected from the first byte)', async () => {
    const call = spawn('sh', ['-c', 'head -c 300000 /dev/zero | tr "\\0" a; echo err >&2']);
    calls.push(call);
    let read = 0;
    call.stdout?.on('data', (d: Buffer) => (read += d.length));
    await new Promise((resolve) => call.once('close', resolve));
    expect(read).toBe(300_000);
    const r = await call.done;
    expect(r.stdout.length).toBe(300_000);
    expect(r.stderr).toBe('err\n');
  });
});

describe('what spawn() holds for done', () => {
  const big = 'head -c 3000000 /dev/zero | tr "\\0" a';
  async function lateDone(options: object): Promise<Awaited<ToolCall['done']>> {
    const call = spawn('sh', ['-c', big], options);
    calls.push(call);
    call.stdout?.resume();
    await new Promise((resolve) => call.once('close', resolve));
    return call.done;
  }

  it('a call that only streams holds 1 MiB a stream for done; read late, done says what is missing', async () => {
    const r = await lateDone({});
    expect(r.stdout.length).toBe(1024 * 1024);
    expect(r.stdoutTruncated).toBe(true);
    expect(r.stdoutOmitted).toBe(3_000_000 - 1024 * 1024);
  });

  it('done read at once, or a maxBuffer given, keeps up to maxBuffer from the first byte', async () => {
    const early = spawn('sh', ['-c', big]);
    calls.push(early);
    const r1 = await early.done;
    expect(r1.stdout.length).toBe(3_000_000);
    const r2 = await lateDone({ maxBuffer: 4_000_000 });
    expect(r2.stdout.length).toBe(3_000_000);
    expect(r2.stdoutOmitted).toBe(0);
    const r3 = await lateDone({ maxBuffer: 2_000_000, keep: 'tail' });
    expect(r3.stdout.length).toBe(2_000_000);
  });
});

describe('idleTimeout', () => {
  it("stops a `read line` that waits for input that never comes, reason 'idle'", async () => {
    const t = token();
    // The idle clock runs from the start too: 2 s leaves a loaded machine
    // time to start bash and print before it (300 ms did not, once).
    const call = spawn('bash', ['-c', `echo waiting; read line; sleep ${t}`], { idleTimeout: 2000 });
    calls.push(call);
    const r = await call.done;
    expect(r.cleanup?.reason).toBe('idle');
    expect(r.signal).toBe('SIGTERM');
    expect(r.stdout).toBe('waiting\n');
    expect(r.timedOut).toBe(false);
    expect(r.cleanup?.leftovers).toEqual([]);
    expect(leafReleased(r.cgroup)).toBe(true);
    expect(liveWith(t)).toEqual([]);
  });

  it('output keeps a command alive', async () => {
    const r = await run('sh', ['-c', 'for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.1; done'], { idleTimeout: 2000 });
    expect(r).toMatchObject({ exitCode: 0, cleanup: null });
  });
});

/** utime + stime of a process in ms, from /proc/<pid>/stat (USER_HZ 100 on Linux); 0 once it is gone. */
function cpuMs(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return 0;
  }
}

describe('usage of the whole tree', () => {
  const tiers: Confinement[] = ['cgroup', 'pidns', 'subreaper', 'pgroup'];
  it.each(tiers)('%s: a background `yes` that the shell kills after a second', async (tier) => {
    // The `yes` escapes the shell's wait (it is killed, never waited for).
    // Its CPU time is sampled from /proc while it runs: the tree's usage
    // must hold at least that much. On an idle machine that is about a
    // second; the test asserts what the kernel counted, never a duration.
    const t = token();
    const call = spawn('bash', ['-c', `yes ${t} > /dev/null & sleep 1; kill %1`], { confinement: tier });
    calls.push(call);
    expect(call.usage).toBeNull();
    let sampled = 0;
    let closed = false;
    call.once('close', () => (closed = true));
    while (!closed) {
      for (const pid of liveWith(t, 'yes')) sampled = Math.max(sampled, cpuMs(pid));
      await new Promise((r) => setTimeout(r, 10));
    }
    const r = await call.done;
    expect(call.usage).toEqual(r.usage);
    expect(r.usage.peakProcesses).toBeGreaterThanOrEqual(1);
    expect(sampled).toBeGreaterThan(0);
    if (tier === 'pgroup') {
      // Only the main process and the children it waited for: not the killed `yes`.
      expect(r.usage.source).toBe('rusage');
      return;
    }
    expect(r.usage.source).toBe(tier === 'cgroup' ? 'cgroup' : 'rusage');
    expect(r.usage.userMs + r.usage.systemMs).toBeGreaterThanOrEqual(sampled);
  });
});

describe('lines() validates its options', () => {
  it("an unknown stream name is ERR_INVALID_ARG_VALUE, not a stream that ends at once with no line", async () => {
    const sup = supervisor();
    const call = sup.spawn('sh', ['-c', 'echo one; echo two >&2']);
    calls.push(call);
    expect(() => call.lines({ stream: 'stdrr' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE', message: expect.stringContaining("must be one of: 'stdout', 'stderr', 'all'") }),
    );
    expect(() => call.lines(5 as never)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    const lines: string[] = [];
    for await (const line of call.lines({ stream: 'all' })) lines.push(line);
    expect(lines.sort()).toEqual(['one', 'two']);
  });
});
