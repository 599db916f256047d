// A real old kernel: Debian 11's own linux-image-5.10 (no cgroup.kill, which
// came in 5.14) booted under qemu-system-x86_64 (TCG: no KVM here), with the
// Debian 11 root filesystem of scripts/bullseye-rootfs.sh as its initramfs
// and the packed package installed in it as a user would. A small /init
// mounts proc, sys, devtmpfs and cgroup2, puts itself in a cgroup of its own,
// runs test/fixtures/oldhosts/scenarios.cjs through the installed package's
// public API, prints the results on the serial console and powers off.
// Each scenario is one test here, judged from those console lines.
//
// The harness-death cases (a harness SIGKILLed or SIGTERMed with live
// escaping calls: every process of every call gone within 2 s) are the ones
// the guardian handles; on 5.10 they need a guardian that does not rely on
// cgroup.kill alone.
//
// Skipped, saying why, when qemu or the fixture is missing; CI sets
// PROCTREE_REQUIRE_OLDHOSTS=1. One boot, bounded at 6 minutes.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { bullseyeFixture, expectStoppedAfterRunning, inChroot, packTarball, parseScenarioOutput, requireOldhosts, root, type ScenarioResult } from './oldhosts';

const escapes = ['double-fork-setsid', 'nohup-disown', 'trapped-term', 'main-exits-leaving-daemon'];
const deaths = ['harness-sigkill', 'harness-sigterm', 'harness-sigint'];
// The shim tiers on the same kernel: a double-forked setsid escape each.
const tiers = ['tier-pidns', 'tier-subreaper'];
const BOOT_LIMIT_MS = 360_000;

function which(cmd: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) if (fs.existsSync(path.join(dir, cmd))) return path.join(dir, cmd);
  return null;
}

const { fixture, why: noFixture } = bullseyeFixture();
const why = noFixture ?? (which('qemu-system-x86_64') ? null : 'qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)') ??
  (which('cpio') ? null : 'cpio is not installed');
if (why && !requireOldhosts) console.warn(`Linux 5.10 (qemu) tests skipped: ${why}`);

// PID 1 of the VM. Not exec'd into node: the shell stays init and reaps the
// orphans that reparent to it while it waits.
const INIT = (scenarios: string[]) => `#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs tmpfs /tmp
# A harness usually runs in a cgroup of its own, not the root one.
mkdir /sys/fs/cgroup/harness && echo $$ > /sys/fs/cgroup/harness/cgroup.procs
echo "PROCTREE-BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
cd /opt/proctree-test/app
PROCTREE_HARNESS_CALLS=20 PROCTREE_SCENARIO_MS=60000 timeout 300 node /opt/proctree-test/scenarios.cjs proctree ${scenarios.join(' ')}
echo "PROCTREE-DONE $? $(cut -d' ' -f1 /proc/uptime)"
echo o > /proc/sysrq-trigger
sleep 10
`;

let work = '';
let console_ = '';
let bootMs = 0;
let totalMs = 0;
let results = new Map<string, ScenarioResult>();
let env: ReturnType<typeof parseScenarioOutput>['env'] = null;

function boot(initrd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const qemu = spawn(
      'qemu-system-x86_64',
      [
        '-accel', 'tcg', '-cpu', 'max', '-smp', '2', '-m', '1536',
        '-display', 'none', '-monitor', 'none', '-serial', 'stdio', '-no-reboot',
        '-kernel', fixture?.vmlinuz as string,
        '-initrd', initrd,
        '-append', 'console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // The VM is ours: stopped by its pid when it overruns.
    const limit = setTimeout(() => qemu.kill('SIGKILL'), BOOT_LIMIT_MS);
    qemu.stdout.on('data', (d: Buffer) => {
      console_ += d.toString();
      if (!bootMs && console_.includes('PROCTREE-BOOTED')) bootMs = Date.now() - started;
    });
    qemu.stderr.on('data', (d: Buffer) => (console_ += d.toString()));
    qemu.on('error', reject);
    qemu.on('exit', (code, signal) => {
      clearTimeout(limit);
      totalMs = Date.now() - started;
      if (!console_.includes('PROCTREE-DONE')) {
        reject(new Error(`the VM ended (${code ?? signal}) after ${totalMs} ms without finishing:\n${console_.slice(-4000)}`));
      } else resolve();
    });
  });
}

describe.skipIf(why !== null && !requireOldhosts)(`on Debian 11's Linux 5.10 under qemu${why ? ` (cannot run: ${why})` : ''}`, () => {
  beforeAll(async () => {
    if (why || !fixture) throw new Error(`PROCTREE_REQUIRE_OLDHOSTS=1, but ${why}`);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-oldkernel-'));
    const tarball = path.basename(packTarball(work));
    // Installed in the Debian 11 chroot, as a user would, then copied into the initramfs.
    const res = inChroot(
      fixture.rootfs,
      work,
      `set -e; mkdir /mnt/app && cd /mnt/app && echo '{"name":"app","private":true}' > package.json && ` +
        `npm install /mnt/${tarball} --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error`,
      { timeoutMs: 240_000 },
    );
    if (res.status !== 0) throw new Error(`npm install in the chroot failed (${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);

    const overlay = path.join(work, 'overlay');
    const dest = path.join(overlay, 'opt', 'proctree-test');
    fs.mkdirSync(dest, { recursive: true });
    fs.cpSync(path.join(work, 'app'), path.join(dest, 'app'), { recursive: true, verbatimSymlinks: true });
    fs.copyFileSync(path.join(root, 'test', 'fixtures', 'oldhosts', 'scenarios.cjs'), path.join(dest, 'scenarios.cjs'));
    fs.writeFileSync(path.join(overlay, 'init'), INIT([...escapes, ...tiers, ...deaths]), { mode: 0o755 });
    // The kernel unpacks concatenated newc archives in order: the cached
    // root filesystem, then /init and the installed package.
    const initrd = path.join(work, 'initrd.cpio');
    execFileSync('sh', ['-c', `cat "$1" > "$3" && cd "$2" && find . | LC_ALL=C sort | cpio -o -H newc --quiet >> "$3"`, 'initrd', fixture.baseCpio, overlay, initrd]);

    await boot(initrd);
    ({ env, results } = parseScenarioOutput(console_));
    console.log(`qemu: booted to /init in ${bootMs} ms, done in ${totalMs} ms; ${fixture.info}`);
    for (const r of results.values()) console.log(`linux-5.10 ${r.name}: ${r.ok ? 'pass' : 'FAIL'} (${r.ms} ms) ${r.detail}`);
    if (!env) throw new Error(`no PROCTREE-ENV line on the console:\n${console_.slice(-4000)}`);
  }, BOOT_LIMIT_MS + 300_000);

  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('boots Debian 11\'s 5.10 kernel, loads the glibc prebuild, and finds no cgroup.kill', () => {
    expect(env?.kernel).toMatch(/^5\.10\./);
    expect(env?.glibc).toBe('2.31');
    expect(env?.loaded).toEqual(['/opt/proctree-test/app/node_modules/proctree/prebuilds/linux-x64/proctree.glibc.node']);
    expect(env?.cgroup2Mounts).toEqual(['/sys/fs/cgroup']);
    expect(env?.probes.cgroupKill).not.toBe(true);
    // Freeze (5.2), pidfds (5.3) and clone3 into a cgroup (5.7) are all there.
    expect(env?.probes.freeze).toBe(true);
    expect(env?.probes.pidfd).toBe(true);
    expect(env?.probes.cloneIntoCgroup).toBe(true);
    expect(env?.tier).toBe('cgroup');
  });

  it.each(escapes)('escape %s: stopped without cgroup.kill, nothing survives', (name) => {
    const r = results.get(name);
    expect(r, `no result for ${name}:\n${console_.slice(-4000)}`).toBeDefined();
    expect(r?.ok, r?.detail).toBe(true);
    // Seen running first (the positive control), then none left.
    expectStoppedAfterRunning(r, console_.slice(-4000));
  });

  it.each(tiers)('%s: available on 5.10, and stops a double-forked setsid escape', (name) => {
    const r = results.get(name);
    expect(r, `no result for ${name}:\n${console_.slice(-4000)}`).toBeDefined();
    expect(r?.ok, r?.detail).toBe(true);
    expect(r?.confinement).toBe(name.replace('tier-', ''));
    expectStoppedAfterRunning(r, console_.slice(-4000));
  });

  it.each(deaths)('%s with live escaping calls: every process of every call is gone within 2 s', (name) => {
    const r = results.get(name);
    expect(r, `no result for ${name}:\n${console_.slice(-4000)}`).toBeDefined();
    expect(r?.ok, r?.detail).toBe(true);
    expect(r?.processes).toBe(60);
  });
});
