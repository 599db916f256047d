// The arm64 prebuild, proved to load and work: Debian's arm64 Node runs under
// qemu-user (scripts/arm64-sysroot.sh sets it up) on a staged copy of the
// package that holds only dist/ and prebuilds/linux-arm64/, and stops a real
// double-forked setsid escape. qemu-user 7.2 answers clone3 with ENOSYS and
// refuses CLONE_PIDFD, so this runs the clone() fallback, where the child
// joins its cgroup itself. Skipped, saying why, only when qemu or the sysroot
// is missing; CI sets PROCTREE_REQUIRE_ARM64=1 so that it can never skip there.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { killTokens, liveWith, token } from './helpers';

const root = path.resolve(__dirname, '..');
const sysroot = path.join(root, '.cache', 'arm64-sysroot');
const armNode = path.join(sysroot, 'usr', 'bin', 'node');
const prebuild = path.join(root, 'prebuilds', 'linux-arm64');
const required = process.env.PROCTREE_REQUIRE_ARM64 === '1';

function findQemu(): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const p = path.join(dir, 'qemu-aarch64-static');
    if (fs.existsSync(p)) return p;
  }
  return null;
}

const qemu = findQemu();
function missing(): string | null {
  if (process.arch !== 'x64') return `the host is ${process.arch}; this check emulates arm64 on x64`;
  if (!qemu) return 'qemu-aarch64-static is not installed (apt-get install qemu-user-static)';
  if (!fs.existsSync(armNode)) return 'no arm64 Node sysroot (bash scripts/arm64-sysroot.sh)';
  if (!fs.existsSync(path.join(prebuild, 'proctree.glibc.node'))) return 'no arm64 prebuild (npm run prebuild)';
  if (!fs.existsSync(path.join(root, 'dist', 'cjs', 'index.js'))) return 'no dist/ (npm run build:ts)';
  return null;
}
const why = missing();
if (why && !required) console.warn(`arm64 prebuild check skipped: ${why}`);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-arm64-'));
const tokens: string[] = [];

afterAll(() => {
  // Only what this test started: processes carrying its token.
  killTokens(tokens);
  fs.rmSync(work, { recursive: true, force: true });
});

describe('arm64 prebuild under qemu-user', () => {
  const noPrebuild = fs.existsSync(path.join(prebuild, 'proctree.glibc.node')) ? null : 'no arm64 prebuild (npm run prebuild)';
  it.skipIf(noPrebuild !== null && !required)(
    `node-gyp-build on arm64 picks prebuilds/linux-arm64/proctree.glibc.node${noPrebuild ? ` (${required ? 'cannot run' : 'skipped'}: ${noPrebuild})` : ''}`,
    () => {
      if (noPrebuild) throw new Error(`PROCTREE_REQUIRE_ARM64=1, but ${noPrebuild}`);
      // node-gyp-build reads the architecture from npm_config_arch when it loads.
      const pkg = path.join(work, 'resolve');
      fs.mkdirSync(path.join(pkg, 'prebuilds'), { recursive: true });
      fs.copyFileSync(path.join(root, 'package.json'), path.join(pkg, 'package.json'));
      fs.cpSync(prebuild, path.join(pkg, 'prebuilds', 'linux-arm64'), { recursive: true });
      const res = spawnSync(
        process.execPath,
        ['-p', `require(${JSON.stringify(require.resolve('node-gyp-build'))}).path(${JSON.stringify(pkg)})`],
        { env: { ...process.env, npm_config_arch: 'arm64' }, encoding: 'utf8' },
      );
      expect(res.stderr).toBe('');
      expect(res.stdout.trim()).toBe(path.join(pkg, 'prebuilds', 'linux-arm64', 'proctree.glibc.node'));
    },
  );

  it.skipIf(why !== null && !required)(
    `loads prebuilds/linux-arm64 in arm64 Node and stops a setsid escape${why ? ` (${required ? 'cannot run' : 'skipped'}: ${why})` : ''}`,
    () => {
      if (why) throw new Error(`PROCTREE_REQUIRE_ARM64=1, but ${why}`);
      // A package with no build/ at all, so node-gyp-build can only pick the prebuild.
      const pkg = path.join(work, 'package');
      fs.mkdirSync(path.join(pkg, 'prebuilds'), { recursive: true });
      fs.copyFileSync(path.join(root, 'package.json'), path.join(pkg, 'package.json'));
      fs.cpSync(path.join(root, 'dist'), path.join(pkg, 'dist'), { recursive: true });
      fs.cpSync(prebuild, path.join(pkg, 'prebuilds', 'linux-arm64'), { recursive: true });
      fs.symlinkSync(path.join(root, 'node_modules'), path.join(pkg, 'node_modules'));
      const smoke = path.join(work, 'smoke.js');
      fs.copyFileSync(path.join(root, 'scripts', 'smoke.js'), smoke);

      const t = token(100);
      tokens.push(t);
      const res = spawnSync(qemu as string, ['-L', sysroot, armNode, smoke, pkg, t], {
        cwd: work,
        encoding: 'utf8',
        timeout: 150_000,
      });
      const line = res.stdout.trim().split('\n').pop() ?? '';
      if (res.status !== 0 || !line.startsWith('{')) {
        throw new Error(`arm64 smoke failed (${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);
      }
      const report = JSON.parse(line);
      console.log(
        `arm64 smoke: node ${report.node} (N-API ${report.napi}) spawned with ${report.method}, ` +
          `capabilities().clone = ${report.cloneCapability}`,
      );

      expect(report.arch).toBe('arm64');
      expect(report.loaded).toEqual([path.join(pkg, 'prebuilds', 'linux-arm64', 'proctree.glibc.node')]);
      // The fallback, not clone3: qemu-user has no clone3.
      expect(report.cloneCapability).toBe('clone');
      expect(['clone', 'clone+pidfd_open']).toContain(report.method);
      expect(report.exitCode).toBe(0);
      expect(report.cleanup?.reason).toBe('leftovers');
      expect(report.cleanup?.escaped).toBeGreaterThanOrEqual(1);
      expect(report.cleanup?.leftovers).toEqual([]);
      expect(report.survivors).toEqual([]);
      // From this (x86-64) process's own /proc scan too.
      expect(liveWith(t)).toEqual([]);
    },
    180_000,
  );
});
