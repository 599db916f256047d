// A cgroup leaf whose call ended on its own serves a later call of the same
// subtree (a mkdir and an rmdir are most of what the kernel spends
// on a short call). What must never happen: a leaf given to a call while
// anything of an earlier call is in it, frozen, with cgroups of its own below
// it, or still the target of a ladder's writes; a usage figure that counts an
// earlier call; two jobs with one id. Each is proved from the kernel
// (cgroup.procs, cgroup.events, the directory itself), not from our
// bookkeeping. (Where memory.peak exists, a reused leaf reports a call's
// peak only when it grew past the earlier calls': test/limits-vm.test.ts.)
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { capabilities, spawn, Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { liveCalls } from '../dist/cjs/cli/ps.js';
import { cgroupExists, cgroupMembers } from './helpers';
import { fileSupervisors } from './supervisors';

const { supervisor, cgroups } = fileSupervisors('reuse');

const closing = new WeakMap<ToolCall, Promise<unknown>>();

function track(call: ToolCall): ToolCall {
  if (call.cgroup) cgroups.push(call.cgroup);
  closing.set(call, once(call, 'close'));
  return call;
}

const closed = (call: ToolCall): Promise<unknown> => closing.get(call) as Promise<unknown>;

/** A `true` run to its 'close': the leaf it had is kept for the next call, unless something spoilt it. */
async function ranTrue(sup: Supervisor): Promise<ToolCall> {
  const call = track(sup.spawn('true', [], { stdio: 'ignore' }));
  await closed(call);
  return call;
}

/**
 * A shell command in the leaf a `true` just left (it is told the leaf's path
 * on stdin, as `$leaf`): run to its 'close', and its leaf removed after it.
 */
async function spoilKeptLeaf(sup: Supervisor, script: string): Promise<ToolCall> {
  const a = await ranTrue(sup);
  const b = track(sup.spawn('sh', ['-c', `read leaf && ${script}`], { stdio: ['pipe', 'ignore', 'ignore'] }));
  await once(b, 'spawn');
  expect(b.cgroup).toBe(a.cgroup);
  b.stdin?.end(`${b.cgroup}\n`);
  await closed(b);
  expect(b.exitCode).toBe(0);
  expect(cgroupExists(b.cgroup)).toBe(false);
  return b;
}

describe('cgroup leaves reused across calls', () => {
  it('a leaf is reused only after its call ended, and holds only the new call', async () => {
    const sup = supervisor();
    const a = await ranTrue(sup);
    // Empty, unfrozen, nothing below: the kernel says so, not our bookkeeping.
    expect(cgroupMembers(a.cgroup as string)).toEqual([]);
    expect(fs.readFileSync(`${a.cgroup}/cgroup.events`, 'utf8')).toMatch(/populated 0\nfrozen 0/);
    const b = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(b, 'spawn');
    expect(b.cgroup).toBe(a.cgroup);
    expect(cgroupMembers(b.cgroup as string)).toEqual([b.pid]);
    // Calls running at once never share one.
    const c = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(c, 'spawn');
    expect(c.cgroup).not.toBe(b.cgroup);
    expect(cgroupMembers(c.cgroup as string)).toEqual([c.pid]);
    await Promise.all([b.terminate({ grace: 0 }), c.terminate({ grace: 0 })]);
    await Promise.all([closed(b), closed(c)]);
  });

  it('a call whose leftovers outlived its main process ends with the leaf empty before it is reused', async () => {
    const sup = supervisor();
    // The main process exits at once; its background child keeps the leaf
    // populated until the test ends it, by pid (no ladder). Not a short sleep
    // that ends by itself: a loaded machine can take longer than it to get
    // here, and find the leaf empty already.
    const a = track(sup.spawn('sh', ['-c', 'sleep 30 & exit 0'], { stdio: 'ignore', leftovers: 'wait' }));
    await once(a, 'exit');
    const left = cgroupMembers(a.cgroup as string);
    expect(left.length).toBe(1);
    const b = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(b, 'spawn');
    expect(b.cgroup).not.toBe(a.cgroup);
    process.kill(left[0], 'SIGKILL');
    await closed(a);
    const c = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(c, 'spawn');
    expect(c.cgroup).toBe(a.cgroup);
    expect(cgroupMembers(c.cgroup as string)).toEqual([c.pid]);
    await Promise.all([b.terminate({ grace: 0 }), c.terminate({ grace: 0 })]);
    await Promise.all([closed(b), closed(c)]);
  });

  it('a leaf a ladder ran on is removed, never reused (its freeze and kill writes may land late)', async () => {
    const sup = supervisor();
    const a = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(a, 'spawn');
    await a.terminate({ grace: 1000 });
    await closed(a);
    expect(cgroupExists(a.cgroup)).toBe(false);
    const b = await ranTrue(sup);
    expect(b.cgroup).not.toBe(a.cgroup);
  });

  it('a leaf with cgroups of its own below it is removed, never reused', async () => {
    const sup = supervisor();
    // The command makes a cgroup in its own leaf.
    const b = await spoilKeptLeaf(sup, 'mkdir "$leaf/nested"');
    const c = await ranTrue(sup);
    expect(c.cgroup).not.toBe(b.cgroup);
  });

  it('a leaf whose command lowered its cgroup.max.descendants or .depth is removed: the next call can nest cgroups', async () => {
    const sup = supervisor();
    for (const file of ['cgroup.max.descendants', 'cgroup.max.depth']) {
      const b = await spoilKeptLeaf(sup, `echo 0 > "$leaf/${file}"`);
      // The next call gets a leaf as new: it can make a cgroup of its own.
      const c = track(sup.spawn('sh', ['-c', 'read leaf && cat "$leaf/cgroup.max.descendants" "$leaf/cgroup.max.depth" && mkdir "$leaf/n" && rmdir "$leaf/n"'], { stdio: ['pipe', 'pipe', 'ignore'] }));
      await once(c, 'spawn');
      expect(c.cgroup).not.toBe(b.cgroup);
      c.stdin?.end(`${c.cgroup}\n`);
      let out = '';
      c.stdout?.on('data', (d: Buffer) => (out += d.toString()));
      await closed(c);
      expect({ file, out, code: c.exitCode }).toEqual({ file, out: 'max\nmax\n', code: 0 });
    }
  });

  it('a leaf left frozen is removed, never reused: the next call runs', async () => {
    const sup = supervisor();
    const a = track(sup.spawn('sleep', ['30'], { stdio: 'ignore' }));
    await once(a, 'spawn');
    const leaf = a.cgroup as string;
    // Someone else freezes the leaf, then SIGKILLs the frozen process (a
    // frozen task still dies of SIGKILL): the call ends with its leaf empty
    // and frozen.
    fs.writeFileSync(`${leaf}/cgroup.freeze`, '1');
    process.kill(a.pid as number, 'SIGKILL');
    await closed(a);
    expect(cgroupExists(leaf)).toBe(false);
    const b = await ranTrue(sup);
    expect(b.cgroup).not.toBe(leaf);
    expect(b.exitCode).toBe(0);
  });

  it('a kept leaf removed behind our back: the next call starts in a new one, not in an error', async () => {
    const sup = supervisor();
    const a = await ranTrue(sup);
    // An empty cgroup is anyone's to rmdir who may write the subtree.
    fs.rmdirSync(a.cgroup as string);
    const b = track(sup.spawn('true', [], { stdio: 'ignore' }));
    let error: Error | null = null;
    b.on('error', (e: Error) => (error = e));
    await closed(b);
    expect(error).toBe(null);
    expect(b.exitCode).toBe(0);
    expect(b.cgroup).not.toBe(a.cgroup);
  });

  // Linux 6.14 (and the stable kernels its fix went to) kills every child
  // that clone3 places into a cgroup once killed through its cgroup.kill:
  // such a leaf must not serve again, and a call must not die of it.
  it('a call that killed its own leaf (its cgroup.kill): the leaf serves no other call, and the next call runs', async () => {
    const sup = supervisor();
    const mount = capabilities().cgroup2?.mount as string;
    const a = track(
      sup.spawn('sh', ['-c', `echo 1 > "${mount}$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.kill"; sleep 30`], {
        stdio: 'ignore',
      }),
    );
    await closed(a);
    expect(a.signalCode).toBe('SIGKILL');
    for (let i = 0; i < 3; i += 1) {
      const b = await ranTrue(sup);
      expect([b.exitCode, b.signalCode]).toEqual([0, null]);
      expect(b.cgroup).not.toBe(a.cgroup);
    }
  });

  it('a kept leaf someone killed while it sat empty: the next call starts in a new one, and runs', async () => {
    const sup = supervisor();
    const a = await ranTrue(sup);
    const leaf = a.cgroup as string;
    // Empty: the write kills nothing, but the kernel counts the leaf as killed.
    fs.writeFileSync(`${leaf}/cgroup.kill`, '1');
    const b = track(sup.spawn('true', [], { stdio: 'ignore' }));
    let error: Error | null = null;
    b.on('error', (e: Error) => (error = e));
    await closed(b);
    expect(error).toBe(null);
    expect([b.exitCode, b.signalCode]).toEqual([0, null]);
    const c = await ranTrue(sup);
    expect([c.exitCode, c.signalCode]).toEqual([0, null]);
  });

  it('the same for a spawn past its burst\'s budget, cloned on a spawner thread: it runs, in the leaf it was given', async () => {
    const sup = supervisor();
    const other = supervisor();
    const a = await ranTrue(sup);
    const leaf = a.cgroup as string;
    fs.writeFileSync(`${leaf}/cgroup.kill`, '1');
    // Enough clones in this run to use up its budget on any machine, in
    // another subtree (whose kept leaves are not this one's).
    const burst = Array.from({ length: 60 }, () => track(other.spawn('true', [], { stdio: 'ignore' })));
    const b = track(sup.spawn('cat', ['/proc/self/cgroup'], { stdio: ['ignore', 'pipe', 'ignore'] }));
    let out = '';
    b.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    let error: Error | null = null;
    b.on('error', (e: Error) => (error = e));
    await Promise.all([...burst, b].map(closed));
    expect(error).toBe(null);
    expect([b.exitCode, b.signalCode]).toEqual([0, null]);
    // Given the kept leaf (the call named it before its clone), and run there.
    expect(b.cgroup).toBe(leaf);
    const v2 = out.split('\n').find((l) => l.startsWith('0::')) as string;
    expect(leaf.endsWith(v2.slice(3))).toBe(true);
    const c = await ranTrue(sup);
    expect([c.exitCode, c.signalCode]).toEqual([0, null]);
  });

  it("a call's usage is its own, not the earlier calls' of its leaf", async () => {
    const sup = supervisor();
    const busy = 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done';
    const a = track(sup.spawn('sh', ['-c', busy], { stdio: 'ignore' }));
    await closed(a);
    const b = await ranTrue(sup);
    expect(b.cgroup).toBe(a.cgroup);
    const ua = a.usage as { userMs: number; systemMs: number; source: string };
    const ub = b.usage as { userMs: number; systemMs: number; source: string };
    expect(ua.source).toBe('cgroup');
    expect(ub.source).toBe('cgroup');
    expect(ua.userMs + ua.systemMs).toBeGreaterThan(50);
    expect(ub.userMs + ub.systemMs).toBeLessThan((ua.userMs + ua.systemMs) / 2);
    expect(ub.userMs).toBeGreaterThanOrEqual(0);
  });

  it("a job's id is its leaf's name, as `proctree ps` shows it, and its leaf never serves another call", async () => {
    const sup = supervisor();
    const a = await ranTrue(sup);
    const b = track(sup.spawn('sleep', ['30'], { background: true }));
    await once(b, 'spawn');
    expect(b.cgroup).toBe(a.cgroup);
    expect(b.jobId).toBe(path.basename(b.cgroup as string));
    const listed = liveCalls().find((c) => c.cgroup === b.cgroup);
    expect(listed?.id).toBe(b.jobId);
    expect(sup.job(b.jobId as string)?.info().pid).toBe(b.pid);
    // The job's usage so far counts nothing of call a's.
    expect(sup.job(b.jobId as string)?.info().usage?.userMs ?? 0).toBeLessThan(50);
    await sup.job(b.jobId as string)?.stop({ grace: 0 });
    await closed(b);
    const c = await ranTrue(sup);
    expect(c.cgroup).not.toBe(b.cgroup);
  });

  it('the leaves kept for reuse go with their subtree once no call is left', async () => {
    const sup = supervisor();
    const calls = Array.from({ length: 4 }, () => track(sup.spawn('true', [], { stdio: 'ignore' })));
    await Promise.all(calls.map(closed));
    const subtree = path.dirname(calls[0].cgroup as string);
    // Kept a moment for the next call (1 s), then removed with the subtree.
    const deadline = Date.now() + 10_000;
    while (cgroupExists(subtree) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(cgroupExists(subtree)).toBe(false);
  });
});

describe('the default subtree', () => {
  it('spawn() outside a supervisor reuses leaves too, and a reused leaf starts with the new call only', async () => {
    const a = track(spawn('true', [], { stdio: 'ignore' }));
    await closed(a);
    const b = track(spawn('cat', [], { stdio: 'pipe' }));
    await once(b, 'spawn');
    expect(cgroupMembers(b.cgroup as string)).toEqual([b.pid]);
    b.stdin?.end('x');
    let out = '';
    b.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    await closed(b);
    expect(out).toBe('x');
  });
});
