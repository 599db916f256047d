// The portable tier (lib/binding/portable.ts: child_process, no addon), forced on
// Linux with PROCTREE_PORTABLE=1 as on macOS and Windows it is the only one.
// This file's process is the harness: the variable is set before the
// library is first loaded (vitest runs each file in a process of its own),
// and every test checks that the portable binding, not the addon, runs.
//
// The escape suite of tiers.test.ts runs against both portable tiers, with
// the misses asserted as misses: a survivor is found by the test's own /proc
// scan for its unique token, checked not to be in the report, and then
// killed by the test by pid. Other harnesses (the CLI, a ps(1) process
// table, a platform other than Linux) run as child processes.
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { pathToFileURL } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { goFile, goWhenSleeping, killLiveWith, killTokens, liveWith, startCanary, token, waitForLive, waitUntil } from './helpers';

process.env.PROCTREE_PORTABLE = '1';
type Proctree = typeof import('../dist/cjs/index.js');
type ToolCall = import('../dist/cjs/index.js').ToolCall;
let pt: Proctree;

const root = path.resolve(__dirname, '..');
const tokens: string[] = [];
const dirs: string[] = [];
const canary = startCanary();

beforeAll(async () => {
  pt = (await import('../dist/cjs/index.js')) as Proctree;
  await waitForLive(canary.needle, 1);
});

afterAll(() => {
  killTokens(tokens);
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  // Started outside every call: no ladder may have touched it.
  expect(liveWith(canary.needle)).toHaveLength(1);
  canary.child.kill('SIGKILL');
});

function tok(seconds?: number): string {
  const t = token(seconds);
  tokens.push(t);
  return t;
}

function start(tier: 'pgroup' | 'none', script: string, extra: object = {}): ToolCall {
  const call = pt.spawn('bash', ['-c', script], { stdio: 'ignore', confinement: tier, ...extra });
  call.on('error', () => {});
  expect(call.confinement).toBe(tier);
  return call;
}

/**
 * What a known miss left behind: its sleeps, found by the test's /proc scan,
 * killed by pid; how many. Waits (10 s at most) until `expected` of them run
 * sleep: a child forked just before its parent exited may not have exec'd yet
 * (its comm is still bash) when a loaded machine gets here.
 */
async function reapMisses(t: string, expected: number): Promise<number> {
  await waitForLive(t, expected, 'sleep', 10_000);
  return killLiveWith(t, 'sleep');
}

/** /proc/<pid>/stat: the session and group ids the kernel has for a process. */
function sessionOf(pid: number): { pgid: number; sid: number } {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { pgid: Number(f[2]), sid: Number(f[3]) };
}

describe('capabilities with PROCTREE_PORTABLE=1', () => {
  it('reports the portable tier, why the Linux tiers are out, and loads no addon', () => {
    const caps = pt.capabilities();
    expect(caps.portable).toEqual({ reason: 'PROCTREE_PORTABLE=1', processTable: 'proc' });
    expect(caps.tier).toBe('pgroup');
    expect(caps.clone).toBe('child_process');
    expect(caps.cgroup2).toBeNull();
    for (const name of ['cgroup2', 'delegation', 'clone3', 'pidfd', 'pidfdSendSignal', 'waitidPidfd', 'pidns', 'subreaper', 'helper'] as const) {
      expect(caps.probes[name]).toEqual({ ok: false, errno: 'ENOSYS', detail: 'PROCTREE_PORTABLE=1' });
    }
    expect(caps.probes.pgroup.ok).toBe(true);
    expect(caps.probes.none.ok).toBe(true);
    expect(caps.rejected).toEqual({
      cgroup: 'cgroup2: ENOSYS (PROCTREE_PORTABLE=1)',
      systemd: 'cgroup2: ENOSYS (PROCTREE_PORTABLE=1)',
      pidns: 'pidns: ENOSYS (PROCTREE_PORTABLE=1)',
      subreaper: 'subreaper: ENOSYS (PROCTREE_PORTABLE=1)',
    });
    // No proctree.node in this process: the kernel's list of its mappings.
    expect(fs.readFileSync('/proc/self/maps', 'utf8')).not.toMatch(/proctree(\.glibc)?\.node/);
  });

  it('a Linux tier named explicitly throws ERR_PROCTREE_CONFINEMENT_UNAVAILABLE; pty throws ERR_PROCTREE_PTY_UNSUPPORTED', () => {
    expect(() => pt.spawn('true', [], { confinement: 'cgroup' })).toThrow(
      expect.objectContaining({ code: 'ERR_PROCTREE_CONFINEMENT_UNAVAILABLE', message: expect.stringContaining('PROCTREE_PORTABLE=1') }),
    );
    expect(() => pt.spawn('true', [], { pty: true })).toThrow(expect.objectContaining({ code: 'ERR_PROCTREE_PTY_UNSUPPORTED' }));
  });
});

// The escape suite (tiers.test.ts), in both portable tiers. 'pgroup' sees
// the group and every descendant of a live member; 'none' the main process
// and its descendants while it lives. Neither sees a process whose parent
// exited after it left the group.
describe.each(['pgroup', 'none'] as const)('portable confinement %s', (tier) => {
  it('the main process leads a session of its own (pgroup) or stays in the harness\'s (none)', async () => {
    const t = tok();
    const call = start(tier, `exec sleep ${t}`);
    await waitForLive(t, 1, 'sleep');
    const pid = call.pid as number;
    const own = sessionOf(pid);
    if (tier === 'pgroup') expect(own).toEqual({ pgid: pid, sid: pid });
    else expect(own).toEqual(sessionOf(process.pid));
    expect(call.members()).toEqual([pid]);
    await call.terminate({ grace: 1000 });
    expect(liveWith(t)).toEqual([]);
  });

  it('double fork + setsid: a miss, asserted as a miss', async () => {
    const t = tok();
    const call = start(tier, `(setsid sleep ${t} &) ; sleep ${t}`);
    const both = await waitForLive(t, 2, 'sleep');
    expect(both).toHaveLength(2);
    // Invisible to the tier: only the main sleep is a member.
    expect(call.members()).toEqual([call.pid]);
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    expect(report).toMatchObject({ confinement: tier, verified: 'none', signaled: 1, escaped: 0, killed: 0, leftovers: [] });
    expect(await reapMisses(t, 1)).toBe(1);
  });

  it('setpgid into a group of its own, parent alive: stopped (a descendant of a member)', async () => {
    const t = tok();
    const py = `import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "${t}"])`;
    const call = start(tier, `python3 -c '${py}' & sleep ${t}`);
    const pids = await waitForLive(t, 2, 'sleep');
    await waitUntil(() => pids.some((p) => sessionOf(p).pgid === p), 3000);
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    // bash (unless it exec'd its last command), the sleep in its group, the one that left it.
    expect(report.signaled).toBeGreaterThanOrEqual(2);
    // Left the group: only the walk of descendants found it.
    expect(report.escaped).toBe(1);
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
  });

  it('nohup … & disown and a plain & job: stopped', async () => {
    const t = tok();
    const call = start(tier, `nohup sleep ${t} >/dev/null 2>&1 & disown; sleep ${t} & sleep ${t}`);
    await waitForLive(t, 3, 'sleep');
    expect(call.members().length).toBeGreaterThanOrEqual(3);
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    expect(report.signaled).toBeGreaterThanOrEqual(3);
    expect(report.killed).toBe(0);
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
  });

  it('SIGTERM ignored: killed once grace runs out (the setsid sleeper too: its parent still waits)', async () => {
    const t = tok();
    const call = start(tier, `trap '' TERM; sleep ${t} & setsid sleep ${t} & wait`);
    await waitForLive(t, 2, 'sleep');
    const grace = 400;
    const report = await call.terminate({ grace });
    await call.done;
    expect(report.durationMs).toBeGreaterThanOrEqual(grace);
    expect(call.signalCode).toBe('SIGKILL');
    expect(report.signaled).toBe(3);
    expect(report.killed).toBe(3);
    expect(report.escaped).toBe(1);
    expect(liveWith(t)).toEqual([]);
  });

  it('an escapee that ignores SIGTERM and is orphaned during the ladder still gets SIGKILL after grace', async () => {
    const t = tok();
    const call = start(tier, `setsid bash -c "trap '' TERM; exec sleep ${t}" & sleep ${t}`);
    await waitForLive(t, 2, 'sleep');
    const grace = 400;
    const report = await call.terminate({ grace });
    await call.done;
    // The main tree dies of SIGTERM; the escapee, reparented away, was remembered.
    expect(report.signaled).toBeGreaterThanOrEqual(2);
    expect(report.escaped).toBe(1);
    expect(report.killed).toBe(1);
    expect(report.durationMs).toBeGreaterThanOrEqual(grace);
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
  });

  it('a descendant forking setsid children during the ladder: every one a miss', async () => {
    const t = tok(30);
    // Bounded: at most 3000 forks, one every 2 ms.
    const call = start(tier, `for i in $(seq 1 3000); do (setsid sleep ${t} &); sleep 0.002; done`);
    await waitForLive(t, 20, 'sleep');
    const report = await call.terminate({ grace: 300 });
    await call.done;
    expect(report.leftovers).toEqual([]);
    expect(await reapMisses(t, 20)).toBeGreaterThanOrEqual(20);
  });

  it('main exits leaving a setsid daemon: a miss, the call looks empty', async () => {
    const t = tok();
    // The main exits once this test has seen the daemon run sleep (setsid(1)
    // execs it after setsid()) and made the file the main waits for, not
    // after a fixed 0.2 s: a daemon slower than that was still in the group
    // at the exit (pgroup: stopped by the leftovers ladder).
    const call = start(tier, `(setsid sleep ${t} &); while [ ! -e ${goFile(t)} ]; do sleep 0.01; done; exit 0`, { grace: 500 });
    const result = await goWhenSleeping(t, call.done);
    expect(result.exitCode).toBe(0);
    expect(result.cleanup).toBeNull();
    expect(await reapMisses(t, 1)).toBe(1);
  });

  it('main exits leaving a child in its group: the leftovers ladder stops it (pgroup); a miss in none (reparented away)', async () => {
    const t = tok();
    const call = start(tier, `sleep ${t} & exit 0`, { grace: 500 });
    const leftover = new Promise<number[]>((resolve) => call.once('leftover', (infos) => resolve(infos.map((p) => p.pid))));
    const result = await call.done;
    expect(result.exitCode).toBe(0);
    if (tier === 'pgroup') {
      expect(await leftover).toHaveLength(1);
      expect(result.cleanup).toMatchObject({ reason: 'leftovers', signaled: 1, killed: 0, leftovers: [], verified: 'none' });
      expect(liveWith(t)).toEqual([]);
    } else {
      expect(result.cleanup).toBeNull();
      expect(await reapMisses(t, 1)).toBe(1);
    }
  });

  it('spawn errors: ENOENT as an error event, and the step that failed', async () => {
    const call = pt.spawn('/nonexistent/proctree-no-such-command', [], { confinement: tier });
    const err = await new Promise<Error & { code?: string; step?: string }>((resolve) => call.once('error', resolve));
    expect(err).toMatchObject({ code: 'ENOENT', step: 'execve', syscall: 'spawn /nonexistent/proctree-no-such-command' });
    expect(call.pid).toBeUndefined();
    const cwd = await pt.run('true', [], { confinement: tier, cwd: '/nonexistent-proctree-dir' }).catch((e: unknown) => e);
    expect(cwd).toMatchObject({ code: 'ENOENT', step: 'chdir', stepPath: '/nonexistent-proctree-dir' });
  });
});

describe('run() and spawn() on the portable binding', () => {
  it('an exec failure child_process reports late (a script whose interpreter is missing): error, then close', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-portable-'));
    dirs.push(dir);
    const script = path.join(dir, 'bad-interpreter');
    fs.writeFileSync(script, '#!/nonexistent/proctree-interpreter\n', { mode: 0o755 });
    const call = pt.spawn(script);
    const err = await new Promise<Error & { code?: string; step?: string }>((resolve) => call.once('error', resolve));
    expect(err).toMatchObject({ code: 'ENOENT', step: 'execve' });
    expect(call.pid).toBeUndefined();
    await new Promise((resolve) => call.once('close', resolve));
    expect(call.exitCode).toBe(-2);
  });

  it('stdin written far past the pipe buffer, then ended at once: every byte arrives', async () => {
    const call = pt.spawn('wc', ['-c']);
    let sent = 0;
    for (let i = 0; i < 200; i++) {
      const chunk = Buffer.alloc(16 * 1024, '.');
      sent += chunk.length;
      call.stdin?.write(chunk);
    }
    call.stdin?.end();
    const r = await call.done;
    expect(Number(r.stdout.trim())).toBe(sent);
  });

  it('an fd of the harness as stdout (a file)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-portable-'));
    dirs.push(dir);
    const file = path.join(dir, 'out.txt');
    const fd = fs.openSync(file, 'w');
    try {
      const r = await pt.run('bash', ['-c', 'echo to-file; echo to-pipe >&2'], { stdio: ['ignore', fd, 'pipe'] });
      expect(r.stderr).toBe('to-pipe\n');
    } finally {
      fs.closeSync(fd);
    }
    expect(fs.readFileSync(file, 'utf8')).toBe('to-file\n');
  });

  it('output, exit codes, signals, input, all and onOutput', async () => {
    const seen: string[] = [];
    const r = await pt.run('bash', ['-c', 'echo out; echo err >&2; cat; exit 7'], {
      input: 'typed\n',
      all: true,
      onOutput: (chunk, stream) => seen.push(`${stream}:${chunk}`),
    });
    expect(r).toMatchObject({ exitCode: 7, signal: null, stdout: 'out\ntyped\n', stderr: 'err\n', confinement: 'pgroup', cgroup: '', cleanup: null });
    expect(r.all).toContain('err\n');
    expect(seen.join('')).toContain('stdout:out');
    expect(r.usage).toMatchObject({ source: 'none' });
    const killed = await pt.run('bash', ['-c', 'kill -USR1 $$']);
    expect(killed).toMatchObject({ exitCode: null, signal: 'SIGUSR1' });
    // A big output through the pipes, in order and whole.
    const big = await pt.run('bash', ['-c', 'seq 1 200000']);
    expect(big.stdout.split('\n')).toHaveLength(200001);
    expect(big.stdout.endsWith('199999\n200000\n')).toBe(true);
  });

  it('maxBuffer keeps the tail, lines() streams, an extra pipe (fd 3) carries data', async () => {
    const r = await pt.run('bash', ['-c', 'for i in $(seq 1 100); do echo "line $i"; done'], { maxBuffer: 20, keep: 'tail' });
    const full = Array.from({ length: 100 }, (_, i) => `line ${i + 1}\n`).join('');
    expect(r.stdout).toBe(full.slice(-20));
    expect(r.stdoutOmitted).toBe(full.length - 20);
    expect(r.stdoutTruncated).toBe(true);
    const call = pt.spawn('bash', ['-c', 'echo one; echo two; echo three >&3'], { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    const lines: string[] = [];
    let fd3 = '';
    call.stdio[3]?.on('data', (d: Buffer) => (fd3 += d));
    for await (const line of call.lines()) lines.push(line);
    await call.done;
    expect(lines).toEqual(['one', 'two']);
    expect(fd3).toBe('three\n');
  });

  it('timeout stops the whole visible tree; AbortSignal stops it with an AbortError', async () => {
    const t = tok();
    // 3 s: far past the time bash takes to start both sleeps on a loaded machine.
    const timed = await pt.run('bash', ['-c', `sleep ${t} & sleep ${t}`], { timeout: 3000, grace: 500 });
    expect(timed.timedOut).toBe(true);
    expect(timed.cleanup).toMatchObject({ reason: 'timeout', signaled: 3, verified: 'none', leftovers: [] });
    expect(liveWith(t)).toEqual([]);

    const t2 = tok();
    const ac = new AbortController();
    const call = pt.spawn('bash', ['-c', `sleep ${t2} & wait`], { signal: ac.signal });
    const err = new Promise<Error>((resolve) => call.once('error', resolve));
    await waitForLive(t2, 1, 'sleep');
    ac.abort('enough');
    expect(await err).toMatchObject({ name: 'AbortError', cause: 'enough' });
    const res = await call.done;
    expect(res.aborted).toBe(true);
    expect(res.cleanup?.reason).toBe('abort');
    expect(liveWith(t2)).toEqual([]);
  });

  it('kill(signal) reaches every visible process; SIGKILL ends the call', async () => {
    const t = tok();
    const call = pt.spawn('bash', ['-c', `trap 'echo got-usr1' USR1; sleep ${t} & while :; do wait; done`]);
    await waitForLive(t, 1, 'sleep');
    let out = '';
    call.stdout?.on('data', (d: Buffer) => (out += d));
    expect(call.kill('SIGUSR1')).toBe(true);
    await waitUntil(() => out.includes('got-usr1'), 3000);
    expect(out).toContain('got-usr1');
    expect(call.kill('SIGKILL')).toBe(true);
    const closed = await new Promise<[number | null, string | null]>((resolve) => call.once('close', (c, s) => resolve([c, s])));
    expect(closed).toEqual([null, 'SIGKILL']);
    expect(liveWith(t)).toEqual([]);
  });

  it('maxConcurrent queues calls; a queued call has its streams and output from the first byte', async () => {
    await using sup = new pt.Supervisor({ name: `portable-${process.pid}`, maxConcurrent: 1 });
    const first = sup.run('bash', ['-c', 'sleep 0.3; echo first']);
    const second = sup.spawn('bash', ['-c', 'cat; echo second'], {});
    expect(second.pid).toBeUndefined();
    expect(second.stdout).not.toBeNull();
    second.stdin?.end('queued input\n');
    const [a, b] = await Promise.all([first, second.done]);
    expect(a.stdout).toBe('first\n');
    expect(b.stdout).toBe('queued input\nsecond\n');
    expect(b.queuedMs).toBeGreaterThan(100);
    await sup.shutdown();
  });

  it("jobs: leftovers 'keep' makes a job of what stays in the group; background jobs start at once; stop() leaves nothing", async () => {
    await using sup = new pt.Supervisor({ name: `portable-jobs-${process.pid}` });
    const t = tok();
    const r = await sup.run('bash', ['-c', `(echo from-job; exec sleep ${t}) & echo started`], { leftovers: 'keep' });
    // The job's line may come before the shell's exit or after: the result has the shell's.
    expect(r).toMatchObject({ exitCode: 0, cleanup: null });
    expect(r.stdout).toContain('started\n');
    expect(r.jobId).toMatch(/^c\d+$/);
    expect(r.remaining.length).toBeGreaterThanOrEqual(1);
    for (const p of r.remaining) expect(sessionOf(p.pid).pgid).toBe(r.pid);
    const j = sup.job(r.jobId as string);
    expect(j.info().state).toBe('running');
    await waitUntil(() => j.read().text.includes('from-job'), 3000);
    expect(j.read().text).toContain('from-job');
    expect((await j.stop({ grace: 500 })).leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);

    const t2 = tok();
    const bg = await sup.run('bash', ['-c', `echo bg-started; exec sleep ${t2}`], { background: true });
    expect(bg.jobId).toMatch(/^c\d+$/);
    await waitForLive(t2, 1, 'sleep');
    expect(sup.jobs().map((x) => x.id)).toContain(bg.jobId);
    await waitUntil(() => sup.job(bg.jobId as string).read().text.includes('bg-started'), 3000);
    await sup.shutdown({ grace: 500 });
    expect(liveWith(t2)).toEqual([]);
  });
});

// Node 20's own child_process tests (test/node-compat.test.ts's runner), with
// proctree's spawn in place of Node's and this process's PROCTREE_PORTABLE=1
// in their environment: the drop-in holds on the portable binding too.
describe("Node 20's child_process tests on the portable binding", async () => {
  interface Runner {
    obtain(): string | null;
    selectedTests(): string[];
    runAll(names: string[]): Promise<Array<{ name: string; status: string; output: string }>>;
  }
  const runner = (await import(pathToFileURL(path.join(root, 'scripts', 'node-tests.mjs')).href)) as Runner;
  const unavailable = runner.obtain();
  // A call's pipe given as another call's stdio needs an fd: the portable
  // streams have none (README, "Off Linux").
  const unsupported = [
    'test-child-process-pipe-dataflow.js',
    'test-child-process-stdio-merge-stdouts-into-cat.js',
    'test-child-process-stdio-reuse-readable-stdio.js',
  ];
  it.skipIf(unavailable !== null && process.env.PROCTREE_REQUIRE_NODE_TESTS !== '1')(
    unavailable ? `skipped: ${unavailable}` : 'pass, but for a pipe handed to another call',
    async () => {
      expect(unavailable).toBeNull();
      expect(process.env.PROCTREE_PORTABLE).toBe('1');
      const results = await runner.runAll(runner.selectedTests());
      const failed = results.filter((r) => r.status === 'fail' && !unsupported.includes(r.name));
      for (const r of failed) console.log(`--- ${r.name}\n${r.output}`);
      expect(failed.map((r) => r.name)).toEqual([]);
      expect(results.filter((r) => r.status === 'pass').length).toBeGreaterThanOrEqual(32);
    },
    300_000,
  );
});

// Child harnesses: each a separate node process, with the environment or
// (for the one test that needs it) the platform it describes.
function nodeChild(script: string, env: NodeJS.ProcessEnv, cwd = root): { status: number | null; stdout: string; stderr: string } {
  const res = spawnSync(process.execPath, ['-e', script], { cwd, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr };
}

describe('other harnesses', () => {
  it('`proctree run` under PROCTREE_PORTABLE=1: timeout, exit status, report', async () => {
    const t = tok();
    const out = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [path.join(root, 'bin', 'proctree.js'), 'run', '--timeout', '500ms', '--grace', '300ms', '--report', '--', 'bash', '-c', `sleep ${t} & sleep ${t}`],
        { env: { ...process.env, PROCTREE_PORTABLE: '1' } },
        (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stderr }),
      );
    });
    expect(out.code).toBe(124);
    expect(out.stderr).toMatch(/proctree: cleanup \{"reason":"timeout","confinement":"pgroup",.*"verified":"none"/);
    expect(liveWith(t)).toEqual([]);
    const doctor = spawnSync(process.execPath, [path.join(root, 'bin', 'proctree.js'), 'doctor'], {
      env: { ...process.env, PROCTREE_PORTABLE: '1' },
      encoding: 'utf8',
    });
    expect(doctor.status).toBe(0);
    expect(doctor.stdout).toMatch(/portable\s+PROCTREE_PORTABLE=1/);
    expect(doctor.stdout).toMatch(/auto picks: pgroup/);
  });

  it("a harness's normal exit kills its unref'd calls; a harness killed by SIGKILL leaves them running (no guardian: a known miss)", async () => {
    const t1 = tok();
    const exited = nodeChild(
      `const pt = require('.'); const c = pt.spawn('bash', ['-c', 'sleep ${t1} & sleep ${t1}'], { stdio: 'ignore' });
       c.once('spawn', () => setTimeout(() => { c.unref(); }, 200));`,
      { PROCTREE_PORTABLE: '1' },
    );
    expect(exited.stderr).toBe('');
    expect(exited.status).toBe(0);
    await waitUntil(() => liveWith(t1).length === 0, 2000);
    expect(liveWith(t1)).toEqual([]);

    const t2 = tok();
    const harness = execFile(process.execPath, ['-e', `const pt = require('.'); pt.spawn('bash', ['-c', 'sleep ${t2} & sleep ${t2}'], { stdio: 'ignore' }); setInterval(() => {}, 1000);`], {
      cwd: root,
      env: { ...process.env, PROCTREE_PORTABLE: '1' },
    });
    await waitForLive(t2, 2, 'sleep');
    harness.kill('SIGKILL');
    await new Promise((resolve) => harness.once('exit', resolve));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await reapMisses(t2, 2)).toBe(2);
  });

  it('PROCTREE_PORTABLE=ps reads the process table with ps(1), as on macOS: the same outcomes', async () => {
    const t = tok();
    const t2 = tok();
    const script = `
      const pt = require('.');
      (async () => {
        const caps = pt.capabilities();
        const call = pt.spawn('bash', ['-c', '(setsid sleep ${t} &); sleep ${t} & sleep ${t}'], { stdio: 'ignore' });
        // Three members alone can be a moment before the tree settles: bash,
        // the subshell and the escapee before its setsid(). Settled: /proc
        // shows all three sleeps (setsid(1) execs the escapee's after setsid();
        // bash waited for the subshell before starting the other two).
        const fs = require('fs');
        const comm = (pid) => { try { return fs.readFileSync('/proc/' + pid + '/comm', 'utf8').trim(); } catch { return ''; } };
        const sleepers = () => fs.readdirSync('/proc').filter((pid) => { try { return comm(pid) === 'sleep' && fs.readFileSync('/proc/' + pid + '/cmdline', 'utf8').includes('${t}'); } catch { return false; } });
        while (sleepers().length < 3 || call.members().length < 3) await new Promise((r) => setTimeout(r, 20));
        const members = call.members();
        const report = await call.terminate({ grace: 1000 });
        await call.done;
        // An escapee that ignores SIGTERM, orphaned when its parent dies of it: remembered, SIGKILLed after grace.
        const second = pt.spawn('bash', ['-c', 'setsid bash -c "trap \\'\\' TERM; exec sleep ${t2}" & sleep ${t2}'], { stdio: 'ignore' });
        // Both must have exec'd sleep: the escapee's TERM is ignored only once its trap ran.
        const sleeping = () => second.members().filter((pid) => comm(pid) === 'sleep');
        while (sleeping().length < 2) await new Promise((r) => setTimeout(r, 20));
        const straggler = await second.terminate({ grace: 300 });
        await second.done;
        console.log(JSON.stringify({ portable: caps.portable, members, report, straggler }));
      })();`;
    const res = nodeChild(script, { PROCTREE_PORTABLE: 'ps' });
    expect(res.stderr).toBe('');
    const out = JSON.parse(res.stdout) as { portable: unknown; members: number[]; report: object; straggler: object };
    expect(out.portable).toEqual({ reason: 'PROCTREE_PORTABLE=ps', processTable: 'ps' });
    // bash, its two group sleepers; the setsid one is a miss.
    expect(out.members).toHaveLength(3);
    expect(out.report).toMatchObject({ signaled: 3, leftovers: [], verified: 'none' });
    expect(await reapMisses(t, 1)).toBe(1);
    expect(out.straggler).toMatchObject({ escaped: 1, killed: 1, leftovers: [] });
    expect(liveWith(t2)).toEqual([]);
  });

  it('PROCTREE_PORTABLE=ps: processInfo through ps (comm, cmdline, group)', () => {
    const t = token();
    tokens.push(t);
    const script = `
      const pt = require('.');
      (async () => {
        const call = pt.spawn('sleep', ['${t}'], { stdio: 'ignore' });
        await new Promise((r) => call.once('spawn', r));
        const { processes } = await (async () => { const sup = new pt.Supervisor({ name: 'ps-info' });
          const c = sup.spawn('sleep', ['${t}'], { stdio: 'ignore', background: true });
          await new Promise((r) => c.once('spawn', r));
          const info = sup.job(c.jobId).info();
          await sup.shutdown({ grace: 200 });
          return info; })();
        await call.terminate({ grace: 200 });
        console.log(JSON.stringify(processes));
      })();`;
    const res = nodeChild(script, { PROCTREE_PORTABLE: 'ps' });
    expect(res.stderr).toBe('');
    const [p] = JSON.parse(res.stdout) as Array<{ pid: number; pgid: number; comm: string; cmdline: string }>;
    expect(p).toMatchObject({ comm: 'sleep', cmdline: `sleep ${t}` });
    expect(p.pgid).toBe(p.pid);
    expect(liveWith(t)).toEqual([]);
  });

  // The one mock in this file, and the only thing mocked: process.platform,
  // in a child process, to reach the code path of another system. Nothing
  // else is faked: the package is a real copy without any addon (no build/,
  // no prebuilds/), and its calls run real processes.
  it("require('proctree') works without an addon off Linux (process.platform overridden in a child, nothing else)", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-noaddon-'));
    dirs.push(dir);
    fs.cpSync(path.join(root, 'dist'), path.join(dir, 'dist'), { recursive: true });
    fs.copyFileSync(path.join(root, 'package.json'), path.join(dir, 'package.json'));
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(path.join(root, 'node_modules', 'node-gyp-build'), path.join(dir, 'node_modules', 'node-gyp-build'));
    const t = token();
    tokens.push(t);
    const asPlatform = (platform: string, body: string): string =>
      `Object.defineProperty(process, 'platform', { value: '${platform}' });
       const pt = require(${JSON.stringify(dir)});
       (async () => { ${body} })().catch((e) => { console.error(e); process.exit(1); });`;

    // On Linux without the variable, a missing addon is still an error.
    const linux = nodeChild(`require(${JSON.stringify(dir)})`, { PROCTREE_PORTABLE: '' }, dir);
    expect(linux.status).not.toBe(0);
    expect(linux.stderr).toMatch(/No native build was found/);

    const darwin = nodeChild(
      asPlatform(
        'darwin',
        `const caps = pt.capabilities();
         const r = await pt.run('bash', ['-c', 'echo hi; sleep ${t} & exit 3'], { grace: 500 });
         console.log(JSON.stringify({ tier: caps.tier, portable: caps.portable, rejected: caps.rejected, exitCode: r.exitCode, stdout: r.stdout, cleanup: r.cleanup }));`,
      ),
      { PROCTREE_PORTABLE: '' },
      dir,
    );
    expect(darwin.stderr).toBe('');
    const d = JSON.parse(darwin.stdout) as { tier: string; portable: unknown; rejected: Record<string, string>; exitCode: number; stdout: string; cleanup: { reason: string; leftovers: unknown[] } };
    expect(d.portable).toEqual({ reason: 'not on Linux (darwin)', processTable: 'ps' });
    expect(d.tier).toBe('pgroup');
    expect(d.rejected.cgroup).toBe('cgroup2: ENOSYS (not on Linux (darwin))');
    expect(d).toMatchObject({ exitCode: 3, stdout: 'hi\n', cleanup: { reason: 'leftovers', leftovers: [] } });
    expect(liveWith(t)).toEqual([]);

    // Windows: no process groups, so the tier is 'none'. Nothing runs here (no
    // cmd.exe, no PowerShell on this host): a shell call is built as Node
    // builds it there, and fails to start as a missing program does.
    const win = nodeChild(
      asPlatform(
        'win32',
        `const caps = pt.capabilities();
         const call = pt.spawn('echo hi && dir', { shell: true, env: { PATH: process.env.PATH } });
         const err = await new Promise((resolve) => call.once('error', resolve));
         console.log(JSON.stringify({ tier: caps.tier, portable: caps.portable, pgroup: caps.probes.pgroup, rejected: caps.rejected,
           spawnfile: call.spawnfile, spawnargs: call.spawnargs, confinement: call.confinement, code: err.code }));`,
      ),
      { PROCTREE_PORTABLE: '' },
      dir,
    );
    expect(win.stderr).toBe('');
    const w = JSON.parse(win.stdout) as { tier: string; portable: unknown; pgroup: unknown; rejected: Record<string, string>; spawnfile: string; spawnargs: string[]; confinement: string; code: string };
    expect(w).toMatchObject({ spawnfile: 'cmd.exe', spawnargs: ['cmd.exe', '/d', '/s', '/c', '"echo hi && dir"'], confinement: 'none', code: 'ENOENT' });
    expect(w.tier).toBe('none');
    expect(w.portable).toEqual({ reason: 'not on Linux (win32)', processTable: 'windows' });
    expect(w.pgroup).toEqual({ ok: false, errno: 'ENOSYS', detail: 'Windows has no process groups' });
    expect(w.rejected.pgroup).toBe('pgroup: ENOSYS (Windows has no process groups)');
  });

  it('the install script builds nothing off Linux (process.platform overridden in a child)', () => {
    const res = nodeChild(`Object.defineProperty(process, 'platform', { value: 'darwin' }); require('./scripts/install.js');`, {});
    expect(res.status).toBe(0);
    expect(res.stdout + res.stderr).toMatch(/no addon to build/);
    expect(res.stdout + res.stderr).not.toMatch(/gyp/);
  });
});

describe('the portable binding at an exit with leftovers', () => {
  it('reads the process table once, not once for members() and again for the ladder', async () => {
    const { spawnSync } = await import('node:child_process');
    const path = await import('node:path');
    const index = path.join(__dirname, '..', 'dist', 'cjs', 'index.js');
    const t = tok(30);
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
