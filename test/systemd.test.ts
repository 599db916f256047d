// The systemd tier (issue 15) on a real systemd 252: the fixture
// (test/fixtures/systemd-container.sh) boots Debian bookworm in a container
// once for this file, and a harness (test/fixtures/systemd-scenarios.cjs, the
// container's Node 18 loading this checkout's build) runs as an unprivileged
// user in a root-owned session-N.scope, as after an SSH login: its own
// cgroup is not writable, but its user manager hands out delegated scopes.
//
// Outcomes are read from the kernel: the harness reports /proc and
// cgroup.procs from inside, and this file checks /proc and the container's
// cgroups from the host.
//
// Skips where the fixture cannot boot (not root, no systemd-nspawn, no
// debootstrap and no cached root filesystem); CI sets
// PROCTREE_REQUIRE_SYSTEMD=1, which turns the skip into a failure.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { killTokens, liveWith, token, waitUntil } from './helpers';

const root = path.resolve(__dirname, '..');
const fixture = path.join(root, 'test', 'fixtures', 'systemd-container.sh');
// Paths as the container sees them: this checkout is bound at /opt/proctree.
const pkgInside = '/opt/proctree';
const runnerInside = `${pkgInside}/test/fixtures/systemd-scenarios.cjs`;
const cliInside = `${pkgInside}/bin/proctree.js`;
// The broker checked on its own (test/native/broker_systemd_check.cc), from
// the cmake build of `npm run test:native`, with that build's helper.
const checkBuilt = fs.existsSync(path.join(root, 'build-cmake', 'addon', 'broker_systemd_check'));
const checkInside = `${pkgInside}/build-cmake/addon/broker_systemd_check`;
const helperInside = `${pkgInside}/build-cmake/addon/Release/proctree-helper`;

const check = spawnSync(fixture, ['check'], { encoding: 'utf8' });
const unavailable = check.status === 0 ? '' : check.stderr.trim() || `fixture check exited ${check.status ?? check.signal}`;
const required = process.env.PROCTREE_REQUIRE_SYSTEMD === '1';
if (unavailable && !required) {
  console.warn(`test/systemd.test.ts skipped: ${unavailable} (set PROCTREE_REQUIRE_SYSTEMD=1 to make this a failure)`);
}

interface Boot {
  name: string;
  init: number;
  cgroup: string;
  payload: string;
  system: string;
  failedUnits: string;
  rootfsCached: boolean;
  rootfsMs: number;
  bootMs: number;
}

interface Report {
  reason: string;
  confinement: string;
  signaled: number;
  killed: number;
  escaped: number;
  leftovers: number;
  verified: string;
}

interface ScenarioResult {
  confinement: string;
  cgroup: string | null;
  seen: number;
  inLeaf: number;
  exitCode: number | null;
  signal?: string | null;
  report: Report | null;
  survivors: number;
  leafExists: boolean | null;
  error: { code: string; message: string } | null;
  thrown?: { code: string; message: string };
}

interface EscapesOutput {
  uid: number;
  pid: number;
  caps: { tier: string; rejected: Record<string, string>; probes: Record<'delegation' | 'pidns' | 'userns', { ok: boolean; errno?: string }> };
  results: Record<string, ScenarioResult>;
}

interface SigkillOutput {
  pid: number;
  calls: { token: string; confinement: string; cgroup: string | null; pids: number[]; inLeaf: number }[];
  /** A call's sleep moved into a dot-named cgroup it made beside its leaf. */
  hidden: { token: string; pids: number[]; cgroup: string | null; leaf: string | null };
}

let boot: Boot | null = null;
const name = `proctree-sd-${process.pid}-${randomBytes(3).toString('hex')}`;
const tokens: string[] = [];

function fixtureRun(args: string[], timeout = 120_000): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string } {
  const r = spawnSync(fixture, args, {
    encoding: 'utf8',
    timeout,
    env: { ...process.env, PROCTREE_FIXTURE_OWNER: String(process.pid) },
  });
  return { status: r.status, signal: r.signal, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

/**
 * Runs argv as the session user in a fresh session-N.scope; returns its JSON
 * output (all of stdout, or its last line).
 */
function inSession<T>(options: string[], argv: string[], expectExit = true): T {
  const r = fixtureRun(['session', name, ...options, '--', ...argv]);
  const out = r.stdout.trim();
  const text = out.startsWith('{') && out.endsWith('}') ? out : (out.split('\n').pop() ?? '');
  if ((expectExit && r.status !== 0) || !text.startsWith('{')) {
    throw new Error(`session command failed (${r.status ?? r.signal}): ${argv.join(' ')}\n${r.stdout}\n${r.stderr}`);
  }
  return JSON.parse(text) as T;
}

function scenarios(options: string[], confinement = 'auto'): EscapesOutput {
  const t = token();
  for (let i = 0; i < 4; i++) tokens.push(`${t}${i}`);
  return inSession<EscapesOutput>(options, ['node', runnerInside, pkgInside, t, 'escapes', confinement]);
}

/** A cgroup path inside the container, as this host sees it. */
function hostPath(inside: string): string {
  if (!boot) throw new Error('not booted');
  return path.join(boot.payload, path.relative('/sys/fs/cgroup', inside));
}

/** The new tier's promise for one run of the escape scenarios. */
function expectSystemdTier(out: EscapesOutput): void {
  expect(out.caps.tier).toBe('systemd');
  const expected: Record<string, Partial<Report>> = {
    'double fork + setsid': { signaled: 2, escaped: 1, killed: 0 },
    'nohup + disown': { signaled: 2, killed: 0 },
    'TERM trapped': { signaled: 3, killed: 3 },
    'main exits leaving a daemon': { reason: 'leftovers', signaled: 1 },
  };
  for (const [scenario, counts] of Object.entries(expected)) {
    const r = out.results[scenario];
    expect(r.thrown, scenario).toBeUndefined();
    expect(r.error, scenario).toBeNull();
    expect(r.confinement, scenario).toBe('systemd');
    // The call's leaf is below a scope of the user manager, not the session.
    expect(r.cgroup, scenario).toMatch(/^\/sys\/fs\/cgroup\/user\.slice\/user-1500\.slice\/user@1500\.service\/.+\.scope\/.+/);
    // Every sleeper was in the call's leaf, by the kernel's account.
    expect(r.inLeaf, scenario).toBe(r.seen);
    expect(r.seen, scenario).toBeGreaterThan(0);
    expect(r.report, scenario).toMatchObject({ confinement: 'systemd', verified: 'cgroup.events', leftovers: 0, ...counts });
    expect(r.survivors, scenario).toBe(0);
    expect(r.leafExists, scenario).toBe(false);
  }
  expect(out.results['TERM trapped'].signal).toBe('SIGKILL');
  expect(out.results['main exits leaving a daemon'].exitCode).toBe(0);
}

/** After the harness has exited: its scope (the leaves' parent) is gone, and nothing of its tokens is alive. */
async function expectScopeGone(out: EscapesOutput): Promise<void> {
  const leaf = out.results['double fork + setsid'].cgroup;
  expect(leaf).toBeTruthy();
  const scope = hostPath(path.dirname(leaf as string));
  await waitUntil(() => !fs.existsSync(scope), 1000);
  expect(fs.existsSync(scope), scope).toBe(false);
}

describe.skipIf(unavailable !== '' && !required)(`the systemd tier on a real systemd 252${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  beforeAll(() => {
    if (unavailable) throw new Error(`PROCTREE_REQUIRE_SYSTEMD=1 but the fixture cannot run: ${unavailable}`);
    const r = fixtureRun(['boot', name], 600_000);
    const line = r.stdout.trim().split('\n').pop() ?? '';
    if (r.status !== 0 || !line.startsWith('{')) {
      throw new Error(`the systemd fixture did not boot (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
    }
    boot = JSON.parse(line) as Boot;
    console.log(
      `systemd fixture: ${boot.system}, booted in ${boot.bootMs} ms (root filesystem ${boot.rootfsCached ? 'cached' : `built in ${boot.rootfsMs} ms`})`,
    );
  }, 600_000);

  afterAll(() => {
    // Whatever a failed test left: its processes by token, then the container.
    killTokens(tokens);
    const r = fixtureRun(['teardown', name], 60_000);
    if (r.status !== 0) throw new Error(`teardown failed: ${r.stderr}`);
  }, 60_000);

  it('boots systemd with a user manager; the session cannot create cgroups', () => {
    expect(boot?.system).toMatch(/^(running|degraded)$/);
    const probe = inSession<{ uid: number; cgroup: string; mkdir: string }>(
      [],
      [
        'node',
        '-e',
        `const fs = require('fs');
         const cg = '/sys/fs/cgroup' + fs.readFileSync('/proc/self/cgroup', 'utf8').split('\\n').find((l) => l.startsWith('0::')).slice(3);
         let mkdir = 'ok';
         try { fs.mkdirSync(cg + '/x-' + process.pid); fs.rmdirSync(cg + '/x-' + process.pid); } catch (e) { mkdir = e.code; }
         console.log(JSON.stringify({ uid: process.getuid(), cgroup: cg, mkdir }));`,
      ],
    );
    expect(probe.uid).toBe(1500);
    expect(probe.cgroup).toMatch(/^\/sys\/fs\/cgroup\/user\.slice\/user-1500\.slice\/session-\d+\.scope$/);
    expect(probe.mkdir).toBe('EACCES');
  });

  describe('the broker on its own (native check, before the tier is wired)', () => {
    interface CheckOutput {
      probe: { ok: boolean; errno: number; detail: string };
      unit?: string;
      harness?: number;
      readyUs?: number;
      ready?: boolean;
      error?: string;
      brokerPid?: number;
      scope?: string;
      cgroupKill?: boolean;
      brokerLeafMembers?: number;
      calls?: {
        leaf: string;
        pid: number;
        pidCgroup: string;
        members: number;
        freeze?: number;
        frozenMembers?: number;
        kill?: number;
        exitSignal?: number;
        rmdir?: number;
      }[];
      brokerExit?: number;
    }

    const skipCheck = !checkBuilt && !required;
    if (skipCheck && !unavailable) console.warn('broker checks skipped: build-cmake/addon/broker_systemd_check is missing (npm run test:native builds it)');
    function check(options: string[], mode: 'exit' | 'sigkill'): { out: CheckOutput; tok: string } {
      if (!checkBuilt) throw new Error('build-cmake/addon/broker_systemd_check is missing: run `npm run test:native` first');
      const tok = token();
      tokens.push(tok);
      return { out: inSession<CheckOutput>(options, [checkInside, helperInside, tok, mode], mode === 'exit'), tok };
    }

    /** `calls`: how many calls the check made (its loop below must not pass over an empty list). */
    function expectScopeLayout(out: CheckOutput, calls: number): void {
      expect(out.probe).toMatchObject({ ok: true, detail: '/run/user/1500/systemd/private' });
      expect(out.ready, out.error).toBe(true);
      expect(out.unit).toMatch(/^proctree-\d+-[0-9a-f]{12}\.scope$/);
      // The user manager's scope, named as asked, owned by the user; the
      // broker alone in its own leaf of it.
      expect(out.scope).toBe(`/sys/fs/cgroup/user.slice/user-1500.slice/user@1500.service/app.slice/${out.unit}`);
      expect(out.brokerLeafMembers).toBe(1);
      expect(out.cgroupKill).toBe(true);
      expect(out.calls).toHaveLength(calls);
      for (const call of out.calls ?? []) {
        expect(call.leaf.startsWith(`${out.scope}/call-`)).toBe(true);
        // The main process was born in the leaf (clone3 into it), and so were its escapees.
        expect(`/sys/fs/cgroup${call.pidCgroup}`).toBe(call.leaf);
        expect(call.members).toBe(3);
      }
    }

    it.skipIf(skipCheck)('starts through systemd-run from the session; the harness runs the ladder on the leaf itself', async () => {
      const { out, tok } = check([], 'exit');
      expectScopeLayout(out, 1);
      const call = out.calls?.[0];
      // freeze, cgroup.procs, cgroup.kill, rmdir: all by the harness (errno 0).
      expect(call).toMatchObject({ freeze: 0, frozenMembers: 3, kill: 0, exitSignal: 9, rmdir: 0 });
      expect(out.brokerExit).toBe(0);
      console.log(`broker check: systemd-run to the broker's kReady in ${((out.readyUs ?? 0) / 1000).toFixed(1)} ms`);
      expect(liveWith(tok)).toEqual([]);
      const scope = hostPath(out.scope as string);
      await waitUntil(() => !fs.existsSync(scope), 1000);
      expect(fs.existsSync(scope), scope).toBe(false);
    });

    it.skipIf(skipCheck)('under the seccomp filter (no user namespaces, no clone3) too', () => {
      const { out, tok } = check(['--seccomp-no-userns'], 'exit');
      expectScopeLayout(out, 1);
      expect(out.calls?.[0]).toMatchObject({ frozenMembers: 3, kill: 0, rmdir: 0 });
      expect(liveWith(tok)).toEqual([]);
    });

    it.skipIf(skipCheck)('the harness SIGKILLed: every call and the scope are gone within a second', async () => {
      const { out, tok } = check([], 'sigkill');
      expectScopeLayout(out, 2);
      const scope = hostPath(out.scope as string);
      const start = Date.now();
      await waitUntil(() => liveWith(tok).length === 0 && !fs.existsSync(scope), 1000);
      console.log(`broker check, harness SIGKILLed: calls and scope gone after ${Date.now() - start} ms`);
      expect(liveWith(tok)).toEqual([]);
      expect(fs.existsSync(scope), scope).toBe(false);
    });

    it.skipIf(skipCheck)('without a user manager the probe says why, and nothing is started', () => {
      const { out } = check(['--no-user-manager'], 'exit');
      expect(out.probe).toMatchObject({ ok: false, errno: 2 });
      expect(out.probe.detail).toMatch(/no user manager/);
      expect(out.ready).toBeUndefined();
    });
  });

  it('doctor in the SSH-like session shows the systemd tier and its unit', () => {
    const json = inSession<{ tier: string; rejected: Record<string, string> }>([], ['node', cliInside, 'doctor', '--json']);
    expect(json.tier).toBe('systemd');
    // Why the plain cgroup tier was not possible.
    expect(json.rejected.cgroup).toMatch(/^delegation: EACCES/);
    const text = fixtureRun(['session', name, '--', 'node', cliInside, 'doctor']);
    expect(text.stdout).toMatch(/auto picks: systemd/);
    // The transient unit it runs in (or would ask for).
    expect(text.stdout).toMatch(/\S+\.scope/);
    expect(text.stdout.replace(/session-\d+\.scope/g, '')).toMatch(/\S+\.scope/);
  });

  it('auto picks the systemd tier; escapes leave nothing; verified by cgroup.events', async () => {
    const out = scenarios([]);
    expect(out.uid).toBe(1500);
    expectSystemdTier(out);
    await expectScopeGone(out);
  });

  it("confinement: 'systemd' forces the tier", async () => {
    const out = scenarios([], 'systemd');
    expectSystemdTier(out);
    await expectScopeGone(out);
  });

  it('with user namespaces refused (seccomp): still the systemd tier, not subreaper', async () => {
    const out = scenarios(['--seccomp-no-userns']);
    // The filter works: no user namespace, so no unprivileged PID namespace.
    expect(out.caps.probes.userns).toMatchObject({ ok: false, errno: 'EPERM' });
    expect(out.caps.probes.pidns).toMatchObject({ ok: false, errno: 'EPERM' });
    expectSystemdTier(out);
    await expectScopeGone(out);
  });

  it('a relative cwd is resolved against the harness, not the broker (which runs in /)', () => {
    const out = inSession<{ stdout: string; expected: string }>([], [
      'node', runnerInside, pkgInside, token(), 'cwd', 'systemd',
    ]);
    expect(out.stdout).toBe(out.expected);
  });

  it('the harness SIGKILLed: every call and the scope are gone within a second', async () => {
    const t = token();
    tokens.push(`${t}0`, `${t}1`, `${t}2`);
    const out = inSession<SigkillOutput>([], ['node', runnerInside, pkgInside, t, 'sigkill'], false);
    expect(out.calls).toHaveLength(2);
    // The hostile one is where it wanted to be: alive, outside its leaf, in
    // a '.hide…' cgroup of the scope.
    expect(out.hidden.pids).toHaveLength(1);
    expect(out.hidden.cgroup).toBe(`${path.dirname(out.hidden.leaf as string)}/.hide${out.hidden.token}`);
    for (const c of out.calls) {
      expect(c.confinement).toBe('systemd');
      expect(c.pids).toHaveLength(3);
      expect(c.inLeaf).toBe(3);
    }
    // The harness is dead (the session command returned): from here, one second.
    const scope = hostPath(path.dirname(out.calls[0].cgroup as string));
    const start = Date.now();
    await waitUntil(
      () => [...out.calls, out.hidden].every((c) => liveWith(c.token).length === 0) && !fs.existsSync(scope),
      1000,
    );
    const elapsed = Date.now() - start;
    expect(liveWith(out.hidden.token), 'the call that hid in .hide…').toEqual([]);
    for (const c of out.calls) {
      expect(liveWith(c.token), c.token).toEqual([]);
      expect(fs.existsSync(hostPath(c.cgroup as string)), c.cgroup as string).toBe(false);
    }
    expect(fs.existsSync(scope), scope).toBe(false);
    console.log(`harness SIGKILLed: calls and scope gone after ${elapsed} ms`);
  });

  it('a terminal call (options.pty) through the broker: tty, size, resize, and nothing left after terminate()', () => {
    const t = token();
    tokens.push(t);
    // The broker passes the slave on and makes it the command's controlling terminal.
    const script = `const fs = require('fs');
      const { spawn } = require(${JSON.stringify(pkgInside)});
      const call = spawn('sh', ['-c', 'tty; stty size; read x; stty size; setsid sleep ${t} & echo started; exec sleep ${t}'],
        { pty: { cols: 70, rows: 7 }, confinement: 'systemd' });
      let text = '';
      call.pty.on('data', (d) => (text += d));
      const until = async (s) => { while (!text.includes(s)) await new Promise((r) => setTimeout(r, 10)); };
      const live = () => fs.readdirSync('/proc').filter((e) => { try { return fs.readFileSync('/proc/' + e + '/cmdline', 'utf8').split('\\0').includes('${t}'); } catch { return false; } });
      // Sleepers only: setsid(1) carries the token before its setsid() call,
      // and a snapshot taken then would not count the escape.
      const sleepers = () => live().filter((e) => { try { return fs.readFileSync('/proc/' + e + '/comm', 'utf8').trim() === 'sleep'; } catch { return false; } });
      (async () => {
        await until('7 70');
        call.resize(100, 20);
        call.pty.write('\\r');
        await until('started');
        while (sleepers().length < 2) await new Promise((r) => setTimeout(r, 10));
        const report = await call.terminate({ grace: 500 });
        await call.done;
        console.log(JSON.stringify({ confinement: call.confinement, text, report: { ...report, leftovers: report.leftovers.length }, survivors: live().length, leafExists: fs.existsSync(call.cgroup) }));
      })();`;
    const out = inSession<{ confinement: string; text: string; report: Record<string, unknown>; survivors: number; leafExists: boolean }>([], ['node', '-e', script]);
    expect(out.confinement).toBe('systemd');
    expect(out.text).toMatch(/^\/dev\/pts\/\d+\r\n7 70\r\n\r\n20 100\r\nstarted\r\n/);
    expect(out.report).toMatchObject({ confinement: 'systemd', verified: 'cgroup.events', leftovers: 0, signaled: 2, escaped: 1 });
    expect(out.survivors).toBe(0);
    expect(out.leafExists).toBe(false);
    expect(liveWith(t)).toEqual([]);
  });

  it("without a user manager: 'auto' falls back as today, and doctor says why", () => {
    const t = token();
    for (let i = 0; i < 4; i++) tokens.push(`${t}${i}`);
    const out = inSession<EscapesOutput>(['--no-user-manager'], ['node', runnerInside, pkgInside, t, 'escapes']);
    expect(out.uid).toBe(1501);
    // As today: no writable cgroup, user namespaces allowed: pidns.
    expect(out.caps.tier).toBe('pidns');
    // All four escape scenarios ran (the loop below checks each).
    expect(Object.keys(out.results).sort()).toEqual(['TERM trapped', 'double fork + setsid', 'main exits leaving a daemon', 'nohup + disown']);
    for (const [scenario, r] of Object.entries(out.results)) {
      expect(r.confinement, scenario).toBe('pidns');
      expect(r.report?.verified, scenario).toBe('pidns');
      expect(r.report?.leftovers, scenario).toBe(0);
      // Seen running first (the positive control), then none left.
      expect(r.seen, scenario).toBeGreaterThan(0);
      expect(r.survivors, scenario).toBe(0);
    }

    const doctor = inSession<{ tier: string; rejected: Record<string, string> }>(['--no-user-manager'], ['node', cliInside, 'doctor', '--json']);
    expect(doctor.tier).toBe('pidns');
    expect(doctor.rejected.cgroup).toMatch(/^delegation: EACCES/);
    const text = fixtureRun(['session', name, '--no-user-manager', '--', 'node', cliInside, 'doctor']);
    expect(text.stdout).toMatch(/auto picks: pidns/);
    // And why the systemd tier was not possible: no user manager to ask.
    expect(doctor.rejected.systemd).toMatch(/user manager|XDG_RUNTIME_DIR|bus/i);
  });
});
