// scripts/vm.sh, the VM where limits can be proved: this host's cgroup2
// mount may have no controllers (a hybrid host binds memory, pids and cpu to
// cgroup v1), the VM's pure cgroup v2 has them. What a boot of Debian 12's
// 6.1 kernel shows (the controllers on for the harness cgroup, COMMAND in
// its leaf, the packed package installed, COMMAND's output and status apart)
// is checked by test/limits-vm.test.ts, in the boot that proves the limits:
// one boot, not two, of an emulated CPU. Here: a VM that overruns --timeout
// is killed, with status 124, and its qemu is gone.
//
// Skipped, saying why, when the VM cannot be booted here (not root, no qemu,
// no Debian 11 fixture or Debian 12 kernel: bash scripts/bullseye-rootfs.sh
// and bash scripts/debian-kernel.sh 6.1 make them); CI sets
// PROCTREE_REQUIRE_VM=1 so that it cannot skip.
import fs from 'node:fs';

import { beforeAll, describe, expect, it } from 'vitest';

import { requireVm, runVm, vmUnavailable } from './oldhosts';

const why = vmUnavailable('6.1');
if (why && !requireVm) console.warn(`VM (scripts/vm.sh) tests skipped: ${why}`);

describe.skipIf(why !== null && !requireVm)(`scripts/vm.sh on Debian 12's Linux 6.1${why ? ` (cannot run: ${why})` : ''}`, () => {
  beforeAll(() => {
    if (why) throw new Error(`PROCTREE_REQUIRE_VM=1, but ${why}`);
  });

  it('kills a VM that overruns --timeout: status 124, and its qemu process is gone', async () => {
    const over = await runVm({ kernel: '6.1', timeoutS: 3 }, ['sleep', '600']);
    const detail = `status ${over.status ?? over.signal}\n${over.stderr}`;
    expect(over.status, detail).toBe(124);
    expect(over.stderr).toMatch(/overran 3 s and was killed/);
    const pid = Number(/qemu pid (\d+)/.exec(over.stderr)?.[1]);
    expect(pid, detail).toBeGreaterThan(0);
    // Gone (or the number reused by something that is not a qemu).
    let cmdline = '';
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      // no such process
    }
    expect(cmdline).not.toMatch(/qemu-system/);
  }, 600_000);
});
