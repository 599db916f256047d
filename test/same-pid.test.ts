// Two harnesses with the same pid (each PID 1 of its own PID namespace) in the
// same cgroup: each gets its own subtree, and one harness's exit, which kills
// and removes its subtrees, never reaches the other's calls. Outcomes are read
// from cgroup.procs and /proc.
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import { afterEach, describe, expect, it } from 'vitest';

import { cgroupMembers, killCgroup, liveWith, token } from './helpers';

const fixture = path.join(__dirname, 'fixtures', 'same-pid-harness.cjs');
const started: ChildProcessWithoutNullStreams[] = [];
const cgroups: string[] = [];

function startHarness(needle: string): Promise<{ child: ChildProcessWithoutNullStreams; pid: number; cgroup: string }> {
  // --kill-child: if the test dies, killing unshare (ours) takes the namespace down.
  const child = spawn('unshare', ['--pid', '--fork', '--kill-child', '--mount-proc', process.execPath, fixture, needle]);
  started.push(child);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`harness exited early (${code})`)));
    readline.createInterface({ input: child.stdout }).once('line', (line) => {
      const msg = JSON.parse(line) as { pid: number; cgroup?: string; error?: string };
      if (!msg.cgroup) return reject(new Error(`harness could not spawn: ${msg.error}`));
      cgroups.push(msg.cgroup);
      resolve({ child, pid: msg.pid, cgroup: msg.cgroup });
    });
  });
}

afterEach(async () => {
  for (const c of started.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await once(c, 'exit');
    }
  }
  for (const cg of cgroups.splice(0)) killCgroup(cg);
});

describe('two harnesses with the same pid', () => {
  it('get separate subtrees, and one exiting leaves the other\'s calls alone', async () => {
    const t = token();
    const a = await startHarness(t);
    const b = await startHarness(t);
    expect(a.pid).toBe(b.pid);
    expect(path.dirname(a.cgroup)).not.toBe(path.dirname(b.cgroup));
    expect(cgroupMembers(a.cgroup)).toHaveLength(1);
    expect(cgroupMembers(b.cgroup)).toHaveLength(1);
    expect(liveWith(t, 'sleep')).toHaveLength(2);

    a.child.stdin.write('exit\n');
    await once(a.child, 'exit');
    // A's exit hook killed and removed A's subtree, and nothing of B's.
    expect(fs.existsSync(path.dirname(a.cgroup))).toBe(false);
    const bMembers = cgroupMembers(b.cgroup);
    expect(bMembers).toHaveLength(1);
    expect(fs.readFileSync(`/proc/${bMembers[0]}/cmdline`, 'utf8')).toBe(`sleep\0${t}\0`);

    b.child.stdin.write('exit\n');
    await once(b.child, 'exit');
    expect(fs.existsSync(path.dirname(b.cgroup))).toBe(false);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });
});
