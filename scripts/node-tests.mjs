#!/usr/bin/env node
// Node's own child_process tests, run with child_process.spawn replaced by
// proctree's spawn: the check that proctree drops in where Node's spawn was.
//
// The tests are not part of this repository. They are read from Debian's
// source package of Node 20 (the upstream tarball, pinned by version and
// SHA-256), downloaded with apt-get through the Debian mirror this machine's
// apt already uses, and cached under node_modules/.cache. When that cannot be
// done (no apt, no network), the runner says why and reports "unavailable".
//
//   node scripts/node-tests.mjs            run every selected test, print a table
//   node scripts/node-tests.mjs --json     the same as JSON (used by test/node-compat.test.ts)
//   node scripts/node-tests.mjs FILE...    only these tests (names as in test/parallel)
//
// PROCTREE_NODE_TESTS_TARBALL=<path> uses a local copy of the tarball instead.
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const pinned = {
  node: '20.19.2',
  sourcePackage: 'nodejs',
  // A Debian release that carries Node 20; its source lists are read into a
  // private apt directory, the machine's own apt configuration is untouched.
  suite: 'trixie',
  debianVersion: '20.19.2+dfsg-1+deb13u3',
  tarball: 'nodejs_20.19.2+dfsg.orig.tar.xz',
  sha256: '5e5559381ad031d245a8efa403458abbb73755f74c3e6380f185a4dd342b7949',
};

// The issue's list: spawn, kill, stdio, exit, cwd, env, flush-stdio,
// spawn-timeout, spawn-controller, spawn-error, spawn-typeerror, default-options.
const selection = /^test-child-process-(spawn|kill|stdio|exit|cwd|env|flush-stdio|default-options).*\.js$/;
// Others of Node's that start a child with spawn() (not through exec, fork or
// IPC, which proctree does not replace or offer).
const alsoSpawning = new Set([
  'test-child-process-bad-stdio.js',
  'test-child-process-can-write-to-stdout.js',
  'test-child-process-destroy.js',
  'test-child-process-detached.js',
  'test-child-process-double-pipe.js',
  'test-child-process-pipe-dataflow.js',
  'test-child-process-prototype-tampering.mjs',
  'test-child-process-reject-null-bytes.js',
  'test-child-process-set-blocking.js',
  'test-child-process-silent.js',
  'test-child-process-stdin.js',
  'test-child-process-stdout-flush-exit.js',
  'test-child-process-stdout-flush.js',
  'test-child-process-uid-gid.js',
]);
// spawnSync is Node's own, not replaced: those tests say nothing about proctree.
const notApplicable = /^test-child-process-spawnsync/;

const cacheDir = path.join(root, 'node_modules', '.cache', 'proctree-node-tests', pinned.node);
const testRoot = path.join(cacheDir, `node-v${pinned.node}`, 'test');

function sha256(file) {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

// The Debian archive this machine's apt already uses (never a host named here).
function debianMirror() {
  const out = execFileSync('apt-get', ['indextargets', '--format', '$(REPO_URI) $(RELEASE) $(TARGET_OF)'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  for (const line of out.split('\n')) {
    const [uri, release, kind] = line.trim().split(' ');
    if (kind === 'deb' && release && !release.includes('-') && !/security/.test(uri)) return uri;
  }
  throw new Error('no Debian archive in apt indextargets');
}

function download() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-node-tests-'));
  try {
    const mirror = debianMirror();
    fs.mkdirSync(path.join(tmp, 'lists', 'partial'), { recursive: true });
    fs.mkdirSync(path.join(tmp, 'cache', 'archives', 'partial'), { recursive: true });
    fs.writeFileSync(path.join(tmp, 'sources.list'), `deb-src ${mirror} ${pinned.suite} main\n`);
    const apt = [
      '-o', `Dir::Etc::SourceList=${path.join(tmp, 'sources.list')}`,
      '-o', 'Dir::Etc::SourceParts=/dev/null',
      '-o', `Dir::State::Lists=${path.join(tmp, 'lists')}`,
      '-o', `Dir::Cache=${path.join(tmp, 'cache')}`,
      '-o', 'Debug::NoLocking=1',
      '-qq',
    ];
    execFileSync('apt-get', [...apt, 'update'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 300_000 });
    const dl = path.join(tmp, 'dl');
    fs.mkdirSync(dl);
    // Only the upstream tarball matters; apt may fail on the Debian parts of
    // a revision that was superseded, so its exit status is not the verdict.
    for (const which of [`${pinned.sourcePackage}=${pinned.debianVersion}`, `${pinned.sourcePackage}/${pinned.suite}`]) {
      try {
        execFileSync('apt-get', [...apt, 'source', '--download-only', which], { cwd: dl, stdio: 'ignore', timeout: 300_000 });
      } catch {
        // judged by the file below
      }
      const file = path.join(dl, pinned.tarball);
      if (fs.existsSync(file)) {
        const got = sha256(file);
        if (got !== pinned.sha256) throw new Error(`${pinned.tarball}: sha256 ${got}, expected ${pinned.sha256}`);
        return extract(file);
      }
    }
    throw new Error(`apt-get source did not bring ${pinned.tarball}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function extract(tarball) {
  fs.mkdirSync(cacheDir, { recursive: true });
  const top = `node-v${pinned.node}`;
  execFileSync(
    'tar',
    ['-xJf', tarball, '-C', cacheDir, '--wildcards', `${top}/test/common/*`, `${top}/test/fixtures/*`, `${top}/test/parallel/test-child-process-*`],
    { stdio: 'inherit', timeout: 300_000 },
  );
  fs.writeFileSync(path.join(cacheDir, 'complete'), `${pinned.sha256}\n`);
}

/** Makes the pinned tests available; returns null, or why they are not. */
export function obtain() {
  if (fs.existsSync(path.join(cacheDir, 'complete'))) return null;
  try {
    const local = process.env.PROCTREE_NODE_TESTS_TARBALL;
    if (local) {
      const got = sha256(local);
      if (got !== pinned.sha256) throw new Error(`${local}: sha256 ${got}, expected ${pinned.sha256}`);
      extract(local);
    } else {
      download();
    }
    return null;
  } catch (err) {
    return `Node ${pinned.node}'s tests could not be obtained (${err.message.split('\n')[0]})`;
  }
}

export function selectedTests() {
  return fs
    .readdirSync(path.join(testRoot, 'parallel'))
    .filter((f) => selection.test(f) || alsoSpawning.has(f))
    .sort();
}

function flagsOf(file) {
  const m = /\/\/ Flags:\s+(--.*)/.exec(fs.readFileSync(file, 'utf8'));
  return m ? m[1].trim().split(/\s+/) : [];
}

/** Runs one of Node's test files with proctree's spawn in place of child_process.spawn. */
export function runOne(name, timeoutMs = 60_000) {
  const file = path.join(testRoot, 'parallel', name);
  if (notApplicable.test(name)) return Promise.resolve({ name, status: 'n/a', output: 'spawnSync is not replaced' });
  const shim = path.join(root, 'test', 'fixtures', 'node-compat-shim.cjs');
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(process.execPath, [...flagsOf(file), '--require', shim, file], {
      cwd: path.dirname(testRoot),
      env: { ...process.env, NODE_TEST_DIR: path.join(cacheDir, 'tmp'), NODE_SKIP_FLAG_CHECK: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const status = code === 0 ? 'pass' : 'fail';
      resolve({ name, status, code, signal, ms: Date.now() - started, output: output.slice(-4000) });
    });
  });
}

export async function runAll(names, parallel = 2) {
  fs.mkdirSync(path.join(cacheDir, 'tmp'), { recursive: true });
  const queue = [...names];
  const results = [];
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift()) results.push(await runOne(name));
    }),
  );
  return results.sort((a, b) => a.name.localeCompare(b.name));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const json = args.includes('--json');
  const why = obtain();
  if (why) {
    if (json) console.log(JSON.stringify({ unavailable: why }));
    else console.log(`skipped: ${why}`);
    process.exit(0);
  }
  const names = args.filter((a) => !a.startsWith('--'));
  const results = await runAll(names.length > 0 ? names : selectedTests());
  if (json) {
    console.log(JSON.stringify({ node: pinned.node, results }));
  } else {
    for (const r of results) {
      console.log(`${r.status.padEnd(4)} ${r.name}${r.status === 'fail' ? `\n${r.output.replace(/^/gm, '     | ')}` : ''}`);
    }
    const count = (s) => results.filter((r) => r.status === s).length;
    console.log(`${count('pass')} passed, ${count('fail')} failed, ${count('n/a')} not applicable (spawnSync)`);
  }
}
