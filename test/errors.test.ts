// Bad input throws at the boundary with Node's codes; a command that cannot
// start is an Error with code, syscall and path, never a crash or exit 127.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { run, spawn } from '../dist/cjs/index.js';
import { waitUntil } from './helpers';

describe('commands that cannot start', () => {
  it('ENOENT from the PATH search, through run() and through spawn()', async () => {
    const err = await run('proctree-no-such-command-xyz', ['a']).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ENOENT', syscall: 'execve', path: 'proctree-no-such-command-xyz', spawnargs: ['proctree-no-such-command-xyz', 'a'] });
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
      await expect(run(file)).rejects.toMatchObject({ code: 'EACCES', syscall: 'execve', path: file });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a bad cwd names chdir and the directory', async () => {
    await expect(run('true', [], { cwd: '/proctree-no-such-dir' })).rejects.toMatchObject({
      code: 'ENOENT',
      syscall: 'chdir',
      path: '/proctree-no-such-dir',
    });
  });

  it('a failed start leaves no cgroup behind', async () => {
    const subtree = path.dirname((await run('true')).cgroup);
    for (let i = 0; i < 20; i++) await run('proctree-no-such-command-xyz').catch(() => {});
    await run('true', [], { cwd: '/proctree-no-such-dir' }).catch(() => {});
    // No leaf is left, and the subtree itself goes a moment after its last call.
    const leaves = fs.existsSync(subtree) ? fs.readdirSync(subtree).filter((n) => /^c\d+$/.test(n)) : [];
    expect(leaves).toEqual([]);
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
    ['arg not a string', () => spawn('echo', [1 as unknown as string]), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['NUL in env value', () => spawn('echo', [], { env: { A: 'x\0y' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['equals sign in env key', () => spawn('echo', [], { env: { 'A=B': 'x' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['negative timeout', () => spawn('echo', [], { timeout: -1 }), RangeError, 'ERR_OUT_OF_RANGE'],
    ['fractional grace', () => spawn('echo', [], { grace: 1.5 }), RangeError, 'ERR_OUT_OF_RANGE'],
    ['timeout not a number', () => spawn('echo', [], { timeout: '5' as unknown as number }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['unknown killSignal', () => spawn('echo', [], { killSignal: 'SIGNOPE' as NodeJS.Signals }), TypeError, 'ERR_UNKNOWN_SIGNAL'],
    ['bad stdio kind', () => spawn('echo', [], { stdio: ['pipe', 'bogus' as 'pipe', 'pipe'] }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['bad leftovers', () => spawn('echo', [], { leftovers: 'maybe' as 'kill' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['bad confinement', () => spawn('echo', [], { confinement: 'vm' as 'auto' }), TypeError, 'ERR_INVALID_ARG_VALUE'],
    ['signal not an AbortSignal', () => spawn('echo', [], { signal: {} as AbortSignal }), TypeError, 'ERR_INVALID_ARG_TYPE'],
    ['negative uid', () => spawn('echo', [], { uid: -1 }), RangeError, 'ERR_OUT_OF_RANGE'],
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
