// The package as users get it: `npm pack`, installed into a fresh project
// with --ignore-scripts and no compiler on PATH, must load the prebuilt
// binary from prebuilds/ (never a build/ of ours) and stop a real escape.
// And without a prebuild for the platform, `npm install` builds from source.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { liveWith, token } from './helpers';

const root = path.resolve(__dirname, '..');
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
  for (const t of tokens) for (const pid of liveWith(t)) process.kill(pid, 'SIGKILL');
  fs.rmSync(work, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('ships the prebuilds, the sources and the build files, and no build/', () => {
    const listing = execFileSync('tar', ['-tvzf', tarball], { encoding: 'utf8' }).split('\n');
    const names = listing.map((l) => l.split(/\s+/).pop() ?? '');
    expect(names).toContain('package/prebuilds/linux-x64/proctree.node');
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
      expect(report.loaded).toEqual([fs.realpathSync(path.join(installed, 'prebuilds', 'linux-x64', 'proctree.node'))]);
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

      const env = { ...process.env, ...nodedirEnv(), JOBS: String(os.cpus().length) };
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
