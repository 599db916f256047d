// What a hostile, unlucky or starved tool call can do to the harness, and
// why it no longer works. Every outcome is read from the kernel (cgroup
// membership, /proc), and every process these tests kill is one they started.
import { type ChildProcess, spawn as cpSpawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, spawn, type ToolCall } from '../dist/cjs/index.js';
import { cgroupMembers, killCgroup, leafReleased, liveWith, token, waitForLive, waitUntil } from './helpers';

const fixture = path.join(__dirname, 'fixtures', 'hostile-harness.cjs');
const mount = capabilities().cgroup2?.mount ?? '';
const calls: ToolCall[] = [];
const children: ChildProcess[] = [];
const cgroups: string[] = [];
afterAll(() => {
  for (const c of calls) killCgroup(c.cgroup);
  for (const g of cgroups) killCgroup(g);
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function track(call: ToolCall): ToolCall {
  calls.push(call);
  return call;
}

/** Starts the hostile harness in `mode` and returns its first JSON line. */
async function harness<T>(mode: string, t: string, wrap: string[] = []): Promise<{ child: ChildProcess; info: T }> {
  const args = [...wrap, process.execPath, fixture, mode, t];
  const child = cpSpawn(args[0], args.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  let buf = '';
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(buf.slice(0, nl));
    });
    child.once('exit', (code) => reject(new Error(`harness exited with ${code} before reporting`)));
  });
  const info = JSON.parse(line) as T & { error?: string; cgroups?: string[] };
  if (info.error) throw new Error(info.error);
  for (const g of info.cgroups ?? []) cgroups.push(g);
  return { child, info };
}

async function sigkill(child: ChildProcess): Promise<void> {
  child.kill('SIGKILL');
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
}

describe('the guardian and the harness', () => {
  it('signals arriving during spawns (a handler installed) never make the guardian kill the calls; SIGKILL still does', async () => {
    const t = token();
    const { child, info } = await harness<{ got: number; cgroups: string[] }>('signal-storm', t);
    expect(info.got).toBeGreaterThan(0);
    // Every call is still alive, in its cgroup, after the storm.
    for (const g of info.cgroups) expect(cgroupMembers(g)).toHaveLength(3);
    expect(await waitForLive(t, 60, 'sleep')).toHaveLength(60);
    await sigkill(child);
    await waitUntil(() => liveWith(t, 'sleep').length === 0, 2000);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });

  it("a call holding every pipe of the harness open can neither block spawns nor blind the guardian", async () => {
    const t = token();
    const { child, info } = await harness<{ held: number; results: number[]; cgroups: string[] }>('hijack', t);
    expect(info.held).toBeGreaterThan(0);
    expect(info.results).toEqual(Array(30).fill(3));
    expect(await waitForLive(t, 18, 'sleep')).toHaveLength(18);
    await sigkill(child);
    await waitUntil(() => liveWith(t, 'sleep').length === 0 && liveWith(t, 'python3').length === 0, 2000);
    expect(liveWith(t, 'sleep')).toEqual([]);
    expect(liveWith(t, 'python3')).toEqual([]);
  });
});

describe('trees that try to hide', () => {
  it("a member in a nested cgroup named '.x' gets the graceful signal, and the cgroup is removed", async () => {
    const t = token();
    const script = `CG=${mount}$(sed -n 's/^0:://p' /proc/self/cgroup); mkdir "$CG/.x"; setsid sleep ${t} & echo $! > "$CG/.x/cgroup.procs"; sleep ${t}`;
    const call = track(spawn('bash', ['-c', script], { stdio: 'ignore' }));
    await waitForLive(t, 2, 'sleep');
    const hidden = fs.readFileSync(`${call.cgroup}/.x/cgroup.procs`, 'utf8').trim();
    expect(hidden).not.toBe('');
    const report = await call.terminate({ grace: 5000 });
    // bash (which execs the last sleep) and the hidden one: both got SIGTERM
    // and both died of it, none was left for SIGKILL.
    expect(report.signaled).toBe(2);
    expect(report.escaped).toBe(1);
    expect(report.killed).toBe(0);
    expect(report.leftovers).toEqual([]);
    await once(call, 'close');
    expect(fs.existsSync(call.cgroup as string)).toBe(false);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });

  it('an empty chain of 60 nested cgroups does not leak the call cgroup', async () => {
    const script = `CG=${mount}$(sed -n 's/^0:://p' /proc/self/cgroup); d="$CG"; for i in $(seq 60); do d="$d/n"; mkdir "$d" || exit 1; done`;
    const call = track(spawn('bash', ['-c', script], { stdio: 'ignore' }));
    await once(call, 'close');
    expect(call.exitCode).toBe(0);
    expect(fs.existsSync(call.cgroup as string)).toBe(false);
  });

  it('a 1000-process tree under RLIMIT_NOFILE 512: every member gets the graceful signal', async () => {
    const t = token();
    const { child, info } = await harness<{ report: { signaled: number; killed: number; leftovers: unknown[] } }>('fd-limit', t, [
      'prlimit',
      '--nofile=512',
      '--',
    ]);
    expect(info.report.signaled).toBe(1001);
    expect(info.report.killed).toBe(0);
    expect(info.report.leftovers).toEqual([]);
    expect(liveWith(t, 'sleep')).toEqual([]);
    await sigkill(child);
  }, 60_000);
});

describe('kernels without cgroup.kill (PROCTREE_TEST_NO_CGROUP_KILL=1)', () => {
  const env = { ...process.env, PROCTREE_TEST_NO_CGROUP_KILL: '1' };

  it('capabilities() reports cgroup.kill missing, and the ladder still empties an escaping tree that ignores SIGTERM', () => {
    const t = token();
    const code = `
      const { capabilities, run } = require(${JSON.stringify(path.resolve(__dirname, '../dist/cjs/index.js'))});
      (async () => {
        const caps = capabilities();
        const r = await run('bash', ['-c', "trap '' TERM; setsid bash -c 'trap \\"\\" TERM; sleep ${t}' & sleep ${t} & sleep 0.3; exit 0"], { grace: 300 });
        console.log(JSON.stringify({ kill: caps.probes.cgroupKill.ok, tier: caps.tier, report: r.cleanup }));
      })();`;
    const r = spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', timeout: 20_000 });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out.kill).toBe(false);
    expect(out.tier).toBe('cgroup');
    expect(out.report).toMatchObject({ reason: 'leftovers', leftovers: [], verified: 'cgroup.events' });
    expect(out.report.killed).toBeGreaterThanOrEqual(2);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });

  it('the guardian kills every call of a SIGKILLed harness', async () => {
    const t = token();
    const child = cpSpawn(process.execPath, [fixture, 'signal-storm', t], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(child);
    const line = await new Promise<string>((resolve) => child.stdout?.once('data', (d: Buffer) => resolve(d.toString())));
    for (const g of (JSON.parse(line) as { cgroups: string[] }).cgroups) cgroups.push(g);
    expect(await waitForLive(t, 60, 'sleep')).toHaveLength(60);
    await sigkill(child);
    await waitUntil(() => liveWith(t, 'sleep').length === 0, 3000);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });
});

describe('a guardian killed while the harness runs', () => {
  it('is started again by a later spawn, and kills every call of the harness SIGKILLed after', async () => {
    const t = token();
    const { child, info } = await harness<{ old: number; now: number; cgroups?: string[] }>('guardian-killed', t);
    expect(info.old).toBeGreaterThan(0);
    expect(info.now).toBeGreaterThan(0);
    expect(info.now).not.toBe(info.old);
    expect(await waitForLive(t, 6, 'sleep')).toHaveLength(6);
    await sigkill(child);
    await waitUntil(() => liveWith(t, 'sleep').length === 0, 3000);
    expect(liveWith(t, 'sleep')).toEqual([]);
    // The new guardian removes the harness's subtree too (before this
    // file's cleanup reaches its leaves).
    const subtree = path.dirname(info.cgroups?.[0] as string);
    cgroups.push(subtree);
    await waitUntil(() => !fs.existsSync(subtree), 5000);
    expect(fs.existsSync(subtree)).toBe(false);
  });
});

describe('kernels without cgroup.kill, the exit hook', () => {
  it('a harness exiting normally stops every call (freeze + SIGKILL rounds) before it is gone', async () => {
    const t = token();
    const env = { ...process.env, PROCTREE_TEST_NO_CGROUP_KILL: '1' };
    const child = cpSpawn(process.execPath, [fixture, 'signal-storm', t, 'exit'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(child);
    const line = await new Promise<string>((resolve) => child.stdout?.once('data', (d: Buffer) => resolve(d.toString())));
    for (const g of (JSON.parse(line) as { cgroups: string[] }).cgroups) cgroups.push(g);
    expect(await waitForLive(t, 60, 'sleep')).toHaveLength(60);
    child.stdin?.write('exit\n');
    await new Promise((resolve) => child.once('exit', resolve));
    // Synchronously, in the hook: nothing is left the moment it has exited.
    expect(liveWith(t, 'sleep')).toEqual([]);
    expect(child.exitCode).toBe(0);
  });
});

describe('the weaker tiers', () => {
  it('subreaper: a shim killed from outside is reported as an error, never as a clean empty', async () => {
    const t = token();
    const call = track(spawn('bash', ['-c', `setsid sleep ${t} & exec sleep ${t}`], { stdio: 'ignore', confinement: 'subreaper' }));
    const errors: Array<Error & { code?: string }> = [];
    call.on('error', (e) => errors.push(e));
    try {
      await once(call, 'spawn');
      expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
      const stat = fs.readFileSync(`/proc/${call.pid}/stat`, 'utf8');
      const shim = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      // The shim is a process this test started (through the library).
      process.kill(shim, 'SIGKILL');
      // (events.once would reject on the 'error' this test waits for.)
      await new Promise((resolve) => call.once('close', resolve));
      expect(errors.map((e) => e.code)).toContain('ECHILD');
      // Its tree went to init, alive: exactly why the call must not look clean.
      expect(liveWith(t, 'sleep')).toHaveLength(2);
    } finally {
      // The orphans are this test's (its unique token): killed by pid, pass or fail.
      for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGKILL');
    }
  });

  it('pgroup: a new process that gets the main pid and calls setsid() is never taken for a member', () => {
    const t = token();
    const reuse = path.join(__dirname, 'fixtures', 'pgroup-reuse.cjs');
    // A shell as the namespace's init, so orphans are reaped as on a host.
    const r = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'bash', '-c', `"$0" "$1" "$2"; true`, process.execPath, reuse, t], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}');
    // While the call watched its session, the number could not come back.
    expect(out.whileOpen).toBe('notfound');
    expect(out.membersThen).toBe(0);
    // Once the call closed, it could, and the call never touched it.
    expect(out.closed).toBe(true);
    expect(out.afterClose).toBe('found');
    expect(out.victimAlive).toBe(true);
    expect(out.killAfterClose).toBe(false);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });
});

describe('out of inotify watches (ENOSPC)', () => {
  it('a call whose tree outlives its main process still ran, is still watched (polled) and ends, and leaves no zombie', () => {
    const t = token();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-enospc-'));
    try {
      const code = `
        const fs = require('node:fs');
        const { run, spawn } = require(${JSON.stringify(path.resolve(__dirname, '../dist/cjs/index.js'))});
        (async () => {
          // Every call of this harness gets its inotify watch refused.
          const waited = await run('bash', ['-c', 'echo ran > ${dir}/waited; setsid sleep 0.3 & exit 0'], { leftovers: 'wait' });
          const killed = await run('bash', ['-c', 'echo ran > ${dir}/killed; setsid sleep ${t} & exit 0'], { grace: 300 });
          const zombies = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).filter((p) => {
            try { const s = fs.readFileSync('/proc/' + p + '/stat', 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return f[0] === 'Z' && Number(f[1]) === process.pid; } catch { return false; }
          });
          console.log(JSON.stringify({ waited: { code: waited.exitCode, cleanup: waited.cleanup }, killed: { code: killed.exitCode, reason: killed.cleanup && killed.cleanup.reason, leftovers: killed.cleanup && killed.cleanup.leftovers.length }, zombies }));
        })();`;
      // A user namespace of our own, whose inotify watch limit we may lower
      // (per user namespace since Linux 5.11) without touching the host's.
      const r = spawnSync('unshare', ['-U', '--map-root-user', 'sh', '-c', 'echo 0 > /proc/sys/user/max_inotify_watches && exec "$0" -e "$1"', process.execPath, code], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.stderr).toBe('');
      const out = JSON.parse(r.stdout);
      expect(fs.readFileSync(path.join(dir, 'waited'), 'utf8')).toBe('ran\n');
      expect(fs.readFileSync(path.join(dir, 'killed'), 'utf8')).toBe('ran\n');
      expect(out.waited).toEqual({ code: 0, cleanup: null });
      expect(out.killed).toEqual({ code: 0, reason: 'leftovers', leftovers: 0 });
      expect(out.zombies).toEqual([]);
      expect(liveWith(t, 'sleep')).toEqual([]);
    } finally {
      for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('an overflowing inotify queue (IN_Q_OVERFLOW)', () => {
  it("a 'populated 0' lost in the overflow does not leave calls open forever", async () => {
    const t = token();
    const { child, info } = await harness<{ cgroups: string[]; victims: string[] }>('overflow', t);
    for (const g of info.victims) cgroups.push(g);
    // While the harness's loop is blocked (13 s): toggle the freeze of the
    // noise calls' leaves (leaves this test's harness made) until the queue
    // has overflowed for sure (16384 events: about 5 s of this with 250
    // leaves) and the victims' trees have ended (8 s); thaw them at last.
    const deadline = Date.now() + 12000;
    let toggles = 0;
    while (Date.now() < deadline) {
      for (const g of info.cgroups) {
        try {
          fs.writeFileSync(`${g}/cgroup.freeze`, toggles % 2 ? '0' : '1');
        } catch {
          // gone already
        }
      }
      toggles += 1;
      await new Promise((r) => setTimeout(r, 5));
    }
    for (const g of info.cgroups) {
      try {
        fs.writeFileSync(`${g}/cgroup.freeze`, '0');
      } catch {
        // gone already
      }
    }
    const line = await new Promise<string>((resolve, reject) => {
      let buf = '';
      child.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        if (buf.includes('closedAfterMs')) resolve(buf);
      });
      child.once('exit', (code) => reject(new Error(`harness exited ${code}: ${buf}`)));
      setTimeout(() => reject(new Error(`calls still open 20 s after the overflow: ${buf}`)), 20_000);
    });
    expect(line).toMatch(/"closedAfterMs":\d+/);
    // Empty and released (kept for the harness's next call, or removed)...
    for (const g of info.victims) expect(leafReleased(g)).toBe(true);
    await new Promise((resolve) => (child.exitCode !== null ? resolve(null) : child.once('exit', resolve)));
    // ...and gone once the harness has exited.
    for (const g of info.victims) expect(fs.existsSync(g)).toBe(false);
    await waitUntil(() => liveWith(t, 'sleep').length === 0, 3000);
    expect(liveWith(t, 'sleep')).toEqual([]);
  }, 60_000);
});

describe('kill()', () => {
  it('kill(0) asks whether the tree lives and changes nothing: no freeze, no thaw', async () => {
    const t = token();
    const call = track(spawn('bash', ['-c', `sleep ${t}`], { stdio: 'ignore' }));
    expect(await waitForLive(t, 1, 'sleep')).toHaveLength(1);
    const changes: string[] = [];
    const watcher = fs.watch(`${call.cgroup}/cgroup.events`, () => changes.push(fs.readFileSync(`${call.cgroup}/cgroup.events`, 'utf8')));
    try {
      for (let i = 0; i < 20; i++) expect(call.kill(0)).toBe(true);
      // The window in which a freeze or thaw would have been seen (the
      // kernel notifies at most every 10 ms), not a wait for an outcome.
      await new Promise((r) => setTimeout(r, 100));
      expect(changes).toEqual([]);
      // The positive control: this watch does see a freeze of this cgroup
      // (the test's own call), so the empty list above means none happened.
      fs.writeFileSync(`${call.cgroup}/cgroup.freeze`, '1');
      await waitUntil(() => changes.some((c) => c.includes('frozen 1')), 5000);
      expect(changes.some((c) => c.includes('frozen 1'))).toBe(true);
      fs.writeFileSync(`${call.cgroup}/cgroup.freeze`, '0');
    } finally {
      watcher.close();
    }
    await call.terminate({ grace: 0 });
    expect(call.kill(0)).toBe(false);
  });
});

describe('a call that traces the harness', () => {
  it('kill(), terminate() and shutdown() still end it: nothing freezes the harness\'s own tracer', async () => {
    const t = token();
    // Without the fix the harness stops for good at its first syscall after
    // the freeze: the bounded wait below then fails and the test kills it.
    const { child, info } = await Promise.race([
      harness<{ results: Record<string, unknown>; traced: boolean }>('tracer', t),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the traced harness never reported')), 20000)),
    ]);
    expect(info.results).toEqual({ kill: ['SIGKILL', 0], terminate: [], shutdown: [[], []] });
    expect(info.traced).toBe(false);
    expect([...liveWith(t, 'sleep'), ...liveWith(t, 'python3')]).toEqual([]);
    await sigkill(child);
  }, 30000);
});

describe('a harness that closed its own stdin, stdout and stderr', () => {
  it('still runs calls in every tier, and nothing it opens lands on 0..2 of the command', () => {
    const t = token();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-closed-'));
    const out = path.join(dir, 'out.json');
    try {
      const code = `
        const fs = require('node:fs');
        const { run } = require(${JSON.stringify(path.resolve(__dirname, '../dist/cjs/index.js'))});
        (async () => {
          const results = {};
          for (const tier of ['cgroup', 'pidns', 'subreaper', 'pgroup']) {
            const r = await run('sh', ['-c', 'ls -l /proc/self/fd/0 /proc/self/fd/1 2>&1 | wc -l; sleep ${t} & exit 4'], { confinement: tier, grace: 200 });
            results[tier] = { code: r.exitCode, out: r.stdout.trim(), left: r.cleanup && r.cleanup.leftovers.length };
          }
          fs.writeFileSync(${JSON.stringify(out)}, JSON.stringify(results));
        })();`;
      const r = spawnSync('bash', ['-c', `exec ${JSON.stringify(process.execPath)} -e "$1" <&- >&- 2>&-`, 'x', code], { timeout: 30_000 });
      expect(r.status).toBe(0);
      const results = JSON.parse(fs.readFileSync(out, 'utf8'));
      for (const tier of ['cgroup', 'pidns', 'subreaper', 'pgroup']) {
        expect(results[tier], tier).toEqual({ code: 4, out: '2', left: 0 });
      }
      expect(liveWith(t, 'sleep')).toEqual([]);
    } finally {
      for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
