#!/usr/bin/env node
// A real escape through an installed or staged copy of the package, for the
// packaging tests (test/pack.test.ts, test/arm64.test.ts) and by hand:
//
//   node smoke.js <package: name or directory> <token>
//   qemu-aarch64-static -L <sysroot> <sysroot>/usr/bin/node smoke.js <dir> <token>
//
// Run a copy placed outside this repository: from inside it, the name
// "proctree" resolves to the repository itself, not to the installed copy.
//
// The command double-forks a `sleep <token>` into a session of its own, waits
// until that sleep runs, and exits 0: killpg would miss the sleep, the call's
// cgroup must not. Prints one JSON line: which binary was loaded (from
// /proc/self/maps), which clone path spawned the command, the cleanup report,
// and any process still carrying the token. Plain CommonJS that Node 18 runs.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const [spec, token] = process.argv.slice(2);
if (!spec || !token) {
  console.error('usage: smoke.js <package name or directory> <token>');
  process.exit(2);
}

const pkgJson = require.resolve(`${spec}/package.json`, { paths: [process.cwd()] });
const pkgRoot = path.dirname(pkgJson);

// Record the native spawn result's `method` ('clone3', 'clone' or
// 'clone+pidfd_open'): the public API reports only capabilities().clone.
const methods = [];
try {
  const nativeModule = require(path.join(pkgRoot, 'dist', 'cjs', 'binding', 'index.js'));
  const real = nativeModule.binding;
  // A copy, not a Proxy: the addon's functions are read-only properties.
  const wrapped = {};
  for (const key of Object.getOwnPropertyNames(real)) {
    const value = real[key];
    wrapped[key] = typeof value === 'function' ? value.bind(real) : value;
  }
  wrapped.spawn = (...args) => {
    const res = real.spawn(...args);
    if (res && res.method) methods.push(res.method);
    return res;
  };
  nativeModule.binding = wrapped;
} catch {
  // Only the method report is lost.
}

const proctree = require(require.resolve(spec, { paths: [process.cwd()] }));

function liveWith(needle) {
  const found = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (cmdline.includes(needle) && state !== 'Z') found.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return found;
}

async function main() {
  // Wait for the sleep itself (comm), not for its token in a cmdline: the
  // forked bash still carries this whole script, token included, before setsid.
  const script = `setsid sleep ${token} & until [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ]; do sleep 0.01; done; exit 0`;
  const result = await proctree.run('bash', ['-c', script]);
  const loaded = fs
    .readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .map((line) => line.split(/\s+/).slice(5).join(' '))
    .filter((file) => file.endsWith('.node'));
  const report = {
    arch: process.arch,
    node: process.version,
    napi: process.versions.napi,
    packageRoot: pkgRoot,
    loaded: [...new Set(loaded)],
    cloneCapability: proctree.capabilities().clone,
    method: methods[0] ?? null,
    exitCode: result.exitCode,
    cgroup: result.cgroup,
    cleanup: result.cleanup,
    survivors: liveWith(token),
  };
  console.log(JSON.stringify(report));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
