// A real old kernel: Debian 11's own linux-image-5.10 (no cgroup.kill, which
// came in 5.14) booted by scripts/vm.sh under qemu-system-x86_64 (TCG: no
// KVM here), with the Debian 11 root filesystem of scripts/bullseye-rootfs.sh
// as its initramfs and the packed package installed in it as a user would.
// The VM's /init mounts proc, sys, devtmpfs and cgroup2 and runs the command
// in a cgroup of its own (--layout inner: /sys/fs/cgroup/harness, where the
// harness makes its subtree); the command runs
// test/fixtures/oldhosts/scenarios.cjs through the installed package's
// public API and prints the results. Each scenario is one test here, judged
// from those lines.
//
// The harness-death cases (a harness SIGKILLed or SIGTERMed with live
// escaping calls: every process of every call gone within 2 s) are the ones
// the guardian handles; on 5.10 they need a guardian that does not rely on
// cgroup.kill alone.
//
// Skipped, saying why, when qemu or the fixture is missing; CI sets
// PROCTREE_REQUIRE_OLDHOSTS=1. One boot, bounded at 6 minutes.
import path from 'node:path';

import { beforeAll, describe, expect, it } from 'vitest';

import { bullseyeFixture, expectStoppedAfterRunning, parseScenarioOutput, requireOldhosts, root, runVm, vmUnavailable, type ScenarioResult } from './oldhosts';

const escapes = ['double-fork-setsid', 'nohup-disown', 'trapped-term', 'main-exits-leaving-daemon'];
const deaths = ['harness-sigkill', 'harness-sigterm', 'harness-sigint'];
// The shim tiers on the same kernel: a double-forked setsid escape each.
const tiers = ['tier-pidns', 'tier-subreaper'];
const BOOT_LIMIT_S = 360;

const why = vmUnavailable('5.10');
if (why && !requireOldhosts) console.warn(`Linux 5.10 (qemu) tests skipped: ${why}`);

// The VM's command (root, in /opt/proctree-test/app, where the package is installed).
const COMMAND = (scenarios: string[]) => `
echo "PROCTREE-BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
PROCTREE_HARNESS_CALLS=20 PROCTREE_SCENARIO_MS=60000 timeout 300 node /opt/proctree-test/scenarios.cjs proctree ${scenarios.join(' ')}
echo "PROCTREE-DONE $? $(cut -d' ' -f1 /proc/uptime)"
`;

let console_ = '';
let results = new Map<string, ScenarioResult>();
let env: ReturnType<typeof parseScenarioOutput>['env'] = null;

describe.skipIf(why !== null && !requireOldhosts)(`on Debian 11's Linux 5.10 under qemu${why ? ` (cannot run: ${why})` : ''}`, () => {
  beforeAll(async () => {
    if (why) throw new Error(`PROCTREE_REQUIRE_OLDHOSTS=1, but ${why}`);
    const scenarios = path.join(root, 'test', 'fixtures', 'oldhosts', 'scenarios.cjs');
    const run = await runVm(
      { kernel: '5.10', layout: 'inner', timeoutS: BOOT_LIMIT_S, adds: [[scenarios, '/opt/proctree-test/scenarios.cjs']] },
      ['bash', '-c', COMMAND([...escapes, ...tiers, ...deaths])],
    );
    console_ = `${run.stdout}\n${run.stderr}`;
    if (!run.stdout.includes('PROCTREE-DONE')) {
      throw new Error(`the VM ended (${run.status ?? run.signal}) after ${run.ms} ms without finishing:\n${console_.slice(-4000)}`);
    }
    ({ env, results } = parseScenarioOutput(console_));
    const booted = run.stderr.split('\n').find((l) => l.startsWith('vm.sh: linux')) ?? '';
    console.log(`${booted}; ${bullseyeFixture().fixture?.info ?? ''}`);
    for (const r of results.values()) console.log(`linux-5.10 ${r.name}: ${r.ok ? 'pass' : 'FAIL'} (${r.ms} ms) ${r.detail}`);
    if (!env) throw new Error(`no PROCTREE-ENV line in the output:\n${console_.slice(-4000)}`);
  }, (BOOT_LIMIT_S + 600) * 1000);

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
