// capabilities() measured for real, on this host and under the conditions
// that take a tier away: a harness run as an unprivileged uid whose cgroup it cannot
// write, and a harness under a seccomp filter that answers clone3 with ENOSYS
// (or EPERM). Each condition is created for real: setpriv drops to nobody, a
// small C helper installs the filter and execs node.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { capabilities, ConfinementUnavailableError, spawn, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, killTokens, liveWith, token, waitForLive, leafReleased } from './helpers';

const root = path.resolve(__dirname, '..');
const harness = path.join(root, 'test', 'fixtures', 'tier-harness.cjs');
let work = '';
let seccompHelper = '';

function which(cmd: string): string | null {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

interface HarnessOutput {
  uid: number;
  caps: ReturnType<typeof capabilities>;
  results: Record<
    string,
    {
      confinement?: string;
      cgroup?: string | null;
      seen?: number;
      survivors?: number;
      report?: { verified: string; leftovers: unknown[]; escaped: number };
      error?: { code: string; message: string };
    }
  >;
}

function runHarness(prefix: string[], t: string, tiers: string[]): HarnessOutput {
  const res = spawnSync(prefix[0], [...prefix.slice(1), process.execPath, harness, root, t, ...tiers], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  const line = res.stdout.trim().split('\n').pop() ?? '';
  if (res.status !== 0 || !line.startsWith('{')) {
    throw new Error(`harness failed (${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);
  }
  return JSON.parse(line) as HarnessOutput;
}

const tokens: string[] = [];
const calls: ToolCall[] = [];

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-caps-'));
  if (which('cc')) {
    seccompHelper = path.join(work, 'seccomp-no-clone3');
    execFileSync('cc', ['-O2', '-o', seccompHelper, path.join(root, 'test', 'fixtures', 'seccomp-no-clone3.c')]);
  }
});

afterAll(() => {
  for (const c of calls) killCgroup(c.cgroup);
  // Anything a harness of ours left behind, by the tokens this file made.
  killTokens(tokens);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('capabilities() on this host', () => {
  it('every probe is real and true here, and auto picks cgroup', () => {
    const caps = capabilities();
    expect(caps.tier).toBe('cgroup');
    expect(caps.rejected).toEqual({});
    expect(caps.clone).toBe('clone3');
    // Every probe of the host's kernel and the package works here; whether a
    // systemd user manager answers depends on the machine, not on proctree:
    // either way it says so (the systemd tier is tested in test/systemd.test.ts).
    for (const [name, probe] of Object.entries(caps.probes)) {
      if (name === 'userManager') expect(probe.ok || (probe.errno !== undefined && probe.detail !== undefined), name).toBe(true);
      // The plain-tree tier exists only in the portable binding (test/portable.test.ts).
      else if (name === 'none') expect(probe, name).toMatchObject({ ok: false });
      else expect(probe, name).toMatchObject({ ok: true });
    }
    expect(caps.portable).toBeNull();
    expect(caps.cgroup2?.mount).toBeTruthy();
    // Cached: the same object, no second round of probes.
    expect(capabilities()).toBe(caps);
  });

  it('leaves no throwaway cgroup behind', () => {
    const own = capabilities().cgroup2?.ownPath as string;
    const mine = fs.readdirSync(own).filter((d) => d.startsWith(`proctree-probe-${process.pid}-`));
    expect(mine).toEqual([]);
  });
});

describe('an unprivileged harness (nobody) whose cgroup is not writable', () => {
  const setpriv = which('setpriv');
  const uid = Number(spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim());
  const canDrop = process.getuid?.() === 0 && setpriv !== null && uid > 0;

  it.skipIf(!canDrop)('reports the fallback with EACCES, and its calls still stop every escapee', () => {
    // The repo must be readable by nobody for node to load it.
    expect(fs.statSync(path.join(root, 'dist')).mode & 0o005).toBe(0o005);
    const t = token();
    tokens.push(t);
    const group = spawnSync('id', ['-gn', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    const out = runHarness(
      [setpriv as string, `--reuid=${uid}`, `--regid=${group}`, '--clear-groups'],
      t,
      ['auto', 'cgroup', 'subreaper', 'pgroup'],
    );
    expect(out.uid).toBe(uid);
    const caps = out.caps;
    expect(caps.probes.delegation).toMatchObject({ ok: false, errno: 'EACCES', syscall: 'mkdir' });
    expect(caps.rejected.cgroup).toMatch(/^delegation: EACCES/);
    // A PID namespace inside a user namespace of nobody's own.
    expect(caps.probes.userns.ok).toBe(true);
    expect(caps.probes.pidns).toMatchObject({ ok: true, detail: 'CLONE_NEWUSER|CLONE_NEWPID' });
    expect(caps.tier).toBe('pidns');

    expect(out.results.auto).toMatchObject({ confinement: 'pidns', cgroup: null, seen: 2, survivors: 0 });
    expect(out.results.auto.report?.verified).toBe('pidns');
    expect(out.results.cgroup.error?.code).toBe('ERR_PROCTREE_CONFINEMENT_UNAVAILABLE');
    expect(out.results.cgroup.error?.message).toMatch(/delegation: EACCES/);
    expect(out.results.subreaper).toMatchObject({ confinement: 'subreaper', seen: 2, survivors: 0 });
    // The baseline misses the setsid escapee, and says it could not verify.
    expect(out.results.pgroup).toMatchObject({ confinement: 'pgroup', seen: 2, survivors: 1 });
    expect(out.results.pgroup.report?.verified).toBe('none');
    expect(liveWith(t)).toEqual([]);
  });
});

describe('a harness under a seccomp filter that answers clone3', () => {
  // Only ENOSYS: glibc's pthread_create falls back to clone() on ENOSYS
  // alone, so node itself cannot start under a filter that answers EPERM
  // (spawn.cc still treats EPERM from clone3 like ENOSYS).
  for (const errno of ['ENOSYS'] as const) {
    it.skipIf(!which('cc'))(`with ${errno}: clone3 false, still the cgroup tier through clone + cgroup.procs`, () => {
      const t = token();
      tokens.push(t);
      const out = runHarness([seccompHelper, '-e', errno], t, ['auto', 'pidns', 'subreaper']);
      const caps = out.caps;
      expect(caps.probes.clone3).toMatchObject({ ok: false, errno, syscall: 'clone3' });
      expect(caps.probes.cloneIntoCgroup.ok).toBe(false);
      // The fallback placed a real child into a throwaway cgroup.
      expect(caps.probes.delegation).toMatchObject({ ok: true });
      expect(caps.clone).toBe('clone');
      expect(caps.tier).toBe('cgroup');
      expect(out.results.auto).toMatchObject({ confinement: 'cgroup', seen: 2, survivors: 0 });
      expect(out.results.auto.report?.verified).toBe('cgroup.events');
      expect(out.results.auto.report?.escaped).toBe(1);
      expect(leafReleased(out.results.auto.cgroup ?? null)).toBe(true);
      // The shims start through clone() too.
      expect(out.results.pidns).toMatchObject({ confinement: 'pidns', seen: 2, survivors: 0 });
      expect(out.results.subreaper).toMatchObject({ confinement: 'subreaper', seen: 2, survivors: 0 });
      expect(liveWith(t)).toEqual([]);
    });
  }
});

describe('a harness whose own cgroup was killed once (cgroup.kill written before it joined)', () => {
  // Linux 6.14 and the stable kernels its fix went to kill every child that
  // clone3 places into another cgroup from such a cgroup (their counts of
  // cgroup.kill differ). The probe sees its throwaway child die at birth and
  // places children by cgroup.procs instead: still the cgroup tier.
  it.skipIf(process.getuid?.() !== 0)('keeps the cgroup tier, its children placed through clone + cgroup.procs', () => {
    const t = token();
    tokens.push(t);
    const killed = path.join(capabilities().cgroup2?.ownPath as string, `proctree-killed-${t}`);
    fs.mkdirSync(killed);
    try {
      fs.writeFileSync(path.join(killed, 'cgroup.kill'), '1');
      // The shell joins the killed cgroup, then becomes the harness.
      const out = runHarness(['sh', '-c', `echo $$ > ${killed}/cgroup.procs && exec "$@"`, 'sh'], t, ['auto']);
      expect(out.caps.tier).toBe('cgroup');
      expect(out.caps.probes.delegation).toMatchObject({ ok: true });
      if (!out.caps.probes.cloneIntoCgroup.ok) {
        // A kernel that kills at birth (not every kernel does).
        expect(out.caps.probes.cloneIntoCgroup).toMatchObject({ errno: 'ECANCELED', syscall: 'clone3' });
        expect(out.caps.clone).toBe('clone');
      }
      expect(out.results.auto).toMatchObject({ confinement: 'cgroup', seen: 2, survivors: 0 });
      expect(out.results.auto.cgroup?.startsWith(`${killed}/`)).toBe(true);
      expect(out.results.auto.report?.leftovers).toEqual([]);
      expect(liveWith(t)).toEqual([]);
    } finally {
      removeCgroupTree(killed);
    }
  });
});

/** Kills and removes a cgroup this file made, with whatever a harness left below it. */
function removeCgroupTree(dir: string): void {
  let subdirs: fs.Dirent[] = [];
  try {
    subdirs = fs.readdirSync(dir, { withFileTypes: true }).filter((d) => d.isDirectory());
  } catch {
    return;
  }
  for (const d of subdirs) removeCgroupTree(path.join(dir, d.name));
  killCgroup(dir);
}

describe('a tool call that drops to another uid and tries to leave its cgroup', () => {
  it.skipIf(process.getuid?.() !== 0)('fails with EACCES and is still killed', async () => {
    const t = token();
    tokens.push(t);
    const own = capabilities().cgroup2?.ownPath as string;
    // The harness's own cgroup.procs: root-owned, the common ancestor a
    // migration out of the call's leaf would need to write.
    const target = path.join(own, 'cgroup.procs');
    const script = `echo $$ > ${target} && echo moved || echo failed; exec sleep ${t}`;
    const call = spawn('sh', ['-c', script], { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'pipe'] });
    calls.push(call);
    call.on('error', () => {});
    let stdout = '';
    let stderr = '';
    call.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
    call.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const [pid] = await waitForLive(t, 1, 'sleep');
    const deadline = Date.now() + 3000;
    while ((!stdout.includes('\n') || stderr === '') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(stdout).toContain('failed');
    expect(stderr).toMatch(/Permission denied/);
    // Still in the call's leaf, by the kernel's account.
    const cg = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    expect(cg).toContain(path.basename(call.cgroup as string));
    const report = await call.terminate({ grace: 300 });
    await call.done;
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });

  it('an explicit tier that cannot run throws ERR_PROCTREE_CONFINEMENT_UNAVAILABLE naming the probe', () => {
    // Every tier runs here; the error path is covered by the unprivileged
    // harness above. Here: the class and code are exported as documented.
    const err = new ConfinementUnavailableError('x');
    expect(err.code).toBe('ERR_PROCTREE_CONFINEMENT_UNAVAILABLE');
  });
});

describe('a host with a second cgroup2 mount (a bind mount of a part of the hierarchy, listed first)', () => {
  const mount = capabilities().cgroup2?.mount as string;
  const canMount = process.getuid?.() === 0 && which('unshare') !== null && !!mount;

  it.skipIf(!canMount)('the cgroup tier still finds the mount that shows its own cgroup, and ps the calls', () => {
    const t = token();
    const own = capabilities().cgroup2?.ownPath as string;
    const part = path.join(own, `proctree-mnt-${process.pid}-${t.replace('.', '')}`);
    fs.mkdirSync(part);
    const where = fs.mkdtempSync('/tmp/proctree-cg2-');
    const dist = path.resolve(__dirname, '../dist/cjs/index.js');
    const code = `
      const { capabilities, run } = require(${JSON.stringify(dist)});
      const { execFileSync } = require('node:child_process');
      (async () => {
        const caps = capabilities();
        const r = await run('bash', ['-c', 'setsid sleep ${t} & ${JSON.stringify(process.execPath)} ${JSON.stringify(path.resolve(__dirname, '../bin/proctree.js'))} ps --json; exit 0'], { grace: 200 });
        console.log(JSON.stringify({ tier: caps.tier, mount: caps.cgroup2 && caps.cgroup2.mount, confinement: r.confinement, cgroup: r.cgroup, ps: JSON.parse(r.stdout), report: r.cleanup }));
      })();`;
    // In a mount namespace of our own: the part is bind-mounted first, then
    // the hierarchy is mounted again, so mountinfo lists the part first.
    const script = `set -e
      mount --bind ${JSON.stringify(part)} ${JSON.stringify(where)}
      umount -l ${JSON.stringify(mount)}
      mount -t cgroup2 none ${JSON.stringify(mount)}
      grep cgroup2 /proc/self/mountinfo >&2
      exec "$0" -e "$1"`;
    try {
      const r = spawnSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script, process.execPath, code], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      const lines = r.stderr.trim().split('\n');
      // The bind mount of the part comes first.
      expect(lines[0]).toContain(where);
      const out = JSON.parse(r.stdout);
      expect(out.tier).toBe('cgroup');
      expect(out.mount).toBe(mount);
      expect(out.confinement).toBe('cgroup');
      expect(out.cgroup.startsWith(own)).toBe(true);
      // ps, run inside the call, found that very call.
      expect(out.ps.some((c: { cgroup: string }) => c.cgroup === out.cgroup)).toBe(true);
      expect(out.report).toMatchObject({ leftovers: [], escaped: 1 });
      expect(liveWith(t, 'sleep')).toEqual([]);
    } finally {
      fs.rmdirSync(part);
      fs.rmSync(where, { recursive: true, force: true });
    }
  });
});

describe('a proctree-helper that cannot run (built for another libc, say)', () => {
  it('is reported by capabilities(), the tiers that need it are rejected, and the missing guardian is a warning, never a per-call EPROTO', () => {
    const t = token();
    // A copy of the package whose helper is not an executable this host can run.
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-badhelper-'));
    try {
      const root = path.resolve(__dirname, '..');
      fs.cpSync(path.join(root, 'dist'), path.join(copy, 'dist'), { recursive: true });
      fs.cpSync(path.join(root, 'docs'), path.join(copy, 'docs'), { recursive: true });
      fs.copyFileSync(path.join(root, 'package.json'), path.join(copy, 'package.json'));
      fs.mkdirSync(path.join(copy, 'build', 'Release'), { recursive: true });
      fs.copyFileSync(path.join(root, 'build', 'Release', 'proctree.node'), path.join(copy, 'build', 'Release', 'proctree.node'));
      // ELF magic with nothing behind it: execve fails (ENOEXEC / EIO).
      fs.writeFileSync(path.join(copy, 'build', 'Release', 'proctree-helper'), Buffer.from('7f454c4602010100', 'hex'), { mode: 0o755 });
      fs.symlinkSync(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
      const code = `
        const { capabilities, run } = require(${JSON.stringify(path.join(copy, 'dist', 'cjs', 'index.js'))});
        const warnings = [];
        process.on('warning', (w) => warnings.push(w.code));
        (async () => {
          const caps = capabilities();
          const r = await run('bash', ['-c', 'setsid sleep ${t} & echo ran'], { grace: 200 });
          await new Promise((res) => setImmediate(res));
          console.log(JSON.stringify({ helper: caps.probes.helper, tier: caps.tier, rejected: caps.rejected, out: r.stdout, report: r.cleanup, warnings }));
        })();`;
      const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 30_000 });
      const out = JSON.parse(r.stdout);
      expect(out.helper.ok).toBe(false);
      expect(out.helper.detail).toContain('proctree-helper');
      // The cgroup tier does not need the helper to run calls; pidns and
      // subreaper would be rejected for it.
      expect(out.tier).toBe('cgroup');
      expect(out.out).toBe('ran\n');
      expect(out.report).toMatchObject({ leftovers: [] });
      expect(out.warnings).toContain('PROCTREE_NO_GUARDIAN');
      const forced = spawnSync(
        process.execPath,
        ['-e', `const { spawn } = require(${JSON.stringify(path.join(copy, 'dist', 'cjs', 'index.js'))}); try { spawn('true', [], { confinement: 'subreaper' }); } catch (e) { console.log(e.code, e.message); }`],
        { encoding: 'utf8', timeout: 30_000 },
      );
      expect(forced.stdout).toMatch(/^ERR_PROCTREE_CONFINEMENT_UNAVAILABLE .*helper/);
      expect(liveWith(t, 'sleep')).toEqual([]);
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });
});

describe('a harness out of descriptors at its first spawn', () => {
  it("the probes' EMFILE is that spawn's 'error' (as Node), is not cached, and the next run after fds are freed works", () => {
    // A harness of its own with a low fd limit, filled to the last fd before
    // anything was probed.
    const script = `
      const fs = require('fs');
      const { spawn, run, capabilities } = require(${JSON.stringify(path.join(root, 'dist/cjs/index.js'))});
      const held = [];
      try { for (let i = 0; i < 4096; i++) held.push(fs.openSync('/dev/null', 'r')); } catch {}
      let threw = null;
      let call;
      try { call = spawn('true', [], { stdio: 'ignore' }); } catch (e) { threw = e.code; }
      const events = [];
      const done = (later) => console.log(JSON.stringify({ threw, events, ...later }));
      const after = async () => {
        for (const fd of held) fs.closeSync(fd);
        held.length = 0;
        try {
          const r = await run('echo', ['again']);
          done({ stdout: r.stdout, tier: capabilities().tier });
        } catch (e) { done({ runError: e.code ?? String(e) }); }
      };
      if (!call) after();
      else {
        call.on('error', (e) => events.push('error:' + e.code + ':' + e.syscall));
        call.on('close', (c) => { events.push('close:' + c); after(); });
      }
    `;
    const r = spawnSync('bash', ['-c', `ulimit -n 128 && exec "${process.execPath}" -e "$0"`, script], { encoding: 'utf8', timeout: 20_000 });
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null');
    expect(out.threw).toBeNull();
    expect(out.events).toEqual(['error:EMFILE:spawn true', 'close:-24']);
    expect(out.runError).toBeUndefined();
    expect(out.stdout).toBe('again\n');
    expect(out.tier).toBe(capabilities().tier);
  });
});
