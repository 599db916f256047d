// The package as users get it: `npm pack`, installed into a fresh project
// with --ignore-scripts and no compiler on PATH, must load the prebuilt
// binary from prebuilds/ (never a build/ of ours) and stop a real escape.
// Every prebuilt file in the tarball stays under the symbol-version ceiling
// (glibc 2.28, GLIBCXX_3.4.21: scripts/symbol-ceiling.js), the helpers are
// static, and the glibc-tagged addon is never picked on musl, where the
// install says what to add instead. Without a prebuild for the platform,
// `npm install` builds from source.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { killTokens, liveWith, token } from './helpers';

const root = path.resolve(__dirname, '..');
interface SymbolNeeds {
  file: string;
  static: boolean;
  needs: string[];
  tooNew: Array<{ version: string; symbols: string[] }>;
}
const { symbolNeeds, CEILING } = createRequire(__filename)('../scripts/symbol-ceiling.js') as {
  symbolNeeds(file: string): SymbolNeeds;
  CEILING: Record<string, string>;
};
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-pack-'));
// Run from outside this repository: inside it, require('proctree') would
// resolve to the repository itself (a package may require its own name).
const smoke = path.join(work, 'smoke.js');
fs.copyFileSync(path.join(root, 'scripts', 'smoke.js'), smoke);
const tokens: string[] = [];
let tarball = '';

// npm as the running node's own (under `npm test`, the npm that runs us).
function npmCli(): string {
  const candidates = [
    process.env.npm_execpath,
    path.resolve(process.execPath, '..', '..', 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js'),
  ];
  const found = candidates.find((p) => p && p.endsWith('.js') && fs.existsSync(p));
  if (!found) throw new Error('cannot find npm-cli.js');
  return found;
}

function which(cmd: string, dirs: string[]): string | null {
  for (const dir of dirs) {
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return null;
}

// A PATH of symlinks to exactly the programs the install and the escape
// command need: node for npm, and what the command runs. No compiler, no make.
function pathWithoutCompiler(): string {
  const bin = path.join(work, 'bin');
  if (fs.existsSync(bin)) return bin;
  fs.mkdirSync(bin, { recursive: true });
  const systemPath = (process.env.PATH ?? '').split(':');
  fs.symlinkSync(process.execPath, path.join(bin, 'node'));
  for (const cmd of ['sh', 'bash', 'env', 'setsid', 'sleep', 'grep', 'cat', 'ls', 'uname']) {
    const real = which(cmd, systemPath);
    if (real) fs.symlinkSync(real, path.join(bin, cmd));
  }
  return bin;
}

// Node's headers next to the running node, so node-gyp never downloads them.
function nodedirEnv(): Record<string, string> {
  if (process.env.npm_config_nodedir) return {};
  const prefix = path.resolve(process.execPath, '..', '..');
  return fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? { npm_config_nodedir: prefix } : {};
}

function npm(args: string[], cwd: string, env: NodeJS.ProcessEnv): void {
  const res = spawnSync(process.execPath, [npmCli(), ...args, '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd,
    env,
    encoding: 'utf8',
    timeout: 240_000,
  });
  if (res.status !== 0) {
    throw new Error(`npm ${args.join(' ')} failed (${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);
  }
}

function newProject(name: string): string {
  const dir = path.join(work, name);
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: `proctree-${name}`, private: true }));
  return dir;
}

interface SmokeReport {
  arch: string;
  loaded: string[];
  cloneCapability: string;
  method: string | null;
  exitCode: number | null;
  cleanup: { escaped: number; leftovers: unknown[]; reason: string } | null;
  survivors: number[];
}

function runSmoke(cwd: string, env: NodeJS.ProcessEnv): SmokeReport {
  const t = token(100);
  tokens.push(t);
  const res = spawnSync(process.execPath, [smoke, 'proctree', t], { cwd, env, encoding: 'utf8', timeout: 60_000 });
  const line = res.stdout.trim().split('\n').pop() ?? '';
  if (res.status !== 0 || !line.startsWith('{')) {
    throw new Error(`smoke failed (${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);
  }
  // Proved from /proc by this process too, not only by the smoke's own scan.
  expect(liveWith(t)).toEqual([]);
  return JSON.parse(line) as SmokeReport;
}

beforeAll(() => {
  // The tarball needs dist/ (npm test's pretest builds it) and the x64
  // prebuild (CI has built it already: a no-op then).
  if (!fs.existsSync(path.join(root, 'dist', 'cjs', 'index.js'))) {
    execFileSync(process.execPath, [path.join(root, 'scripts', 'build-ts.js')], { cwd: root, stdio: 'inherit' });
  }
  execFileSync(process.execPath, [path.join(root, 'scripts', 'prebuild.js'), '--arch', 'x64', '--if-missing'], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, ...nodedirEnv() },
  });
  const out = execFileSync(
    process.execPath,
    [npmCli(), 'pack', '--ignore-scripts', '--json', '--pack-destination', work, '--loglevel=error'],
    { cwd: root, encoding: 'utf8' },
  );
  const [info] = JSON.parse(out) as Array<{ filename: string; files: Array<{ path: string; mode: number }> }>;
  tarball = path.join(work, info.filename);
}, 600_000);

afterAll(() => {
  // Only what these tests started: processes carrying their tokens.
  killTokens(tokens);
  fs.rmSync(work, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('ships the prebuilds, the sources and the build files, and no build/', () => {
    const listing = execFileSync('tar', ['-tvzf', tarball], { encoding: 'utf8' }).split('\n');
    const names = listing.map((l) => l.split(/\s+/).pop() ?? '');
    expect(names).toContain('package/prebuilds/linux-x64/proctree.glibc.node');
    expect(names).toContain('package/prebuilds/linux-x64/proctree-helper');
    expect(names).toContain('package/scripts/install.js');
    expect(names).toContain('package/binding.gyp');
    expect(names).toContain('package/CMakeLists.txt');
    expect(names).toContain('package/native/binding.cc');
    expect(names).toContain('package/dist/cjs/index.js');
    expect(names.filter((n) => n.startsWith('package/build/'))).toEqual([]);
    expect(names.filter((n) => n.startsWith('package/test/'))).toEqual([]);
    // Helpers next to the addon keep their execute bit through the tarball.
    for (const line of listing.filter((l) => /package\/prebuilds\/linux-[^/]+\/[^.]+$/.test(l))) {
      expect(line.startsWith('-rwx'), line).toBe(true);
    }
  });

  it(`every prebuilt file needs at most ${Object.entries(CEILING)
    .map(([k, v]) => `${k}_${v}`)
    .join(', ')}; the helpers are static`, () => {
    const unpacked = path.join(work, 'ceiling');
    fs.mkdirSync(unpacked);
    execFileSync('tar', ['-xzf', tarball, '-C', unpacked]);
    const prebuilds = path.join(unpacked, 'package', 'prebuilds');
    const arches = fs.readdirSync(prebuilds).filter((d) => fs.statSync(path.join(prebuilds, d)).isDirectory());
    expect(arches).toContain('linux-x64');
    // CI builds both; a developer's machine may only have x64.
    if (process.env.PROCTREE_REQUIRE_ARM64 === '1') expect(arches).toContain('linux-arm64');
    const checked: string[] = [];
    for (const arch of arches) {
      const files = fs.readdirSync(path.join(prebuilds, arch));
      expect(files, arch).toContain('proctree.glibc.node');
      for (const f of files) {
        const needs = symbolNeeds(path.join(prebuilds, arch, f));
        expect(needs.tooNew, `${arch}/${f} needs ${needs.needs.join(' ')}`).toEqual([]);
        if (f.endsWith('.node')) {
          // Dynamic, with the glibc baseline every Node needs.
          expect(needs.static).toBe(false);
          expect(needs.needs.some((v) => v.startsWith('GLIBC_'))).toBe(true);
        } else {
          expect(needs.static, `${arch}/${f} is not statically linked`).toBe(true);
        }
        checked.push(`${arch}/${f}`);
      }
    }
    console.log(`symbol ceiling checked: ${checked.join(', ')}`);
  });

  it.skipIf(process.getuid?.() !== 0)('the prebuilt helper runs in an empty root: no libc at all, so on musl too', () => {
    const unpacked = path.join(work, 'empty-root');
    fs.mkdirSync(unpacked);
    execFileSync('tar', ['-xzf', tarball, '-C', unpacked, 'package/prebuilds/linux-x64/proctree-helper']);
    const empty = path.join(work, 'empty');
    fs.mkdirSync(empty);
    fs.copyFileSync(path.join(unpacked, 'package', 'prebuilds', 'linux-x64', 'proctree-helper'), path.join(empty, 'proctree-helper'));
    fs.chmodSync(path.join(empty, 'proctree-helper'), 0o755);
    // Nothing else in that root: no loader, no libc, no libstdc++. Without
    // arguments it prints its usage and exits 2.
    const res = spawnSync('chroot', [empty, '/proctree-helper'], { encoding: 'utf8' });
    expect(res.status, res.stderr).toBe(2);
    expect(res.stderr).toMatch(/usage: proctree-helper/);
  });

  it('node-gyp-build never picks the glibc prebuild on musl', () => {
    const unpacked = path.join(work, 'musl-pick');
    fs.mkdirSync(unpacked);
    execFileSync('tar', ['-xzf', tarball, '-C', unpacked]);
    const pkg = path.join(unpacked, 'package');
    const pick = (libc: string) =>
      spawnSync(process.execPath, ['-p', `require(${JSON.stringify(require.resolve('node-gyp-build'))}).path(${JSON.stringify(pkg)})`], {
        env: { ...process.env, LIBC: libc },
        encoding: 'utf8',
      });
    const glibc = pick('glibc');
    expect(glibc.stdout.trim()).toBe(path.join(pkg, 'prebuilds', 'linux-x64', 'proctree.glibc.node'));
    // node-gyp-build takes LIBC from the environment, else from /etc/alpine-release.
    const musl = pick('musl');
    expect(musl.status).not.toBe(0);
    expect(musl.stderr).toMatch(/No native build was found for .*libc=musl/);
  });

  it(
    'on musl without a compiler, npm install says what to add (apk add python3 make g++), not a relocation error',
    () => {
      const bin = pathWithoutCompiler();
      const app = newProject('musl-advice');
      // npm runs the package's install script; LIBC=musl is how node-gyp-build
      // (and scripts/install.js) are told the libc when it is not Alpine's.
      const res = spawnSync(
        process.execPath,
        [npmCli(), 'install', tarball, '--prefer-offline', '--no-audit', '--no-fund', '--foreground-scripts'],
        { cwd: app, env: { ...process.env, PATH: bin, LIBC: 'musl' }, encoding: 'utf8', timeout: 240_000 },
      );
      const out = `${res.stdout}\n${res.stderr}`;
      expect(res.status, out).not.toBe(0);
      expect(out).toContain('apk add python3 make g++');
      expect(out).toMatch(/musl libc, where a glibc binary cannot load/);
      expect(out).not.toMatch(/relocat|fcntl64|gyp ERR/);
    },
    300_000,
  );

  it(
    'installs with --ignore-scripts and no compiler, loads prebuilds/linux-x64, stops an escape',
    () => {
      const bin = pathWithoutCompiler();
      for (const cc of ['gcc', 'g++', 'cc', 'c++', 'make', 'clang']) expect(which(cc, [bin])).toBeNull();
      const env = { ...process.env, PATH: bin };
      const app = newProject('prebuilt');
      npm(['install', tarball, '--ignore-scripts', '--prefer-offline'], app, env);

      const installed = path.join(app, 'node_modules', 'proctree');
      expect(fs.existsSync(path.join(installed, 'build'))).toBe(false);
      for (const f of fs.readdirSync(path.join(installed, 'prebuilds', 'linux-x64'))) {
        if (!f.endsWith('.node')) fs.accessSync(path.join(installed, 'prebuilds', 'linux-x64', f), fs.constants.X_OK);
      }

      const report = runSmoke(app, env);
      expect(report.loaded).toEqual([fs.realpathSync(path.join(installed, 'prebuilds', 'linux-x64', 'proctree.glibc.node'))]);
      expect(report.exitCode).toBe(0);
      expect(report.survivors).toEqual([]);
      expect(report.cleanup?.reason).toBe('leftovers');
      expect(report.cleanup?.escaped).toBeGreaterThanOrEqual(1);
      expect(report.cleanup?.leftovers).toEqual([]);
    },
    300_000,
  );

  it(
    'builds from source with node-gyp on npm install when there is no prebuild for the platform',
    () => {
      // The same package without its x64 prebuild, as on a platform we do not ship.
      const unpacked = path.join(work, 'unpacked');
      fs.mkdirSync(unpacked);
      execFileSync('tar', ['-xzf', tarball, '-C', unpacked]);
      fs.rmSync(path.join(unpacked, 'package', 'prebuilds', 'linux-x64'), { recursive: true, force: true });
      const bare = path.join(work, 'proctree-no-prebuild.tgz');
      execFileSync('tar', ['-czf', bare, '-C', unpacked, 'package']);

      // As a user's machine has it: no -Werror (PROCTREE_WERROR is this
      // repository's own build's). -O1: what this checks is the install's
      // way to node-gyp and the addon it loads; the compiler's -O3 work, a
      // third of this test's minutes on a loaded machine, is the build every
      // other test runs.
      const env = { ...process.env, ...nodedirEnv(), JOBS: String(os.cpus().length), PROCTREE_WERROR: '', CXXFLAGS: '-O1' };
      const app = newProject('from-source');
      npm(['install', bare, '--prefer-offline'], app, env);

      const installed = path.join(app, 'node_modules', 'proctree');
      const built = path.join(installed, 'build', 'Release', 'proctree.node');
      expect(fs.existsSync(built)).toBe(true);
      const report = runSmoke(app, env);
      expect(report.loaded).toEqual([fs.realpathSync(built)]);
      expect(report.exitCode).toBe(0);
      expect(report.survivors).toEqual([]);
      expect(report.cleanup?.leftovers).toEqual([]);
    },
    600_000,
  );
});
