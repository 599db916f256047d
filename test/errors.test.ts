// Bad input throws at the boundary with Node's codes; a command that cannot
// start is an Error with code, syscall and path, never a crash or exit 127.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { run, spawn, Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, leafReleased, token, waitUntil } from './helpers';
import { fileSupervisors } from './supervisors';

const calls: ToolCall[] = [];
afterAll(async () => {
  for (const c of calls) killCgroup(c.cgroup);
});

const { supervisor } = fileSupervisors('errors');

describe('commands that cannot start', () => {
  it('ENOENT from the PATH search, through run() and through spawn()', async () => {
    const err = await run('proctree-no-such-command-xyz', ['a']).catch((e: unknown) => e);
    // Node's shape: syscall 'spawn <file>', path the file, spawnargs without it;
    // the failing step of the start is kept in `step`.
    expect(err).toMatchObject({
      code: 'ENOENT',
      errno: -2,
      syscall: 'spawn proctree-no-such-command-xyz',
      path: 'proctree-no-such-command-xyz',
      spawnargs: ['a'],
      step: 'execve',
    });
    expect((err as Error).message).toBe('spawn proctree-no-such-command-xyz ENOENT');

    const call = spawn('proctree-no-such-command-xyz');
    const emitted = await new Promise<Error & { code?: string }>((resolve) => call.on('error', resolve));
    expect(emitted.code).toBe('ENOENT');
    expect(call.pid).toBeUndefined();
    await expect(call.done).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('EACCES for a file that is not executable', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-eacces-'));
    const file = path.join(dir, 'script.sh');
    fs.writeFileSync(file, '#!/bin/sh\necho hi\n', { mode: 0o644 });
    try {
      await expect(run(file)).rejects.toMatchObject({ code: 'EACCES', errno: -13, syscall: `spawn ${file}`, path: file, step: 'execve' });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a bad cwd: spawn <file> ENOENT as Node, with chdir and the directory as the step', async () => {
    await expect(run('true', [], { cwd: '/proctree-no-such-dir' })).rejects.toMatchObject({
      message: 'spawn true ENOENT',
      code: 'ENOENT',
      syscall: 'spawn true',
      path: 'true',
      step: 'chdir',
      stepPath: '/proctree-no-such-dir',
    });
  });

  it('a failed start leaves no cgroup behind', async () => {
    const subtree = path.dirname((await run('true')).cgroup);
    for (let i = 0; i < 20; i++) await run('proctree-no-such-command-xyz').catch(() => {});
    await run('true', [], { cwd: '/proctree-no-such-dir' }).catch(() => {});
    // No leaf holds anything (an empty one may wait in the subtree's pool
    // for the next call), and the subtree itself goes a moment after its last call.
    const leaves = fs.existsSync(subtree) ? fs.readdirSync(subtree).filter((n) => /^c\d+$/.test(n)) : [];
    expect(leaves.filter((n) => !leafReleased(path.join(subtree, n)))).toEqual([]);
    await waitUntil(() => !fs.existsSync(subtree), 5000);
    expect(fs.existsSync(subtree)).toBe(false);
  });
});

describe('invalid options throw synchronously', () => {
  it.each([
    ['file not a string', () => spawn(42 as unknown as string), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['empty file', () => spawn(''), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['NUL in args', () => spawn('echo', ['a\0b']), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['NUL in file', () => spawn('echo\0'), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['arg a Symbol', () => spawn('echo', [Symbol('x') as unknown as string]), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['NUL in env value', () => spawn('echo', [], { env: { A: 'x\0y' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['NUL in env key', () => spawn('echo', [], { env: { 'A\0B': 'x' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['Symbol env value', () => spawn('echo', [], { env: { A: Symbol('x') as unknown as string } }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    // Node 20's validateTimeout: anything but an unsigned integer is out of range, even a string.
    ['negative timeout', () => spawn('echo', [], { timeout: -1 }), RangeError, 'ERR_OUT_OF_RANGE'],
    ['fractional grace', () => spawn('echo', [], { grace: 1.5 }), RangeError, 'ERR_OUT_OF_RANGE'],
    ['timeout not a number', () => spawn('echo', [], { timeout: '5' as unknown as number }), RangeError, 'ERR_OUT_OF_RANGE'],
    ['grace not a number', () => spawn('echo', [], { grace: '5' as unknown as number }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['killSignal 0', () => spawn('echo', [], { killSignal: 0 }), TypeError, 'ERR_UNKNOWN_SIGNAL'],
    ['killSignal an object', () => spawn('echo', [], { killSignal: {} as NodeJS.Signals }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['unknown killSignal', () => spawn('echo', [], { killSignal: 'SIGNOPE' as NodeJS.Signals }), TypeError, 'ERR_UNKNOWN_SIGNAL'],
    ['bad stdio kind', () => spawn('echo', [], { stdio: 'bogus' as 'pipe' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['bad stdio entry', () => spawn('echo', [], { stdio: ['pipe', {} as 'pipe', 'pipe'] }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['string stdio entry', () => spawn('echo', [], { stdio: ['pipe', 'bogus' as 'pipe', 'pipe'] }), TypeError, 'ERR_INVALID_SYNC_FORK_INPUT'],
    ['an ipc stdio entry', () => spawn('echo', [], { stdio: ['pipe', 'pipe', 'pipe', 'ipc' as 'pipe'] }), Error, 'ERR_PROCTREE_IPC_UNSUPPORTED'],
    ['two ipc stdio entries', () => spawn('echo', [], { stdio: ['pipe', 'pipe', 'pipe', 'ipc' as 'pipe', 'ipc' as 'pipe'] }), Error, 'ERR_IPC_ONE_PIPE'],
    ['bad leftovers', () => spawn('echo', [], { leftovers: 'maybe' as 'kill' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['bad confinement', () => spawn('echo', [], { confinement: 'vm' as 'auto' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['signal not an AbortSignal', () => spawn('echo', [], { signal: {} as AbortSignal }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['uid beyond int32', () => spawn('echo', [], { uid: 2 ** 63 }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['gid not an integer', () => spawn('echo', [], { gid: 1.5 }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    // Node lets -1 through validation; setuid(-1) fails and spawn() throws, synchronously.
    ['negative uid', () => spawn('echo', [], { uid: -1 }), Error, 'EINVAL'],
    ['options null', () => spawn('echo', [], null as unknown as object), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['options an array', () => spawn('echo', [], [] as unknown as object), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['args a string', () => spawn('echo', 'a' as unknown as string[]), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['detached not a boolean', () => spawn('echo', [], { detached: 1 as unknown as boolean }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['windowsHide not a boolean', () => spawn('echo', [], { windowsHide: 'y' as unknown as boolean }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['bad serialization', () => spawn('echo', [], { serialization: 'xml' as 'json' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['cwd an http URL', () => spawn('echo', [], { cwd: new URL('http://example.com/') }), TypeError, 'ERR_INVALID_URL_SCHEME'],
  ])('%s', (_name, fn, Ctor, code) => {
    let thrown: unknown;
    try {
      fn();
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(Ctor);
    expect((thrown as { code: string }).code).toBe(code);
  });

  it('run() rejects instead of throwing', async () => {
    const p = run('echo', ['\0']);
    await expect(p).rejects.toMatchObject({ code: 'ERR_INVALID_ARG_VALUE' });
  });

  it('kill() rejects an unknown signal', async () => {
    const call = spawn('true', [], { stdio: 'ignore' });
    expect(() => call.kill('SIGBOGUS' as NodeJS.Signals)).toThrow(expect.objectContaining({ code: 'ERR_UNKNOWN_SIGNAL' }));
    await call.done;
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
    const name = `errors-${process.pid}-mc`;
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
    const err = thrown(() => new Supervisor({ name: `errors-${process.pid}-hs`, handleSignals: 'yes' as unknown as boolean }));
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
