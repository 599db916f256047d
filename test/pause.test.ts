// pause() and resume(): the whole tree frozen through its cgroup
// leaf's cgroup.freeze, each settling when cgroup.events shows it. Proved
// from the kernel: cgroup.events of the leaf, and /proc/<pid>/stat of busy
// members (a frozen member sleeps, state S, and its CPU time stands still;
// resumed, it runs and its CPU time grows), never from `call.paused` alone.
import { once } from 'node:events';
import fs from 'node:fs';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, type ToolCall } from '../dist/cjs/index.js';
import { cgroupMembers, killTokens, token, waitForLive } from './helpers';
import { fileSupervisors } from './supervisors';

const { supervisor, cgroups } = fileSupervisors('pause');
const tokens: string[] = [];
afterAll(() => killTokens(tokens));

interface Stat {
  state: string;
  /** utime + stime, in clock ticks. */
  cpu: number;
}

function stat(pid: number): Stat {
  const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // Fields after the comm: [0] state, … [11] utime, [12] stime.
  return { state: fields[0], cpu: Number(fields[11]) + Number(fields[12]) };
}

function frozen(cgroup: string): boolean {
  return /^frozen 1$/m.test(fs.readFileSync(`${cgroup}/cgroup.events`, 'utf8'));
}

async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A tree of two busy loops (the shell and a child in a session of its own), carrying `t` in their command lines. */
function busyTree(call: (argv: string[]) => ToolCall, t: string): ToolCall {
  tokens.push(t);
  const loop = `while :; do :; done # ${t}`;
  return call(['bash', '-c', `setsid bash -c '${loop}' & ${loop}`]);
}

/** Each pid's CPU time grows: it runs. */
async function runs(pids: number[]): Promise<void> {
  const before = pids.map((p) => stat(p).cpu);
  await until(() => pids.every((p, i) => stat(p).cpu > before[i]), `${pids.join(',')} to run`);
}

describe('pause() and resume()', () => {
  it('freeze the whole tree (escapee included) and settle when cgroup.events shows it', async () => {
    const sup = supervisor();
    const t = token();
    const call = busyTree((argv) => sup.spawn(argv[0], argv.slice(1), { stdio: 'ignore' }), t);
    await once(call, 'spawn');
    cgroups.push(call.cgroup as string);
    const pids = await waitForLive(t, 2, 'bash');
    expect(pids.length).toBe(2);
    await runs(pids);

    await call.pause();
    // Settled: the kernel shows the leaf frozen, and each member asleep.
    expect(frozen(call.cgroup as string)).toBe(true);
    expect(call.paused).toBe(true);
    for (const p of pids) expect(stat(p).state).toBe('S');
    const cpu = pids.map((p) => stat(p).cpu);
    // A busy loop that ran would gain ticks in this time; a frozen one gains none.
    await new Promise((r) => setTimeout(r, 300));
    expect(pids.map((p) => stat(p).cpu)).toEqual(cpu);
    expect(cgroupMembers(call.cgroup as string).sort()).toEqual([...pids].sort());

    await call.resume();
    expect(frozen(call.cgroup as string)).toBe(false);
    expect(call.paused).toBe(false);
    await runs(pids);

    const report = await call.terminate({ grace: 0 });
    expect(report.leftovers).toEqual([]);
    await once(call, 'close');
  });

  it('are done in order: pause() then resume() asked at once end thawed', async () => {
    const sup = supervisor();
    const t = token();
    const call = busyTree((argv) => sup.spawn(argv[0], argv.slice(1), { stdio: 'ignore' }), t);
    await once(call, 'spawn');
    const pids = await waitForLive(t, 2, 'bash');
    const order: string[] = [];
    await Promise.all([
      call.pause().then(() => order.push(`paused ${frozen(call.cgroup as string)}`)),
      call.resume().then(() => order.push(`resumed ${frozen(call.cgroup as string)}`)),
    ]);
    expect(order).toEqual(['paused true', 'resumed false']);
    await runs(pids);
    // Asking for the state it is in settles at once.
    await call.resume();
    await call.pause();
    await call.pause();
    expect(frozen(call.cgroup as string)).toBe(true);
    await call.terminate({ grace: 0 });
  });

  it('a paused call is still terminated gracefully: the ladder thaws it, so it sees its SIGTERM', async () => {
    const sup = supervisor();
    const t = token();
    tokens.push(t);
    const call = sup.spawn('bash', ['-c', `trap 'echo got-term; exit 0' TERM; echo trapping; while :; do sleep 0.05; done # ${t}`], {});
    let out = '';
    call.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    // Paused only once its trap is set: a SIGTERM before that would end it (a fatal signal ends even a frozen task).
    await until(() => out.includes('trapping'), 'the trap');
    await call.pause();
    expect(frozen(call.cgroup as string)).toBe(true);
    const report = await call.terminate({ grace: 5000 });
    await once(call, 'close');
    expect(out).toContain('got-term');
    expect(report).toMatchObject({ reason: 'terminate', killed: 0, leftovers: [], verified: 'cgroup.events' });
    expect(call.paused).toBe(false);
    expect(fs.existsSync(call.cgroup as string) && cgroupMembers(call.cgroup as string).length).toBeFalsy();
    await expect(call.resume()).rejects.toMatchObject({ code: 'ERR_PROCTREE_NOT_RUNNING' });
  });

  it('kill() of a paused call does not thaw it: the signal lands on resume()', async () => {
    const sup = supervisor();
    const t = token();
    tokens.push(t);
    const call = sup.spawn('bash', ['-c', `trap 'echo got-term; exit 3' TERM; echo trapping; while :; do sleep 0.05; done # ${t}`], {});
    let out = '';
    call.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    // Paused only once its trap is set: a SIGTERM before that would end it (a fatal signal ends even a frozen task).
    await until(() => out.includes('trapping'), 'the trap');
    await call.pause();
    expect(call.kill('SIGTERM')).toBe(true);
    // Still frozen: nothing ran the trap.
    await new Promise((r) => setTimeout(r, 200));
    expect(frozen(call.cgroup as string)).toBe(true);
    expect(call.exitCode).toBeNull();
    await call.resume();
    const [code] = await once(call, 'exit');
    expect(code).toBe(3);
    expect(out).toContain('got-term');
    await once(call, 'close');
  });

  it('idleTimeout does not fire while paused, and counts afresh from resume()', async () => {
    const sup = supervisor();
    const t = token();
    tokens.push(t);
    // 2 s: far from what spawn to pause() takes on a loaded machine (the
    // clock runs from the start until the pause).
    const call = sup.spawn('sleep', [t], { idleTimeout: 2000, stdio: 'ignore' });
    await once(call, 'spawn');
    await call.pause();
    // Far past idleTimeout: nothing stopped it.
    await new Promise((r) => setTimeout(r, 3000));
    expect(call.cleanupReport).toBeNull();
    expect(cgroupMembers(call.cgroup as string)).toEqual([call.pid]);
    const resumedAt = Date.now();
    await call.resume();
    const [report] = (await once(call, 'cleanup')) as [{ reason: string }];
    expect(report.reason).toBe('idle');
    expect(Date.now() - resumedAt).toBeGreaterThanOrEqual(1990);
    await once(call, 'close');
  });

  it('timeout (wall time) fires while paused, and the ladder empties the frozen tree', async () => {
    const sup = supervisor();
    const t = token();
    tokens.push(t);
    // 2 s: pause() is done long before, on a loaded machine too; the
    // report is listened for from the start all the same.
    const call = sup.spawn('sleep', [t], { timeout: 2000, stdio: 'ignore' });
    const cleanup = once(call, 'cleanup');
    await once(call, 'spawn');
    await call.pause();
    expect(frozen(call.cgroup as string)).toBe(true);
    const [report] = (await cleanup) as [{ reason: string; leftovers: unknown[] }];
    expect(report.reason).toBe('timeout');
    expect(report.leftovers).toEqual([]);
    expect(call.timedOut).toBe(true);
    await once(call, 'close');
    expect(await waitForLive(t, 0)).toEqual([]);
  });

  it('jobs pause and resume too, and jobs() tells', async () => {
    const sup = supervisor();
    const t = token();
    const call = busyTree((argv) => sup.spawn(argv[0], argv.slice(1), { background: true, stdio: 'ignore' }), t);
    await once(call, 'spawn');
    const job = sup.job(call.jobId as string);
    const pids = await waitForLive(t, 2, 'bash');
    await job.pause();
    expect(frozen(call.cgroup as string)).toBe(true);
    expect(sup.jobs().find((j) => j.id === job.id)).toMatchObject({ state: 'running', paused: true });
    await job.resume();
    expect(frozen(call.cgroup as string)).toBe(false);
    await runs(pids);
    expect(job.info().paused).toBe(false);
    await job.pause();
    const report = await job.stop({ grace: 0 });
    expect(report.leftovers).toEqual([]);
    expect((await job.wait()).state).toBe('stopped');
  });

  it('reject with ERR_PROCTREE_NOT_RUNNING for a call that is queued or gone', async () => {
    const sup = supervisor();
    const done = sup.spawn('true', [], { stdio: 'ignore' });
    await once(done, 'close');
    await expect(done.pause()).rejects.toMatchObject({ code: 'ERR_PROCTREE_NOT_RUNNING' });
    const { Supervisor } = await import('../dist/cjs/index.js');
    const one = new Supervisor({ name: `pause-q-${process.pid}`, maxConcurrent: 1 });
    const t = token();
    tokens.push(t);
    const first = one.spawn('sleep', [t], { stdio: 'ignore' });
    const queued = one.spawn('sleep', [t], { stdio: 'ignore' });
    await expect(queued.pause()).rejects.toMatchObject({ code: 'ERR_PROCTREE_NOT_RUNNING' });
    await one.shutdown({ grace: 0 });
    await once(first, 'close');
  });

  for (const tier of ['pidns', 'subreaper', 'pgroup'] as const) {
    it.skipIf(!capabilities().probes[tier === 'pgroup' ? 'pgroup' : tier].ok)(
      `the ${tier} tier refuses with ERR_PROCTREE_PAUSE_UNSUPPORTED and stops nothing`,
      async () => {
        const sup = supervisor();
        const t = token();
        const call = busyTree((argv) => sup.spawn(argv[0], argv.slice(1), { confinement: tier, stdio: 'ignore' }), t);
        await once(call, 'spawn');
        const pids = await waitForLive(t, 2, 'bash');
        await expect(call.pause()).rejects.toMatchObject({
          code: 'ERR_PROCTREE_PAUSE_UNSUPPORTED',
          message: expect.stringContaining(`'${tier}' tier`),
        });
        expect(call.paused).toBe(false);
        await runs(pids);
        await call.terminate({ grace: 0 });
        await once(call, 'close');
      },
    );
  }
});
