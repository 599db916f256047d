// execa on top of proctree: execa drives child_process.spawn's ChildProcess
// (events, streams, kill, pid, exitCode/signalCode), so with spawn replaced
// by proctree's every execa feature a harness uses must still work — and the
// whole tree goes with each call. In a node of its own: the replacement must
// not reach this worker's other tests.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { describe, expect, it } from 'vitest';

import { run } from '../dist/cjs/index.js';
import { liveWith, token } from './helpers';

const root = path.resolve(__dirname, '..');

describe('execa with child_process.spawn replaced by proctree', () => {
  it('results, errors, timeouts, kills, pipes, lines and cancel read as with Node', async () => {
    const t = token();
    const script = `
      import cp from 'node:child_process';
      import { syncBuiltinESMExports } from 'node:module';
      import proctree from ${JSON.stringify(pathToFileURL(path.join(root, 'dist/cjs/index.js')).href)};
      // execa imports { spawn } from node:child_process: the ESM binding
      // follows the replacement only once synced.
      cp.spawn = proctree.spawn;
      syncBuiltinESMExports();
      const { execa } = await import('execa');
      const out = {};
      const t = async (name, f) => {
        try { out[name] = await f(); }
        catch (e) { out[name] = { error: e.constructor.name, code: e.code, exitCode: e.exitCode, signal: e.signal, timedOut: e.timedOut, isCanceled: e.isCanceled }; }
      };
      await t('echo', async () => (await execa('echo', ['hi'])).stdout);
      await t('exit3', async () => (await execa('sh', ['-c', 'exit 3'])).exitCode);
      await t('enoent', async () => (await execa('proctree-no-such-command-execa')).stdout);
      await t('input', async () => (await execa('cat', { input: 'in put' })).stdout);
      await t('all', async () => (await execa('sh', ['-c', 'echo a; sleep 0.1; echo b >&2'], { all: true })).all);
      await t('lines', async () => (await execa('printf', ['a\\\\nb\\\\n'], { lines: true })).stdout);
      await t('pipe', async () => (await execa('echo', ['hello']).pipe('tr', ['a-z', 'A-Z'])).stdout);
      await t('iterate', async () => { const r = []; for await (const l of execa('printf', ['x\\\\ny\\\\n'])) r.push(l); return r; });
      await t('pid', async () => { const p = execa('true'); const pid = typeof p.pid; await p; return pid; });
      await t('env', async () => (await execa('sh', ['-c', 'echo $FOO'], { env: { FOO: 'bar' } })).stdout);
      await t('shell', async () => (await execa('echo $((2+3))', { shell: true })).stdout);
      // The tree: a daemon each, escaped into a session of its own.
      const tree = 'setsid sleep ${t} & exec sleep ${t}';
      await t('timeout', async () => (await execa('sh', ['-c', tree], { timeout: 300 })).stdout);
      await t('kill', async () => { const p = execa('sh', ['-c', tree]); setTimeout(() => p.kill(), 300); return (await p).stdout; });
      await t('cancel', async () => { const c = new AbortController(); const p = execa('sh', ['-c', tree], { cancelSignal: c.signal }); setTimeout(() => c.abort(), 300); return (await p).stdout; });
      // 3 s: sh must have run its trap before the timeout's SIGTERM, or it
      // dies of that, not of the SIGKILL (a loaded machine can take 300 ms).
      await t('forceKill', async () => (await execa('sh', ['-c', 'trap "" TERM; ' + tree], { timeout: 3000, forceKillAfterDelay: 300 })).stdout);
      console.log(JSON.stringify(out));
    `;
    const r = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: root, timeout: 60_000 });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out).toEqual({
      echo: 'hi',
      exit3: { error: 'ExecaError', exitCode: 3, timedOut: false, isCanceled: false },
      enoent: { error: 'ExecaError', code: 'ENOENT', timedOut: false, isCanceled: false },
      input: 'in put',
      all: 'a\nb',
      lines: ['a', 'b'],
      pipe: 'HELLO',
      iterate: ['x', 'y'],
      pid: 'number',
      env: 'bar',
      shell: '5',
      timeout: { error: 'ExecaError', signal: 'SIGTERM', timedOut: true, isCanceled: false },
      kill: { error: 'ExecaError', signal: 'SIGTERM', timedOut: false, isCanceled: false },
      cancel: { error: 'ExecaError', code: 20, signal: 'SIGTERM', timedOut: false, isCanceled: true },
      forceKill: { error: 'ExecaError', signal: 'SIGKILL', timedOut: true, isCanceled: false },
    });
    // execa kills the main process only; proctree's kill() took the daemons.
    expect(liveWith(t, 'sleep')).toEqual([]);
  });
});
