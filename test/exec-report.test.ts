// spawn() does not wait for the command's exec beyond a few milliseconds of
// one synchronous run. A call's child is cloned with CLONE_VM|CLONE_VFORK:
// on this thread (which then waits until the exec has started, as Node's
// spawn waits for its exec) while the run's clones took less than their
// budget, else on a spawner thread without waiting at all (in a burst of
// spawns, each wait for a child's way to exec held the event loop, and on a
// busy machine that way includes waiting for a CPU); a child held before its
// exec (a frozen subtree) always goes to a spawner thread. Its exec report
// is read on the tick where Node emits 'spawn', or at once when something
// needs it (pid, kill, terminate). What must not change is what Node's spawn
// shows: pid is the command's, or undefined when it could not start; 'spawn'
// comes first and never for a command that did not start; 'error' then
// 'close' (-errno) for one that did not. Proved from the kernel where the
// kernel can say it.
import { spawn as cpSpawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import { describe, expect, it } from 'vitest';

import { capabilities, Supervisor, type ToolCall } from '../dist/cjs/index.js';

import { cgroupMembers, liveWith, running, token, waitUntil } from './helpers';
import { fileSupervisors } from './supervisors';

const { supervisor, cgroups } = fileSupervisors('execreport');

/**
 * Every event of a call, in order, with what 'data' carried. 'exit' and the
 * output race (as in Node: the main process may be reaped before its pipe
 * is read), so they are put in a fixed order: what is asserted is that
 * 'spawn' comes first, 'close' last, and each of the others once.
 */
function record(call: ToolCall): { events: string[]; out: string[]; closed: Promise<unknown> } {
  const events: string[] = [];
  const out: string[] = [];
  call.on('spawn', () => events.push('spawn'));
  call.stdout?.on('data', (d: Buffer) => {
    if (!events.includes('data')) events.push('data');
    out.push(String(d));
  });
  call.on('exit', () => events.push('exit'));
  call.on('error', (e: NodeJS.ErrnoException) => events.push(`error ${e.code}`));
  const closed = new Promise((resolve) =>
    call.on('close', (code) => {
      const exit = events.indexOf('exit');
      const data = events.indexOf('data');
      if (exit >= 0 && data > exit) [events[exit], events[data]] = ['data', 'exit'];
      resolve(events.push(`close ${code}`));
    }),
  );
  return { events, out, closed };
}

const cgroupTier = capabilities().tier === 'cgroup';
const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((f) => fs.existsSync(f));

/**
 * Runs `frozen` with a supervisor whose cgroup subtree is frozen, and thaws
 * it after, even when `frozen` fails. A call of the supervisor's own keeps
 * the subtree there (it goes with the file's supervisors), and is the
 * process's first spawn, which learns how the kernel clones. The thaw comes
 * before the tick where spawn() reads its reports.
 */
async function whileFrozen<T>(frozen: (sup: Supervisor) => T | Promise<T>): Promise<T> {
  const sup = supervisor();
  const keeper = sup.spawn('sleep', ['30'], { stdio: 'ignore' });
  await once(keeper, 'spawn');
  cgroups.push(keeper.cgroup as string);
  const subtree = path.dirname(keeper.cgroup as string);
  fs.writeFileSync(`${subtree}/cgroup.freeze`, '1');
  try {
    return await frozen(sup);
  } finally {
    fs.writeFileSync(`${subtree}/cgroup.freeze`, '0');
  }
}

describe('spawn does not wait for the exec', () => {
  it('in a burst, each call is Node-shaped: its own pid, spawn before its output, no spawn for one that failed', async () => {
    const sup = supervisor();
    const calls = Array.from({ length: 48 }, (_, i) =>
      i % 6 === 5 ? sup.spawn(`proctree-no-such-command-${i}`) : sup.spawn('sh', ['-c', 'echo $$']),
    );
    const seen = calls.map(record);
    await Promise.all(seen.map((s) => s.closed));
    calls.forEach((call, i) => {
      if (call.cgroup) cgroups.push(call.cgroup);
      if (i % 6 === 5) {
        expect(seen[i].events).toEqual(['error ENOENT', 'close -2']);
        expect(call.pid).toBeUndefined();
        expect(call.exitCode).toBe(-2);
      } else {
        expect(seen[i].events).toEqual(['spawn', 'data', 'exit', 'close 0']);
        // $$ is the shell's own pid: the clone's pid is the command's.
        expect(seen[i].out.join('').trim()).toBe(String(call.pid));
      }
    });
  });

  it('a loop of 300 spawns with no tick between: all start and end', async () => {
    const sup = supervisor();
    const calls = Array.from({ length: 300 }, () => sup.spawn('true', [], { stdio: 'ignore' }));
    const seen = calls.map(record);
    await Promise.all(seen.map((s) => s.closed));
    for (const [i, call] of calls.entries()) {
      if (call.cgroup) cgroups.push(call.cgroup);
      expect(seen[i].events).toEqual(['spawn', 'exit', 'close 0']);
      expect(call.pid).toBeGreaterThan(0);
    }
  });

  it('pid asked at once waits for the exec: the command\'s, or undefined when it could not start', async () => {
    const sup = supervisor();
    const bad = sup.spawn('proctree-no-such-command-sync');
    expect(bad.pid).toBeUndefined();
    const good = sup.spawn('sh', ['-c', 'echo $$']);
    expect(good.pid).toBeGreaterThan(0);
    const [b, g] = [record(bad), record(good)];
    await Promise.all([b.closed, g.closed]);
    expect(b.events).toEqual(['error ENOENT', 'close -2']);
    expect(g.events).toEqual(['spawn', 'data', 'exit', 'close 0']);
    expect(g.out.join('').trim()).toBe(String(good.pid));
  });

  it.skipIf(!cgroupTier)('spawn() is back before the child ran one instruction of its own (its leaf frozen)', async () => {
    const call = await whileFrozen((sup) => {
      // Its leaf is below a frozen cgroup: the child is frozen before it
      // runs anything. A spawn that waited for the exec would never return.
      const c = sup.spawn('echo', ['after the thaw']);
      cgroups.push(c.cgroup as string);
      const members = cgroupMembers(c.cgroup as string);
      expect(members).toHaveLength(1);
      // Still the harness's memory and program: it has not exec'd.
      expect(fs.readlinkSync(`/proc/${members[0]}/exe`)).toBe(fs.readlinkSync('/proc/self/exe'));
      return c;
    });
    const seen = record(call);
    await seen.closed;
    expect(seen.events).toEqual(['spawn', 'data', 'exit', 'close 0']);
    expect(seen.out.join('')).toBe('after the thaw\n');
  });

  it.skipIf(!cgroupTier)("children held before their exec and let go together: each call's 'spawn' comes before its output", async () => {
    // Let go at once, the commands exec and write while their spawning
    // threads still wait to be scheduled: the output is read before the
    // exec report is in, and must still follow 'spawn'.
    const seen: ReturnType<typeof record>[] = [];
    await whileFrozen((sup) => {
      for (let i = 0; i < 24; i++) {
        const c = sup.spawn('echo', [`held ${i}`]);
        cgroups.push(c.cgroup as string);
        seen.push(record(c));
      }
    });
    await Promise.all(seen.map((x) => x.closed));
    seen.forEach((x, i) => {
      expect(x.events).toEqual(['spawn', 'data', 'exit', 'close 0']);
      expect(x.out.join('')).toBe(`held ${i}\n`);
    });
  });

  it.skipIf(!cgroupTier)('a child held before its exec by someone else (its subtree frozen) does not hang the harness; terminate() still ends it', async () => {
    // What a hostile command may do to the harness's cgroup that holds it
    // (here the test does it): freeze it, and never thaw it.
    await whileFrozen(async (sup) => {
      const held = sup.spawn('echo', ['never printed']);
      cgroups.push(held.cgroup as string);
      const seen = record(held);
      // The report is waited for a bounded time, then the call counts as started.
      await once(held, 'spawn');
      let ticks = 0;
      const timer = setInterval(() => (ticks += 1), 1);
      const report = await held.terminate({ grace: 50 });
      clearInterval(timer);
      await seen.closed;
      expect(ticks).toBeGreaterThan(0); // the loop ran meanwhile
      expect(seen.events).toEqual(['spawn', 'exit', 'close null']);
      expect(held.signalCode).toBe('SIGKILL');
      expect(seen.out).toEqual([]);
      expect(report.leftovers).toEqual([]);
      expect(cgroupMembers(held.cgroup as string)).toEqual([]);
    });
  });

  it.skipIf(!cgroupTier)('with a terminal or a uid/gid, a frozen subtree does not hang spawn() either (the uid report is waited for a bounded time)', async () => {
    // A uid or gid that cannot be taken is an error Node throws from
    // spawn(), so that report is waited for at spawn(); a terminal's command
    // is cloned like any other. Before, both waited in a vfork, for ever.
    await whileFrozen(async (sup) => {
      const held: ToolCall[] = [];
      const uid = process.getuid?.() ?? 0;
      const gid = process.getgid?.() ?? 0;
      const t0 = performance.now();
      held.push(sup.spawn('echo', ['never printed'], { pty: true }));
      held.push(sup.spawn('echo', ['never printed'], { uid, gid }));
      // Back within the bounded wait (500 ms for the uid call), not at the thaw.
      expect(performance.now() - t0).toBeLessThan(5000);
      for (const call of held) cgroups.push(call.cgroup as string);
      const reports = await Promise.all(held.map((call) => call.terminate({ grace: 50 })));
      for (const [i, call] of held.entries()) {
        expect(call.signalCode).toBe('SIGKILL');
        expect(reports[i].leftovers).toEqual([]);
        expect(cgroupMembers(call.cgroup as string)).toEqual([]);
      }
    });
  });

  it.skipIf(!cgroupTier)('258 children held before their exec (a frozen subtree): a loop of spawns still ends, none waits for a report', async () => {
    const calls = await whileFrozen((sup) => {
      const spawned: ToolCall[] = [];
      for (let i = 0; i < 258; i += 1) spawned.push(sup.spawn('true', [], { stdio: 'ignore' }));
      // Each child holds a spawner thread, not this one: every spawn came
      // back, and none has had its exec report (pid is not settled yet).
      for (const call of spawned) expect(Object.keys(call)).not.toContain('pid');
      for (const call of spawned) cgroups.push(call.cgroup as string);
      const members = spawned.reduce((n, call) => n + cgroupMembers(call.cgroup as string).length, 0);
      expect(members).toBe(258);
      return spawned;
    });
    const closed = calls.map((call) => record(call).closed);
    await Promise.all(closed);
    for (const call of calls) expect(call.exitCode).toBe(0);
  });

  it.skipIf(!setpriv || process.getuid?.() !== 0)('a uid the command cannot take still throws EPERM from spawn(), as in Node', async () => {
    // Root without CAP_SETUID/CAP_SETGID: the child's setgroups fails. The
    // first spawn of a process waits in a vfork; the second is cloned and
    // its report waited for at spawn(): both throw, as child_process does.
    const script = `const { spawn } = require(${JSON.stringify(path.resolve('dist/cjs/index.js'))});
      const cp = require('node:child_process');
      const tryIt = (f) => { try { f('true', [], { uid: 65534, stdio: 'ignore' }); return 'no throw'; } catch (e) { return e.code + ' ' + e.syscall; } };
      console.log([tryIt(cp.spawn), tryIt(spawn), tryIt(spawn)].join(','));`;
    const r = await supervisor().run(setpriv as string, ['--bounding-set=-setuid,-setgid', process.execPath, '-e', script]);
    expect(r.stdout.trim()).toBe('EPERM spawn,EPERM spawn,EPERM spawn');
  });

  it('kill() and terminate() right after spawn() act on the command, not on the child before its exec', async () => {
    const sup = supervisor();
    const killed = sup.spawn('sleep', ['30']);
    expect(killed.kill('SIGTERM')).toBe(true);
    const k = record(killed);
    const stopped = sup.spawn('sleep', ['30']);
    const report = stopped.terminate({ grace: 1000 });
    const s = record(stopped);
    await Promise.all([k.closed, s.closed]);
    for (const c of [killed, stopped]) if (c.cgroup) cgroups.push(c.cgroup);
    expect(k.events).toEqual(['spawn', 'exit', 'close null']);
    expect(killed.signalCode).toBe('SIGTERM');
    expect(s.events).toEqual(['spawn', 'exit', 'close null']);
    expect((await report).verified).not.toBe('none');
  });

  it('kill() and terminate() right after spawn() of a command that cannot start: nothing signalled, not killed', async () => {
    const sup = supervisor();
    const a = sup.spawn('proctree-no-such-command-kill');
    const ra = record(a);
    expect(a.kill('SIGTERM')).toBe(false);
    const b = sup.spawn('proctree-no-such-command-terminate');
    const rb = record(b);
    const report = await b.terminate();
    await Promise.all([ra.closed, rb.closed]);
    expect(ra.events).toEqual(['error ENOENT', 'close -2']);
    expect(rb.events).toEqual(['error ENOENT', 'close -2']);
    expect(a.killed).toBe(false);
    expect(b.killed).toBe(false);
    expect(report).toMatchObject({ signaled: 0, killed: 0, leftovers: [] });
  });
});

/** This thread's voluntary context switches so far: each time it slept in the kernel (a vfork wait is one). */
function voluntarySwitches(): number {
  return Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(fs.readFileSync('/proc/thread-self/status', 'utf8'))?.[1]);
}

/** Every process still in `subtree`'s leaves (the kernel's cgroup.procs), or [] once the subtree is gone. */
function subtreeMembers(subtree: string): number[] {
  if (!fs.existsSync(subtree)) return [];
  return fs
    .readdirSync(subtree, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .flatMap((d) => cgroupMembers(path.join(subtree, d.name)));
}

describe('a burst of spawns in one synchronous run', () => {
  it.skipIf(!cgroupTier)('does not put the event loop\'s thread to sleep once per spawn (its voluntary context switches, from the kernel)', async () => {
    const sup = supervisor();
    // The first spawns learn how the kernel clones and make the subtree.
    for (let i = 0; i < 3; i += 1) await once(sup.spawn('true', [], { stdio: 'ignore' }), 'close');
    const before = voluntarySwitches();
    const calls = Array.from({ length: 100 }, () => sup.spawn('true', [], { stdio: 'ignore' }));
    const during = voluntarySwitches() - before;
    const seen = calls.map(record);
    await Promise.all(seen.map((s) => s.closed));
    for (const call of calls) if (call.cgroup) cgroups.push(call.cgroup);
    for (const s of seen) expect(s.events).toEqual(['spawn', 'exit', 'close 0']);
    // A clone that waits for its child's exec (CLONE_VFORK) sleeps once per
    // spawn: 100. Past the run's first milliseconds of clones, the rest go
    // to spawner threads and this thread does not wait for them.
    expect(during).toBeLessThan(50);
  });

  it.skipIf(!cgroupTier)('an already aborted signal on a call past the burst\'s first milliseconds: \'spawn\', then \'error\', as in Node', async () => {
    const sup = supervisor();
    await once(sup.spawn('true', [], { stdio: 'ignore' }), 'close');
    // Enough clones in this run to use up its budget on any machine.
    const burst = Array.from({ length: 60 }, () => sup.spawn('true', [], { stdio: 'ignore' }));
    const aborted = sup.spawn('sleep', ['30'], { stdio: 'ignore', signal: AbortSignal.abort('stop') });
    const seen = [...burst, aborted].map(record);
    await Promise.all(seen.map((s) => s.closed));
    for (const call of [...burst, aborted]) if (call.cgroup) cgroups.push(call.cgroup);
    expect(seen.at(-1)?.events).toEqual(['spawn', 'error ABORT_ERR', 'exit', 'close null']);
    expect(aborted.signalCode).toBe('SIGTERM');
  });

  it.skipIf(!cgroupTier)('a worker thread that ends right after its burst: no clone of it runs afterwards, nothing of it is left', async () => {
    const needle = token();
    const lib = path.resolve('dist/cjs/index.js');
    const script = `
      const { Worker } = require('node:worker_threads');
      const w = new Worker(\`
        const { parentPort } = require('node:worker_threads');
        const { Supervisor } = require(${JSON.stringify(lib)});
        const sup = new Supervisor({ name: 'burst-worker-' + process.pid });
        const calls = [];
        for (let i = 0; i < 150; i += 1) calls.push(sup.spawn('sh', ['-c', 'sleep ${needle}; :'], { stdio: 'ignore' }));
        parentPort.postMessage(calls[0].cgroup);
        process.exit(0);
      \`, { eval: true });
      w.on('message', (m) => console.log('cgroup ' + m));
      w.on('error', (e) => console.log('worker-error ' + e));
      w.on('exit', () => console.log('worker-exited'));
      process.stdin.resume();
      process.stdin.on('end', () => process.exit(0));
    `;
    // The harness stays alive while the tree is looked at: its guardian
    // would otherwise clean up what the worker's teardown left.
    const h = cpSpawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = readline.createInterface({ input: h.stdout });
    let subtree = '';
    // The harness's own command line carries the needle too.
    const left = (): number[] => liveWith(needle).filter((pid) => pid !== h.pid);
    try {
      for await (const line of lines) {
        if (line.startsWith('cgroup ')) subtree = path.dirname(line.slice(7));
        expect(line.startsWith('worker-error')).toBe(false);
        if (line === 'worker-exited') break;
      }
      expect(subtree).not.toBe('');
      await waitUntil(() => left().length === 0 && subtreeMembers(subtree).length === 0, 15000);
      expect(running(h.pid as number)).toBe(true);
      expect(left()).toEqual([]);
      expect(subtreeMembers(subtree)).toEqual([]);
    } finally {
      h.stdin?.end();
      if (h.exitCode === null) await once(h, 'exit');
      for (const pid of left()) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
    }
  });
});
