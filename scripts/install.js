#!/usr/bin/env node
// npm's install script. The prebuilt addon when one fits this host (platform,
// architecture and libc: the prebuilds are tagged glibc, and node-gyp-build
// never picks a glibc binary on musl), else a build from source with
// node-gyp, as node-gyp-build's own install script does. Where that build
// cannot even start (an Alpine or slim image without python3, make and a C++
// compiler), it says which packages to add and why, instead of failing
// halfway through node-gyp or loading a binary that cannot relocate. Off
// Linux it does nothing: the portable tier needs no addon.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');

function onPath(cmd) {
  return (process.env.PATH || '').split(':').some((dir) => {
    try {
      fs.accessSync(path.join(dir || '.', cmd), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

// As node-gyp-build decides (LIBC, /etc/alpine-release), and also any host
// whose Node reports no glibc at run time (a musl distribution that is not Alpine).
function libc() {
  if (process.env.LIBC === 'musl' || process.env.LIBC === 'glibc') return process.env.LIBC;
  if (fs.existsSync('/etc/alpine-release')) return 'musl';
  const header = process.report && typeof process.report.getReport === 'function' ? process.report.getReport().header : {};
  return header.glibcVersionRuntime ? 'glibc' : 'musl';
}

function buildFromSourceRequested() {
  return process.env.npm_config_build_from_source === 'true';
}

// The addon node-gyp-build would load, actually loaded: a prebuild that exists
// but cannot load here (a libc too old) falls through to the source build.
function loadableAddon() {
  const res = spawnSync(process.execPath, ['-e', `require('node-gyp-build')(${JSON.stringify(root)})`], {
    cwd: root,
    encoding: 'utf8',
  });
  const why = (res.stderr || '').split('\n').find((l) => /^\w*Error: /.test(l)) || '';
  return { ok: res.status === 0, why: why.replace(/^\w*Error: /, '') };
}

function missingTools() {
  const missing = [];
  if (!onPath('python3') && !onPath('python')) missing.push('python3');
  if (!onPath('make')) missing.push('make');
  if (!onPath('g++') && !onPath('c++') && !onPath('clang++')) missing.push('g++');
  return missing;
}

function advice(missing, lc) {
  const platform = `${process.platform}-${process.arch}`;
  const why =
    lc === 'musl'
      ? `the prebuilt binaries are for glibc (${platform}, glibc >= 2.28); this host uses musl libc, where a glibc binary cannot load, so the addon must be built here`
      : `no prebuilt binary loads on this host (${platform}), so the addon must be built here`;
  const install = fs.existsSync('/etc/alpine-release') || lc === 'musl'
    ? 'apk add python3 make g++'
    : fs.existsSync('/etc/debian_version')
      ? 'apt-get install python3 make g++'
      : fs.existsSync('/etc/redhat-release')
        ? 'dnf install python3 make gcc-c++'
        : 'install python3, make and a C++ compiler';
  return [
    `proctree: ${why}, and ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} missing for that.`,
    `proctree: run \`${install}\` (in a Dockerfile: before \`npm install\`), then install again.`,
  ].join('\n');
}

function main() {
  // Off Linux there is no addon: the library runs its portable tier on
  // child_process (README, "Off Linux"), which needs nothing built.
  if (process.platform !== 'linux') {
    console.log(`proctree: ${process.platform} is not Linux: no addon to build; calls run in the portable tier (see the README, "Off Linux")`);
    return 0;
  }
  if (!buildFromSourceRequested()) {
    const loaded = loadableAddon();
    if (loaded.ok) return 0;
    if (loaded.why) console.error(`proctree: ${loaded.why}`);
  }
  const missing = missingTools();
  if (missing.length > 0) {
    console.error(advice(missing, libc()));
    return 1;
  }
  // node-gyp as npm provides it to install scripts (on PATH), or our own.
  let nodeGyp = ['node-gyp'];
  try {
    nodeGyp = [process.execPath, require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] })];
  } catch {
    // npm puts its bundled node-gyp on PATH while it runs install scripts.
  }
  const res = spawnSync(nodeGyp[0], [...nodeGyp.slice(1), 'rebuild'], { cwd: root, stdio: 'inherit' });
  return res.status ?? 1;
}

process.exitCode = main();
