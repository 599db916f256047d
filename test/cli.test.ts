// The `proctree` command as a user runs it: a real process (node
// bin/proctree.js), its exit status, its stdout/stderr, and the kernel's view
// of what it left (a /proc scan for each test's unique token).
import { type ChildProcess, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { parseDuration, splitCommand, UsageError } from '../dist/cjs/cli/args.js';
import { detectHost, renderDoctor } from '../dist/cjs/cli/doctor.js';
import type { Capabilities, Probe } from '../dist/cjs/capabilities.js';
import { cgroup2Mounts, type CallEntry } from '../dist/cjs/cli/ps.js';
import { liveWith, token, waitForLive } from './helpers';

const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'proctree.js');

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

const started: ChildProcess[] = [];
const tokens: string[] = [];

function newToken(): string {
  const t = token();
  tokens.push(t);
  return t;
}

afterAll(async () => {
  // A CLI still running after a failed test: SIGTERM runs its ladder.
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  // Whatever still carries a token of ours was started by this file: by pid.
  for (const t of tokens) {
    for (const pid of liveWith(t)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
});

function start(args: string[], env?: NodeJS.ProcessEnv): { child: ChildProcess; done: Promise<Outcome> } {
  const child = cpSpawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
  started.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<Outcome>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
  return { child, done };
}

function cli(...args: string[]): Promise<Outcome> {
  return start(args).done;
}

function oneLineError(o: Outcome): void {
  expect(o.code).toBe(2);
  expect(o.stdout).toBe('');
  expect(o.stderr).toMatch(/^proctree: .+\n$/);
}

describe('proctree run: exit status mirrors the command', () => {
  it('0, N, and 128+N for a signal', async () => {
    const [ok, seven, usr1, term] = await Promise.all([
      cli('run', '--', 'true'),
      cli('run', '--', 'sh', '-c', 'exit 7'),
      cli('run', '--', 'sh', '-c', 'kill -USR1 $$'),
      cli('run', '--', 'sh', '-c', 'kill -TERM $$'),
    ]);
    expect(ok.code).toBe(0);
    expect(seven.code).toBe(7);
    expect(usr1.code).toBe(128 + os.constants.signals.SIGUSR1);
    expect(term.code).toBe(128 + os.constants.signals.SIGTERM);
  });

  it('passes stdio through, and needs no -- before the command', async () => {
    const o = await cli('run', 'sh', '-c', 'echo out; echo err >&2; exit 5');
    expect(o).toMatchObject({ code: 5, stdout: 'out\n', stderr: 'err\n' });
  });

  it('127 for a command that is not found, 126 for one that cannot run', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-cli-'));
    const file = path.join(dir, 'not-executable.sh');
    fs.writeFileSync(file, '#!/bin/sh\necho hi\n', { mode: 0o644 });
    try {
      const [missing, noexec] = await Promise.all([cli('run', '--', 'proctree-no-such-command-xyz'), cli('run', '--', file)]);
      expect(missing.code).toBe(127);
      expect(missing.stderr).toBe('proctree: spawn proctree-no-such-command-xyz ENOENT\n');
      expect(noexec.code).toBe(126);
      expect(noexec.stderr).toMatch(/EACCES/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('124 on --timeout, and the whole tree is gone (double fork + setsid, nohup)', async () => {
    const t = newToken();
    const script = `(setsid sleep ${t} &); nohup sleep ${t} >/dev/null 2>&1 & sleep ${t}`;
    // 3 s: every fork and the setsid() must be done before the timeout, or
    // fewer are signaled and none escaped yet on a loaded machine.
    const o = await cli('run', '--timeout', '3s', '--grace', '1s', '--report', '--', 'bash', '-c', script);
    expect(o.code).toBe(124);
    expect(liveWith(t)).toEqual([]);
    const line = /^proctree: cleanup (\{.*\})\n$/.exec(o.stderr);
    expect(line).not.toBeNull();
    const report = JSON.parse((line as RegExpExecArray)[1]) as { reason: string; signaled: number; escaped: number; leftovers: unknown[] };
    expect(report.reason).toBe('timeout');
    expect(report.signaled).toBeGreaterThanOrEqual(3);
    expect(report.escaped).toBeGreaterThanOrEqual(1);
    expect(report.leftovers).toEqual([]);
  });

  it('processes that ignore SIGTERM are killed after --grace', async () => {
    const t = newToken();
    const before = Date.now();
    // 3 s: bash must have run its trap (else SIGTERM ends it) and started
    // both sleeps (which inherit the ignored TERM) before the timeout.
    const o = await cli('run', '--timeout', '3s', '--grace', '300ms', '--report', '--', 'bash', '-c', `trap '' TERM; setsid sleep ${t} & sleep ${t}`);
    expect(o.code).toBe(124);
    expect(Date.now() - before).toBeLessThan(10_000);
    const report = JSON.parse(o.stderr.replace(/^proctree: cleanup /, '')) as { killed: number };
    expect(report.killed).toBeGreaterThanOrEqual(2);
    expect(liveWith(t)).toEqual([]);
  });

  it('--report says when nothing was left; a daemon left behind is stopped and reported', async () => {
    const t = newToken();
    const [plain, daemon] = await Promise.all([
      cli('run', '--report', '--', 'true'),
      cli('run', '--report', '--grace', '1s', '--', 'bash', '-c', `setsid sleep ${t} & disown; exit 4`),
    ]);
    expect(plain.code).toBe(0);
    expect(plain.stderr).toBe('proctree: cleanup not needed, nothing was left\n');
    expect(daemon.code).toBe(4);
    expect(daemon.stderr).toMatch(/^proctree: cleanup \{"reason":"leftovers",.*\}\n$/);
    expect(liveWith(t)).toEqual([]);
  });

  it('--json prints the whole RunResult on stdout instead of the output', async () => {
    const o = await cli('run', '--json', '--', 'sh', '-c', 'echo hello; echo oops >&2; exit 3');
    expect(o.code).toBe(3);
    expect(o.stderr).toBe('');
    const r = JSON.parse(o.stdout) as Record<string, unknown>;
    expect(r).toMatchObject({ exitCode: 3, signal: null, stdout: 'hello\n', stderr: 'oops\n', timedOut: false, cleanup: null });
    expect(typeof r.pid).toBe('number');
    expect(o.stdout.endsWith('}\n')).toBe(true);
  });

  it('--signal picks the graceful signal; --leftovers wait lets the tree finish by itself', async () => {
    const [hup, wait] = await Promise.all([
      cli('run', '--timeout', '200ms', '--signal', 'HUP', '--', 'sleep', '5'),
      cli('run', '--leftovers', 'wait', '--report', '--', 'bash', '-c', 'setsid sleep 0.3 & exit 0'),
    ]);
    expect(hup.code).toBe(124);
    expect(wait.code).toBe(0);
    expect(wait.stderr).toBe('proctree: cleanup not needed, nothing was left\n');
  });

  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    it(`${sig} to the CLI stops the whole tree, then it exits with the command's status`, async () => {
      const t = newToken();
      const script = `(setsid sleep ${t} &); nohup sleep ${t} >/dev/null 2>&1 & sleep ${t}`;
      const { child, done } = start(['run', '--report', '--', 'bash', '-c', script]);
      expect(await waitForLive(t, 3, 'sleep')).toHaveLength(3);
      child.kill(sig);
      const o = await done;
      // The main process got the ladder's SIGTERM.
      expect(o.code).toBe(128 + os.constants.signals.SIGTERM);
      expect(o.stderr).toMatch(/^proctree: cleanup \{"reason":"terminate",/);
      expect(liveWith(t)).toEqual([]);
    });
  }
});

describe('usage errors: one line on stderr, exit status 2', () => {
  it('bad flags and values of every command', async () => {
    const outcomes = await Promise.all([
      cli('run', '--bogus', '--', 'true'),
      cli('run', '--timeout', '5x', '--', 'true'),
      cli('run', '--timeout'),
      cli('run', '--grace', '-1s', '--', 'true'),
      cli('run', '--leftovers', 'maybe', '--', 'true'),
      cli('run', '--signal', 'NOPE', '--', 'true'),
      cli('run', '--report'),
      cli('frobnicate'),
      cli('doctor', '--bogus'),
      cli('ps', 'extra'),
      cli('serve', '--bogus'),
    ]);
    for (const o of outcomes) oneLineError(o);
    expect(outcomes[1].stderr).toContain("'5x' is not a duration");
    expect(outcomes[6].stderr).toContain('no command given');
  });

  it('a confinement tier the library does not have is its ERR_INVALID_ARG_VALUE, as one line', async () => {
    const o = await cli('run', '--confinement', 'no-such-tier', '--', 'true');
    oneLineError(o);
    expect(o.stderr).toContain("options.confinement");
    expect(o.stderr).toContain("'no-such-tier'");
  });

  it('--confinement values pass through to the library unchanged', async () => {
    const [auto, cgroup] = await Promise.all([
      cli('run', '--confinement', 'auto', '--', 'true'),
      cli('run', '--confinement', 'cgroup', '--', 'true'),
    ]);
    expect(auto.code).toBe(0);
    expect(cgroup.code).toBe(0);
  });

  it('--help on every command', async () => {
    const outcomes = await Promise.all([
      cli('--help'),
      cli('run', '--help'),
      cli('run', '-h'),
      cli('doctor', '--help'),
      cli('ps', '--help'),
      cli('serve', '--help'),
      cli('help', 'run'),
    ]);
    for (const o of outcomes) {
      expect(o.code).toBe(0);
      expect(o.stdout).toMatch(/^Usage: proctree/);
    }
    expect(outcomes[1].stdout).toContain('--timeout');
    const bare = await cli();
    expect(bare.code).toBe(2);
    expect(bare.stdout).toMatch(/^Usage: proctree/);
  });

  it('durations: 500ms, 30s, 5m, 1.5s and plain milliseconds', () => {
    expect(parseDuration('500ms', 'x')).toBe(500);
    expect(parseDuration('30s', 'x')).toBe(30_000);
    expect(parseDuration('5m', 'x')).toBe(300_000);
    expect(parseDuration('1.5s', 'x')).toBe(1500);
    expect(parseDuration('250', 'x')).toBe(250);
    expect(parseDuration('0', 'x')).toBe(0);
    for (const bad of ['', 's', '-1s', '1d', '1 s', '1e3', '30days']) {
      expect(() => parseDuration(bad, '--timeout')).toThrow(UsageError);
    }
  });

  it('flags end at -- or at the first word that is not one', () => {
    const withValue = new Set(['--timeout']);
    expect(splitCommand(['--timeout', '5s', 'ls', '-l'], withValue)).toEqual({ own: ['--timeout', '5s'], command: ['ls', '-l'] });
    expect(splitCommand(['--timeout=5s', '--', '-x'], withValue)).toEqual({ own: ['--timeout=5s'], command: ['-x'] });
    expect(splitCommand(['--report'], withValue)).toEqual({ own: ['--report'], command: [] });
  });
});

describe('proctree doctor', () => {
  const probe = (ok: boolean, extra: Partial<Probe> = {}): Probe => ({ ok, ...extra });
  const fakeCaps = (over: Partial<Capabilities['probes']> = {}): Capabilities => {
    const probes = {
      cgroup2: probe(true, { detail: '/sys/fs/cgroup (own cgroup /)' }),
      delegation: probe(false, { errno: 'EACCES', syscall: 'mkdir', detail: 'mkdir /sys/fs/cgroup/proctree-1' }),
      clone3: probe(true),
      cloneIntoCgroup: probe(true),
      pidfd: probe(true),
      pidfdSendSignal: probe(true),
      waitidPidfd: probe(true),
      freeze: probe(true),
      cgroupKill: probe(false, { errno: 'ENOENT', detail: 'no cgroup.kill (Linux < 5.14)' }),
      pidns: probe(true),
      userns: probe(true),
      subreaper: probe(true),
      helper: probe(true),
      pgroup: probe(true),
      ...over,
    } as Capabilities['probes'];
    return { kernel: '6.1.0', cgroup2: { mount: '/sys/fs/cgroup', own: '/', ownPath: '/sys/fs/cgroup' }, clone: 'clone3', probes, tier: 'pidns', rejected: { cgroup: 'delegation: EACCES (mkdir …)' }, portable: null, limits: { memory: false, pids: false, cpu: false, cgroup: null, reason: '' }, seal: { available: false, why: 'sealing needs the cgroup tier' } };
  };

  it('prints the capabilities of this host; --json is capabilities()', async () => {
    const [text, json] = await Promise.all([cli('doctor'), cli('doctor', '--json')]);
    const caps = JSON.parse(json.stdout) as { tier: string | null; kernel: string };
    expect(json.code).toBe(text.code);
    expect(text.stdout).toContain(caps.kernel);
    expect(text.stdout).toMatch(new RegExp(`auto picks: ${caps.tier ?? 'nothing'}`));
    expect(text.code).toBe(caps.tier === null ? 1 : 0);
  });

  it('renders each probe, with the errno and advice for what is missing', () => {
    const out = renderDoctor(fakeCaps(), 'host');
    expect(out).toMatch(/FAIL\s+delegation\s+EACCES: mkdir/);
    expect(out).toContain('systemd-run --user --scope -p Delegate=yes');
    expect(out).toMatch(/ok\s+pidns/);
    expect(out).toMatch(/FAIL\s+cgroupKill\s+ENOENT: no cgroup.kill/);
    expect(out).toContain('Linux >= 5.14 has cgroup.kill');
    expect(out).toContain('auto picks: pidns');
    expect(out).toContain('not cgroup: delegation: EACCES');
  });

  it('in a container, says which tier to expect and how to get a writable cgroup instead of systemd-run', () => {
    const out = renderDoctor(fakeCaps(), 'container');
    expect(out).toContain("'subreaper' (or 'pidns') is the expected tier");
    expect(out).toContain('--cgroupns=private');
    expect(out).not.toContain('systemd-run --user');
    expect(detectHost((p) => p === '/.dockerenv', {})).toBe('container');
    expect(detectHost(() => false, {})).toBe('host');
  });

  it('says when no tier can run (pidfds refused), and exits 1 then', () => {
    const caps = { ...fakeCaps({ pidfd: probe(false, { errno: 'EPERM', syscall: 'pidfd_open' }) }), tier: null };
    const out = renderDoctor(caps, 'host');
    expect(out).toMatch(/FAIL\s+pidfd\s+EPERM/);
    expect(out).toContain('every tier needs it');
    expect(out).toContain('auto picks: nothing');
  });

  it('a harness in a cgroup that was killed once: clone3 into cgroups is refused at birth, the calls need nothing', () => {
    const killedAtBirth = probe(false, { errno: 'ECANCELED', syscall: 'clone3', detail: 'the kernel killed the child at birth' });
    const out = renderDoctor({ ...fakeCaps({ cloneIntoCgroup: killedAtBirth }), clone: 'clone' }, 'host');
    expect(out).toMatch(/FAIL\s+cloneIntoCgroup\s+ECANCELED: the kernel killed the child at birth/);
    expect(out).toContain('nothing to do for the calls');
    expect(out).toContain('a cgroup that was never killed');
  });

  it('reports an addon that does not load as a failed probe with advice', () => {
    const out = renderDoctor({ addon: { ok: false, errno: 'MODULE_NOT_FOUND', detail: 'No native build was found' }, tier: null }, 'host');
    expect(out).toMatch(/FAIL\s+addon\s+MODULE_NOT_FOUND: No native build was found/);
    expect(out).toContain('npm rebuild proctree');
    expect(out).toContain('auto picks: nothing');
  });
});

describe('proctree run: output a model can read', () => {
  const testRun = 'for i in $(seq 1 1000); do echo "ok $i"; done; echo "FAIL: test_login"; exit 1';
  const full = `${Array.from({ length: 1000 }, (_, i) => `ok ${i + 1}\n`).join('')}FAIL: test_login\n`;

  it('--max-output keeps the head and the tail (by default) with the count of what was left out', async () => {
    const o = await cli('run', '--max-output', '60', '--', 'bash', '-c', testRun);
    expect(o.code).toBe(1);
    const omitted = full.length - 60;
    expect(o.stdout).toBe(`${full.slice(0, 30)}\n[... ${omitted} bytes omitted ...]\n${full.slice(-30)}`);
    expect(o.stderr).toBe('');
  });

  it('--keep tail and --all: the end of stdout and stderr merged', async () => {
    const o = await cli('run', '--all', '--max-output', '1k', '--keep', 'tail', '--', 'bash', '-c', `${testRun.replace('echo "FAIL', 'echo "FAIL" >&2; echo "FAIL')}`);
    expect(o.code).toBe(1);
    expect(o.stderr).toBe('');
    expect(o.stdout.startsWith('\n[... ')).toBe(true);
    expect(o.stdout.endsWith('ok 1000\nFAIL\nFAIL: test_login\n') || o.stdout.endsWith('ok 1000\nFAIL: test_login\nFAIL\n')).toBe(true);
  });

  it('--all without --max-output passes both streams through on stdout', async () => {
    const o = await cli('run', '--all', '--', 'sh', '-c', 'echo out; echo err >&2; exit 3');
    expect(o.code).toBe(3);
    expect(o.stderr).toBe('');
    expect(o.stdout.split('\n').sort()).toEqual(['', 'err', 'out']);
  });

  it('--idle-timeout stops a silent command: 124, reason idle; --usage prints the tree\'s usage', async () => {
    const t = newToken();
    // 2 s: the idle clock runs from the spawn; bash must print first.
    const o = await cli('run', '--idle-timeout', '2s', '--report', '--usage', '--', 'bash', '-c', `echo started; sleep ${t}`);
    expect(o.code).toBe(124);
    expect(o.stdout).toBe('started\n');
    const [cleanup, usage] = o.stderr.trimEnd().split('\n');
    expect(JSON.parse(cleanup.replace(/^proctree: cleanup /, ''))).toMatchObject({ reason: 'idle', leftovers: [] });
    expect(JSON.parse(usage.replace(/^proctree: usage /, ''))).toMatchObject({ source: 'cgroup' });
    expect(liveWith(t)).toEqual([]);
  });

  it('usage errors: --leftovers keep (this process ends with the command), --keep without --max-output, a bad size', async () => {
    const [keep, lone, size] = await Promise.all([
      cli('run', '--leftovers', 'keep', '--', 'true'),
      cli('run', '--keep', 'tail', '--', 'true'),
      cli('run', '--max-output', 'lots', '--', 'true'),
    ]);
    for (const o of [keep, lone, size]) oneLineError(o);
    expect(keep.stderr).toContain('keep');
    expect(size.stderr).toContain("'lots' is not a size");
  });
});

describe('proctree ps', () => {
  it('finds the cgroup2 mount in mountinfo, on a hybrid host too', () => {
    const hybrid = [
      '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755',
      '32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
      '90 41 0:38 /some/sub /mnt/with\\040space rw - cgroup2 cgroup2 rw',
      '99 23 0:55 / /other\\040cg rw shared:5 - cgroup2 none rw',
    ].join('\n');
    expect(cgroup2Mounts(hybrid)).toEqual(['/sys/fs/cgroup/unified', '/other cg']);
    expect(cgroup2Mounts('')).toEqual([]);
  });

  it('lists a live call with its harness, main pid, members, age and command', async () => {
    const t = newToken();
    const { child, done } = start(['run', '--', 'bash', '-c', `setsid sleep ${t} & sleep ${t}; wait`]);
    expect(await waitForLive(t, 2, 'sleep')).toHaveLength(2);
    const [json, text] = await Promise.all([cli('ps', '--json'), cli('ps')]);
    const mine = (JSON.parse(json.stdout) as CallEntry[]).filter((c) => c.harnessPid === child.pid);
    expect(mine).toHaveLength(1);
    const entry = mine[0];
    expect(entry.call).toMatch(new RegExp(`proctree-${child.pid}-[0-9a-f]{12}/c\\d+$`));
    expect(entry.harnessAlive).toBe(true);
    expect(entry.members).toBe(3);
    expect(entry.command).toBe(`bash -c setsid sleep ${t} & sleep ${t}; wait`);
    expect(fs.readFileSync(`/proc/${entry.pid}/stat`, 'utf8')).toContain(' (bash) ');
    expect(entry.ageMs).toBeGreaterThanOrEqual(0);
    expect(entry.ageMs).toBeLessThan(30_000);
    expect(entry.id).toBe(path.basename(entry.call));
    expect(text.stdout.split('\n')[0]).toMatch(/^ID\s+CALL\s+HARNESS\s+PID\s+MEMBERS\s+AGE\s+PORTS\s+COMMAND$/);
    expect(text.stdout).toMatch(new RegExp(`${entry.id}\\s+${entry.call}\\s+${child.pid}\\s+${entry.pid}\\s+3\\s+\\d+s\\s+-\\s+bash -c`));
    child.kill('SIGTERM');
    expect((await done).code).toBe(143);
    expect(liveWith(t)).toEqual([]);
  });

  it("shows '-' for the main pid once it exited and only its descendants are left", async () => {
    const t = newToken();
    const { child, done } = start(['run', '--leftovers', 'wait', '--', 'bash', '-c', `setsid sleep ${t} & exit 0`]);
    expect(await waitForLive(t, 1, 'sleep')).toHaveLength(1);
    // Wait for bash to be gone from the cgroup.
    let entry: CallEntry | undefined;
    for (let i = 0; i < 100; i++) {
      const all = JSON.parse((await cli('ps', '--json')).stdout) as CallEntry[];
      entry = all.find((c) => c.harnessPid === child.pid);
      if (entry && entry.members === 1) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(entry).toMatchObject({ pid: null, members: 1, command: `sleep ${t}` });
    child.kill('SIGTERM');
    expect((await done).code).toBe(0);
    expect(liveWith(t)).toEqual([]);
  });
});

// Every command of docs/cli.md and of the README, run for real: `npx proctree`
// is this checkout's bin/proctree.js. Blocks marked `<!-- checked: exact -->`
// must print what the docs show (durations aside).
describe.each(['docs/cli.md', 'README.md'])('%s', (docPath) => {
  const doc = fs.readFileSync(path.join(root, docPath), 'utf8');
  const blocks = [...doc.matchAll(/(<!-- checked: exact -->\n)?```console\n([\s\S]*?)```/g)].map((m) => {
    const lines = m[2].trimEnd().split('\n');
    return {
      exact: m[1] !== undefined,
      commands: lines.filter((l) => l.startsWith('$ ')).map((l) => l.slice(2)),
      expected: lines.filter((l) => !l.startsWith('$ ')).join('\n'),
    };
  });
  const normalize = (s: string): string => s.replace(/"durationMs":[0-9.e+-]+/g, '"durationMs":N').trimEnd();

  /** Pids of live `sleep 100` processes: the docs' commands must leave none new. */
  const sleep100 = (): Set<number> =>
    new Set(
      liveWith('sleep 100', 'sleep').filter((pid) => {
        try {
          return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8') === 'sleep\x00100\x00';
        } catch {
          return false;
        }
      }),
    );

  it('has the examples', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(docPath === 'README.md' ? 1 : 4);
    expect(blocks[0].commands[0]).toBe("npx proctree run --timeout 5s -- bash -c 'sleep 100 & setsid sleep 100 & wait'");
  });

  it('every console block runs as shown, and leaves nothing', async () => {
    const before = sleep100();
    const bash = (script: string): Promise<Outcome> =>
      new Promise((resolve) => {
        const child = cpSpawn('bash', ['-c', `exec 2>&1\n${script}`], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
        started.push(child);
        let stdout = '';
        child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
        child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr: '' }));
      });
    const local = `${JSON.stringify(process.execPath)} ${JSON.stringify(bin)}`;
    const results = await Promise.all(blocks.map((b) => bash(b.commands.map((c) => c.replace(/\bnpx proctree\b/g, local)).join('\n'))));
    blocks.forEach((b, i) => {
      expect(results[i].code, `block ${i}: ${results[i].stdout}`).toBe(0);
      if (b.exact) expect(normalize(results[i].stdout), `block ${i}`).toBe(normalize(b.expected));
    });
    const after = [...sleep100()].filter((pid) => !before.has(pid));
    expect(after).toEqual([]);
  });

  it('the Python example prints what the docs show', async () => {
    const code = /```python\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';
    const expected = /```python\n[\s\S]*?```\s*```text\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';
    expect(code.split('\n').filter(Boolean).length).toBeLessThanOrEqual(10);
    const out = await new Promise<Outcome>((resolve) => {
      const child = cpSpawn('python3', ['-c', code], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          PYTHONPATH: path.join(root, 'clients', 'python'),
          PROCTREE_SERVER: `${JSON.stringify(process.execPath)} ${JSON.stringify(bin)} serve`,
        },
      });
      started.push(child);
      let stdout = '';
      let stderr = '';
      child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('close', (c, signal) => resolve({ code: c, signal, stdout, stderr }));
    });
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    expect(out.stdout).toBe(expected);
  });
});
