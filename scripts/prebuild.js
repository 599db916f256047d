#!/usr/bin/env node
// Builds the prebuilt binaries that ship in the package: prebuilds/linux-x64/
// and prebuilds/linux-arm64/, each with the N-API addon (found by
// node-gyp-build) and the helper executables binding.gyp defines (found next
// to the addon). Built with prebuildify (--napi --strip), one N-API build per
// architecture for every Node version; arm64 is cross-compiled with Debian's
// g++-aarch64-linux-gnu, installed with apt-get when missing and we are root.
//
// They must load wherever Node's official builds run (glibc 2.28, the
// libstdc++ of GCC 5), not only on the machine that built them:
//   * the addon is tagged glibc (proctree.glibc.node, prebuildify --tag-libc):
//     node-gyp-build never picks it on musl, where it could not relocate;
//   * the helpers are linked statically (PROCTREE_STATIC_HELPER=1 in
//     binding.gyp): no glibc version to need, and they run on musl too;
//   * every file is checked against the symbol-version ceiling
//     (scripts/symbol-ceiling.js): the build fails above GLIBC_2.28,
//     GLIBCXX_3.4.21 or CXXABI_1.3.9, naming the symbols.
//
//   npm run prebuild                        both architectures
//   node scripts/prebuild.js                 the same
//   node scripts/prebuild.js --arch x64      one
//   node scripts/prebuild.js --if-missing    skip an architecture whose
//                                            prebuild is newer than its sources
//
// Each architecture builds in its own copy of the sources under .cache/ so
// that the developer's build/ (which node-gyp-build prefers) is never touched.
//
// npm runs a script named pre<name> before <name>: that is why the package
// has no "build" script (it is "compile"), or `npm run build` would run all
// of this, cross compiler included, first.
'use strict';
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { assertSymbolCeiling, symbolNeeds } = require('./symbol-ceiling');

const root = path.resolve(__dirname, '..');
/** The addon's file name in each prebuild folder (prebuildify's name and libc tags). */
const ADDON_FILE = 'proctree.glibc.node';
const TRIPLES = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' };
const DEBIAN_CROSS_PACKAGES = { x64: 'g++-x86-64-linux-gnu', arm64: 'g++-aarch64-linux-gnu' };
const ELF_MACHINES = { x64: 0x3e, arm64: 0xb7 };

function parseArgs(argv) {
  const opts = { arches: [], ifMissing: false };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--arch') opts.arches.push(argv[++i]);
    else if (argv[i].startsWith('--arch=')) opts.arches.push(argv[i].slice(7));
    else if (argv[i] === '--if-missing') opts.ifMissing = true;
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (opts.arches.length === 0) opts.arches = ['x64', 'arm64'];
  for (const a of opts.arches) if (!TRIPLES[a]) throw new Error(`unsupported arch ${a} (x64 or arm64)`);
  return opts;
}

function onPath(cmd) {
  return (process.env.PATH || '').split(':').some((dir) => {
    try {
      fs.accessSync(path.join(dir, cmd), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

function run(cmd, args, options = {}) {
  console.log(`> ${cmd} ${args.join(' ')}`);
  execFileSync(cmd, args, { stdio: 'inherit', ...options });
}

// The cross compiler for arch, installing Debian's package when we may.
function crossToolchain(arch) {
  const triple = TRIPLES[arch];
  const cxx = `${triple}-g++`;
  if (!onPath(cxx)) {
    const pkg = DEBIAN_CROSS_PACKAGES[arch];
    const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
    if (!isRoot || !onPath('apt-get')) {
      throw new Error(`${cxx} is not installed; install ${pkg} (Debian/Ubuntu) to build the ${arch} prebuild`);
    }
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const install = ['install', '-y', '--no-install-recommends', pkg];
    if (spawnSync('apt-get', install, { stdio: 'inherit', env }).status !== 0) {
      // A fresh machine has no package lists yet.
      run('apt-get', ['update'], { env });
      run('apt-get', install, { env });
    }
  }
  return {
    env: { CC: `${triple}-gcc`, CXX: cxx, LINK: cxx, AR: `${triple}-ar` },
    strip: `${triple}-strip`,
  };
}

// Node's own headers next to the running node (official tarballs and
// distribution packages both ship include/node), so node-gyp needs no download.
function nodedirEnv() {
  if (process.env.npm_config_nodedir) return {};
  const prefix = path.resolve(process.execPath, '..', '..');
  if (fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h'))) return { npm_config_nodedir: prefix };
  return {};
}

function readGypTargets() {
  const text = fs
    .readFileSync(path.join(root, 'binding.gyp'), 'utf8')
    .split('\n')
    .filter((line) => !/^\s*#/.test(line))
    .join('\n');
  return new Function(`return (${text});`)().targets;
}

function newestSource() {
  let newest = fs.statSync(path.join(root, 'binding.gyp')).mtimeMs;
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else newest = Math.max(newest, fs.statSync(p).mtimeMs);
    }
  };
  walk(path.join(root, 'native'));
  return newest;
}

function elfMachine(file) {
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.alloc(20);
  fs.readSync(fd, buf, 0, 20, 0);
  fs.closeSync(fd);
  return buf.toString('latin1', 1, 4) === 'ELF' ? buf.readUInt16LE(18) : -1;
}

function prebuild(arch, executables) {
  const outDir = path.join(root, 'prebuilds', `linux-${arch}`);
  const stage = path.join(root, '.cache', 'prebuild', arch);
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.rmSync(stage, { recursive: true, force: true });
  fs.mkdirSync(stage, { recursive: true });
  for (const f of ['binding.gyp', 'package.json']) fs.copyFileSync(path.join(root, f), path.join(stage, f));
  fs.cpSync(path.join(root, 'native'), path.join(stage, 'native'), { recursive: true });
  // binding.gyp finds node-addon-api through require() from its directory.
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(stage, 'node_modules'));

  const cross = arch === os.arch() ? null : crossToolchain(arch);
  const env = {
    ...process.env,
    ...nodedirEnv(),
    ...(cross ? cross.env : {}),
    PROCTREE_STATIC_HELPER: '1',
    JOBS: process.env.JOBS || String(os.cpus().length),
  };
  const prebuildify = require.resolve('prebuildify/bin.js', { paths: [root] });
  const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] });
  const args = [
    prebuildify,
    '--napi',
    '--strip',
    '--tag-libc',
    `--arch=${arch}`,
    '--platform=linux',
    `--target=node@${process.versions.node}`,
    `--out=${root}`,
    `--cwd=${stage}`,
    `--node-gyp=${nodeGyp}`,
  ];
  if (cross) args.push(`--strip-bin=${cross.strip}`);
  run(process.execPath, args, { cwd: stage, env });

  // prebuildify moves only the .node file; the helpers ship beside it.
  for (const name of executables) {
    const built = path.join(stage, 'build', 'Release', name);
    const dest = path.join(outDir, name);
    fs.copyFileSync(built, dest);
    fs.chmodSync(dest, 0o755);
    run(cross ? cross.strip : 'strip', ['--strip-all', dest]);
  }

  for (const f of fs.readdirSync(outDir)) {
    const p = path.join(outDir, f);
    // node-gyp hard-links build/Release/proctree.node to its object copy:
    // give the prebuild an inode of its own before the stage is reused.
    if (fs.statSync(p).nlink > 1) {
      fs.copyFileSync(p, `${p}.tmp`);
      fs.chmodSync(`${p}.tmp`, 0o755);
      fs.renameSync(`${p}.tmp`, p);
    }
    if (elfMachine(p) !== ELF_MACHINES[arch]) throw new Error(`${p} is not an ${arch} ELF file`);
    const needs = symbolNeeds(p);
    console.log(`  prebuilds/linux-${arch}/${f}  ${fs.statSync(p).size} bytes, ${needs.static ? 'static' : `needs ${needs.needs.join(' ')}`}`);
  }
  if (!fs.existsSync(path.join(outDir, ADDON_FILE))) throw new Error(`prebuildify did not write ${ADDON_FILE}`);
  for (const name of executables) {
    if (!symbolNeeds(path.join(outDir, name)).static) throw new Error(`prebuilds/linux-${arch}/${name} is not static`);
  }
  assertSymbolCeiling(fs.readdirSync(outDir).map((f) => path.join(outDir, f)));
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const targets = readGypTargets();
  const addon = targets.find((t) => t.target_name === 'proctree');
  if (!addon) throw new Error('binding.gyp has no "proctree" target');
  const executables = targets.filter((t) => t.type === 'executable').map((t) => t.target_name);
  for (const arch of opts.arches) {
    const addonFile = path.join(root, 'prebuilds', `linux-${arch}`, ADDON_FILE);
    const complete = [addonFile, ...executables.map((e) => path.join(path.dirname(addonFile), e))];
    if (opts.ifMissing && complete.every((f) => fs.existsSync(f) && fs.statSync(f).mtimeMs >= newestSource())) {
      console.log(`prebuilds/linux-${arch} is up to date`);
      continue;
    }
    prebuild(arch, executables);
  }
}

// One prebuild at a time per checkout: test files that need the prebuild run
// in parallel and each may ask for it (--if-missing); they share the stage
// folders under .cache/. Re-run under flock(1) when it is there.
function underLock() {
  if (process.env.PROCTREE_PREBUILD_LOCKED === '1' || !onPath('flock')) return null;
  fs.mkdirSync(path.join(root, '.cache'), { recursive: true });
  const res = spawnSync('flock', [path.join(root, '.cache', 'prebuild.lock'), process.execPath, __filename, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, PROCTREE_PREBUILD_LOCKED: '1' },
  });
  return res.status ?? 1;
}

try {
  const status = underLock();
  if (status !== null) process.exit(status);
  main();
} catch (err) {
  console.error(`prebuild: ${err.message}`);
  process.exit(1);
}
