// Fixes from a review of lib/: run(file, options) reads run's own options,
// validation with Node's codes and wording, the reason a ladder's report
// carries, and when a kept job started.
import { afterAll, describe, expect, it } from 'vitest';

import { Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, liveWith, token } from './helpers';

const supervisors: Supervisor[] = [];
const calls: ToolCall[] = [];
afterAll(async () => {
  for (const c of calls) killCgroup(c.cgroup);
  await Promise.all(supervisors.map((s) => s.shutdown({ grace: 0 })));
});

let named = 0;
function supervisor(options: ConstructorParameters<typeof Supervisor>[0] = {}): Supervisor {
  const s = new Supervisor({ name: `review-${process.pid}-${++named}`, ...options });
  supervisors.push(s);
  return s;
}

describe('run(file, options) is run(file, [], options)', () => {
  it('reads input and encoding from the options given in the place of args', async () => {
    const sup = supervisor();
    const text = await sup.run('cat', { input: 'hello\n' });
    expect(text.stdout).toBe('hello\n');
    const bytes = await sup.run('cat', { input: 'hi', encoding: 'buffer' });
    expect(Buffer.isBuffer(bytes.stdout)).toBe(true);
    expect(bytes.stdout.toString()).toBe('hi');
    expect(await sup.run('cat', [], { input: 'same' })).toMatchObject({ stdout: 'same' });
  });
});

describe("the report of a ladder that found nothing says why it was asked for", () => {
  it.each(['subreaper', 'pidns'] as const)('%s: a shutdown while the start is pending, and the start fails', async (confinement) => {
    const sup = supervisor();
    const call = sup.spawn(`/nonexistent-${token()}`, [], { confinement, stdio: 'ignore' });
    call.on('error', () => {});
    // The shim has not confirmed the start yet: the ladder is asked for first.
    expect(call.pid).toBeUndefined();
    const [report] = await sup.shutdown();
    expect(report.reason).toBe('shutdown');
    expect(report.leftovers).toEqual([]);
  });
});

describe("validation with Node's codes and wording", () => {
  function thrown(fn: () => unknown): Error & { code?: string } {
    try {
      fn();
    } catch (err) {
      return err as Error & { code?: string };
    }
    throw new Error('did not throw');
  }

  it('maxConcurrent: ERR_INVALID_ARG_TYPE for a non-number, ERR_OUT_OF_RANGE for 0, 1.5, NaN', () => {
    const name = `review-${process.pid}-mc`;
    expect(thrown(() => new Supervisor({ name, maxConcurrent: '2' as unknown as number }))).toMatchObject({
      code: 'ERR_INVALID_ARG_TYPE',
      message: `The "options.maxConcurrent" property must be of type number. Received type string ('2')`,
    });
    for (const bad of [0, 1.5, NaN, -Infinity]) {
      const err = thrown(() => new Supervisor({ name, maxConcurrent: bad }));
      expect(err).toBeInstanceOf(RangeError);
      expect(err.code).toBe('ERR_OUT_OF_RANGE');
      expect(err.message).toMatch(/^The value of "options.maxConcurrent" is out of range\. It must be an integer >= 1 or Infinity\. Received /);
    }
    supervisor({ maxConcurrent: Infinity });
    supervisor({ maxConcurrent: 3 });
  });

  it('handleSignals must be a boolean', () => {
    const err = thrown(() => new Supervisor({ name: `review-${process.pid}-hs`, handleSignals: 'yes' as unknown as boolean }));
    expect(err).toBeInstanceOf(TypeError);
    expect(err).toMatchObject({
      code: 'ERR_INVALID_ARG_TYPE',
      message: `The "options.handleSignals" property must be of type boolean. Received type string ('yes')`,
    });
  });

  it('an object where one is wanted reads as in Node: "of type object", "one of type boolean or object"', async () => {
    const cp = await import('node:child_process');
    // The same bad options object as Node's own spawn is given: the same message.
    const nodeErr = thrown(() => cp.spawn('true', [], 5 as never));
    const sup = supervisor();
    const ours = thrown(() => sup.spawn('true', [], 5 as never));
    expect(ours.code).toBe('ERR_INVALID_ARG_TYPE');
    expect(ours.message).toBe(nodeErr.message);
    expect(ours.message).toBe('The "options" argument must be of type object. Received type number (5)');
    expect(thrown(() => new Supervisor(5 as never)).message).toBe('The "options" argument must be of type object. Received type number (5)');
    expect(thrown(() => sup.spawn('true', [], { pty: 'x' as never })).message).toBe(
      `The "options.pty" property must be one of type boolean or object. Received type string ('x')`,
    );
    expect(thrown(() => sup.spawn('true', [], { cwd: 5 as never })).message).toBe(
      'The "options.cwd" property must be of type string or an instance of Buffer or URL. Received type number (5)',
    );
  });
});

describe('lines() validates its options', () => {
  it("an unknown stream name is ERR_INVALID_ARG_VALUE (it used to end at once, with no line)", async () => {
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

describe('a kept job started when its call did', () => {
  it('startedAt is the start of the call, not the moment its leftovers made it a job', async () => {
    const sup = supervisor();
    const t = token();
    const before = Date.now();
    const call = sup.spawn('sh', ['-c', `sleep ${t} & sleep 0.6`], { leftovers: 'keep', stdio: 'ignore' });
    const after = Date.now();
    calls.push(call);
    const result = await call.done;
    expect(result.jobId).not.toBeNull();
    const job = sup.job(result.jobId as string);
    try {
      // The job was made 0.6 s after the start; its startedAt is the start.
      expect(job.info().startedAt).toBeGreaterThanOrEqual(before);
      expect(job.info().startedAt).toBeLessThanOrEqual(after);
    } finally {
      await job.stop({ grace: 0 });
    }
  });
});

describe('proctree serve: the close event says what the call says', () => {
  it('timedOut is true when the timeout ended the wait for the pipes (pgroup: no ladder, no report)', async () => {
    const { PassThrough } = await import('node:stream');
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { ProtocolServer } = require('../dist/cjs/cli/serve.js') as typeof import('../lib/cli/serve');
    const input = new PassThrough();
    const output = new PassThrough();
    const events: Array<Record<string, unknown>> = [];
    let buffered = '';
    output.on('data', (d: Buffer) => {
      buffered += d.toString();
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        events.push(JSON.parse(buffered.slice(0, nl)));
        buffered = buffered.slice(nl + 1);
      }
    });
    const stopped = new Promise<number>((resolve) => new ProtocolServer({ input, output }, resolve).start());
    const t = token(30);
    let escapee = 0;
    try {
      // The setsid'd sleep holds stdout and is invisible to the pgroup tier:
      // the tree looks empty at once, and the timeout ends the wait for the pipe.
      // sh exits only once the sleep leads its own session (field 6 of its stat):
      // before its setsid() the ladder of the exit would still reach it.
      const id = `c${process.pid}`;
      const script = `setsid sleep ${t} & p=$!; i=0; until [ "$(cut -d' ' -f6 /proc/$p/stat)" = "$p" ] || [ $i -ge 500 ]; do sleep 0.01; i=$((i+1)); done; echo $p`;
      input.write(
        `${JSON.stringify({ rid: 1, op: 'spawn', id, file: 'sh', args: ['-c', script], options: { confinement: 'pgroup', timeout: 300, grace: 20_000 } })}\n`,
      );
      const start = Date.now();
      while (!events.some((e) => e.event === 'close') && Date.now() - start < 10_000) await new Promise((r) => setTimeout(r, 20));
      const out = events.find((e) => e.event === 'stdout');
      escapee = Number(Buffer.from(String(out?.data), 'base64').toString().trim());
      const close = events.find((e) => e.event === 'close');
      expect(close).toMatchObject({ id, timedOut: true, cleanup: null });
    } finally {
      if (escapee > 0) process.kill(escapee, 'SIGKILL');
      input.end();
      await stopped;
    }
  });
});

describe("proctree's own errors are shaped as Node's", () => {
  it('the code is in toString() and the first line of the stack', async () => {
    const sup = supervisor();
    let err: (Error & { code?: string }) | undefined;
    try {
      sup.job('c999999');
    } catch (e) {
      err = e as Error & { code?: string };
    }
    expect(err?.code).toBe('ERR_PROCTREE_UNKNOWN_JOB');
    expect(String(err)).toMatch(/^Error \[ERR_PROCTREE_UNKNOWN_JOB\]: No job "c999999"/);
    expect(err?.stack?.split('\n')[0]).toMatch(/^Error \[ERR_PROCTREE_UNKNOWN_JOB\]: /);
    expect(Object.keys(err as object)).toContain('code');
  });

  it('a queued call stopped before it started rejects done with an AbortError', async () => {
    const sup = supervisor({ maxConcurrent: 1 });
    const t = token();
    const first = sup.spawn('sleep', [t], { stdio: 'ignore' });
    calls.push(first);
    const queued = sup.spawn('sleep', [t], { stdio: 'ignore' });
    expect(queued.started).toBe(false);
    const done = queued.done.then(() => null, (e: Error) => e);
    expect((await queued.terminate()).signaled).toBe(0);
    expect(await done).toMatchObject({ name: 'AbortError', code: 'ABORT_ERR' });
    await first.terminate({ grace: 0 });
  });
});

describe('the portable binding at an exit with leftovers', () => {
  it('reads the process table once, not once for members() and again for the ladder', async () => {
    const { spawnSync } = await import('node:child_process');
    const path = await import('node:path');
    const index = path.join(__dirname, '..', 'dist', 'cjs', 'index.js');
    const t = token(30);
    // Counts whole-table reads (readdir of /proc) in the turn of the exit (the
    // ladder's own polls read it again later, once the signalled leftover is gone).
    const script = `
      const fs = require('fs');
      let reads = 0;
      const readdir = fs.readdirSync;
      fs.readdirSync = function (p, ...rest) { if (p === '/proc') reads++; return readdir.call(this, p, ...rest); };
      const { spawn } = require(${JSON.stringify(index)});
      // The leftover ignores SIGTERM: alive through the ladder's first look, which then reads nothing more.
      const call = spawn('sh', ['-c', 'trap "" TERM; sleep ${t} & exit 0'], { stdio: 'ignore', confinement: 'pgroup', grace: 100 });
      // The turn of the exit: members() and the ladder's start are synchronous in it.
      call.on('exit', () => { reads = 0; queueMicrotask(() => console.log(JSON.stringify({ reads }))); });
      call.on('close', () => console.log(JSON.stringify({ cleanup: call.cleanupReport })));
    `;
    const res = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, PROCTREE_PORTABLE: '1' }, encoding: 'utf8', timeout: 20_000 });
    const lines = res.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.find((l) => 'reads' in l)).toEqual({ reads: 1 });
    // The ladder still ran on the leftover and stopped it.
    expect(lines.find((l) => 'cleanup' in l)?.cleanup).toMatchObject({ reason: 'leftovers', leftovers: [] });
    expect(liveWith(t)).toEqual([]);
  });
});
