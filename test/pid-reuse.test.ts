// PID reuse is real (pid_max 400 in a namespace of our own): after the main
// process's number goes to an unrelated process, kill() and terminate() on the
// call still reach only the call's own processes, because nothing in proctree
// addresses a process by a number it remembered.
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { liveWith, token } from './helpers';

describe('PID reuse', () => {
  it('a reused main pid is never signalled', () => {
    const t = token();
    const fixture = path.join(__dirname, 'fixtures', 'pid-reuse.cjs');
    const r = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', process.execPath, fixture, t], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}');
    expect(out.reused).toBe(true);
    // The unrelated process that got the number survived both the signal and the ladder.
    expect(out.alive).toBe(true);
    expect(out.cmdline).toBe('sleep 60');
    expect(out.signalled).toBe(1);
    expect(out.report).toMatchObject({ signaled: 1, leftovers: [] });
    expect(liveWith(t)).toEqual([]);
  });
});
