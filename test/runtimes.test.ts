// Every scenario of test/runtimes/scenarios/ (plain JS programs that check
// themselves and print one JSON line) under Node, Bun and Deno: each must
// pass, and leave nothing behind — no process carrying its token in /proc,
// and no proctree-<pid>- cgroup of its process (or of the harness it
// started) under the cgroup2 mount that holds this process's cgroup.
//
// Bun and Deno are pinned devDependencies (bun, deno: their platform
// binaries come as optional dependencies). A runtime that is not installed
// skips with the reason; CI sets PROCTREE_REQUIRE_RUNTIMES=1 so that it
// cannot. PROCTREE_PACKAGE_ROOT runs everything against another build of
// the package (a checkout with its dist/ and build/) instead of this one.
import { execFileSync, spawn as cpSpawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { killCgroup, killLiveWith, liveWith, waitUntil } from './helpers';
import { runtime } from './runtimes/runtimes.mjs';

const requireRuntimes = process.env.PROCTREE_REQUIRE_RUNTIMES === '1';
const scenarioDir = path.join(__dirname, 'runtimes', 'scenarios');
/** Files starting with '_' are the scenarios' library and fixtures. */
export const scenarios = fs
  .readdirSync(scenarioDir)
  .filter((f) => /^[a-z][\w-]*\.mjs$/.test(f))
  .sort();

/** The cgroup2 mount holding this process's cgroup, from /proc/self/mountinfo and /proc/self/cgroup. */
function cgroupMount(): string {
  const own = fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'))
    ?.slice(3);
  if (own === undefined) throw new Error('no cgroup2 line in /proc/self/cgroup');
  const mounts = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' '))
    .filter((f) => f.length > 4 && f[f.indexOf('-') + 1] === 'cgroup2')
    .map((f) => ({ root: f[3], mount: f[4] }))
    .filter((m) => own === m.root || own.startsWith(m.root === '/' ? '/' : `${m.root}/`))
    .sort((a, b) => b.root.length - a.root.length);
  if (mounts.length === 0) throw new Error(`no cgroup2 mount holds ${own}`);
  return mounts[0].mount;
}

/** Every cgroup below the mount whose name starts with proctree-<pid>- (a subtree of that process). */
function subtreesOf(pid: number): string[] {
  const found: string[] = [];
  const walk = (dir: string, depth: number): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return; // removed while we looked
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      if (e.name.startsWith(`proctree-${pid}-`)) found.push(path.join(dir, e.name));
      else if (depth < 8) walk(path.join(dir, e.name), depth + 1);
    }
  };
  walk(cgroupMount(), 0);
  return found;
}

interface ScenarioResult {
  scenario: string;
  runtime: string;
  version: string;
  pid: number;
  ok: boolean;
  checks: number;
  reason?: string;
  harnessPid?: number;
}

interface Outcome {
  result: ScenarioResult | null;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  pid: number;
}

/**
 * The last lines of a runtime's stderr, one line, without colors, for an
 * assertion message (whole lines of paths read like stack frames to vitest).
 */
function lastLines(text: string): string {
  return text
    .replace(/\x1b\[[0-9;]*m/g, '')
    .trim()
    .split('\n')
    .filter((l) => /error|panic|Error|undefined symbol/.test(l))
    .slice(-3)
    .map((l) => l.replace(/\s+/g, ' ').slice(0, 300))
    .join(' | ');
}

/** Runs one scenario file; SIGKILLs it (by pid) after `limitMs`. */
function runScenario(
  command: string,
  args: string[],
  tag: string,
  limitMs: number,
  env: NodeJS.ProcessEnv = {},
  cwd = path.resolve(__dirname, '..'),
): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = cpSpawn(command, args, {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PROCTREE_SCENARIO_TOKEN: tag, NO_COLOR: '1', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const limit = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(limit);
      const line = stdout
        .trim()
        .split('\n')
        .reverse()
        .find((l) => l.startsWith('{"scenario"'));
      resolve({ result: line ? (JSON.parse(line) as ScenarioResult) : null, code, signal, stdout, stderr, pid: child.pid as number });
    });
  });
}

// Under Node, Node's own event loop watches the addon's reactor (a libuv poll
// handle found at run time); Bun, Deno and PROCTREE_LOOP=thread use the
// addon's waiter thread. Node runs the scenarios both ways.
const variants: { label: string; name: string; env: NodeJS.ProcessEnv }[] = [
  { label: 'node', name: 'node', env: {} },
  { label: 'node, PROCTREE_LOOP=thread', name: 'node', env: { PROCTREE_LOOP: 'thread' } },
  { label: 'bun', name: 'bun', env: {} },
  { label: 'deno', name: 'deno', env: {} },
];

/**
 * Runs scenario `file` with `command` (under `label`'s `env`) and checks it
 * passed in runtime `name` (at `version`, when given) and left nothing.
 */
async function runAndCheck(
  label: string,
  name: string,
  command: string,
  args: (script: string) => string[],
  env: NodeJS.ProcessEnv,
  file: string,
  version?: string,
): Promise<void> {
  // Digits: every sleep the scenario starts is `<seconds>.<tag><n>`.
  const tag = String(randomInt(100_000_000, 999_999_999));
  const needle = `.${tag}`;
  const out = await runScenario(command, args(path.join(scenarioDir, file)), tag, 100_000, env);
  const pids = [out.pid, ...(out.result?.harnessPid ? [out.result.harnessPid] : [])];
  try {
    const why = `${label} ${file}: exit ${out.code ?? out.signal}, ${out.result?.reason?.split('\n')[0] ?? `no result line; stderr: ${lastLines(out.stderr)}`}`;
    if (out.result?.ok !== true) console.error(`${label} ${file} (the whole reason is in its result line) stdout:\n${out.stdout.slice(-4000)}\nstderr:\n${out.stderr.slice(-4000)}`);
    expect(out.result?.ok, why).toBe(true);
    expect(out.code, why).toBe(0);
    expect(out.result?.runtime).toBe(name);
    if (version !== undefined) expect(out.result?.version).toBe(version);
    expect(out.result?.checks).toBeGreaterThan(0);
    // Nothing left: the exit hook's cgroup.kill (or the guardian) is done
    // once every process is gone, every subtree removed, and the
    // guardian of each harness process has exited.
    const guardians = (): number[] => pids.flatMap((p) => liveWith(`proctree-${p}-`, 'proctree-guard'));
    await waitUntil(() => liveWith(needle).length === 0 && guardians().length === 0 && pids.every((p) => subtreesOf(p).length === 0), 5000);
    expect(liveWith(needle)).toEqual([]);
    expect(guardians()).toEqual([]);
    for (const p of pids) expect(subtreesOf(p)).toEqual([]);
  } finally {
    // Whatever a failed scenario left: its own processes (by its token)
    // and the subtrees its processes made (deepest first).
    killLiveWith(needle);
    for (const p of pids) {
      for (const dir of subtreesOf(p)) {
        try {
          for (const leaf of fs.readdirSync(dir, { withFileTypes: true })) if (leaf.isDirectory()) killCgroup(path.join(dir, leaf.name));
        } catch {
          // removed meanwhile
        }
        killCgroup(dir);
      }
    }
  }
}

describe.each(variants)('$label', ({ label, name, env }) => {
  const rt = runtime(name);
  if (rt.missing !== undefined) {
    if (requireRuntimes) {
      it('is installed (PROCTREE_REQUIRE_RUNTIMES=1)', () => {
        throw new Error(`PROCTREE_REQUIRE_RUNTIMES=1, but ${rt.missing}`);
      });
    } else {
      it.skip(`not installed: ${rt.missing}`, () => {});
    }
    return;
  }
  const { command, args } = rt;

  it.each(scenarios)('%s', (file) => runAndCheck(label, name, command, args, env, file), 120_000);

  it("import { run } from 'proctree' (the ESM entry) in a project whose node_modules/proctree links to the package", async () => {
    // As npm link, a workspace or a file: dependency make it: the package
    // outside any node_modules. Deno then takes its .js files for ES
    // modules unless its package.json says "type": "commonjs".
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-esm-'));
    try {
      fs.mkdirSync(path.join(dir, 'node_modules'));
      fs.symlinkSync(path.resolve(process.env.PROCTREE_PACKAGE_ROOT || path.join(__dirname, '..')), path.join(dir, 'node_modules', 'proctree'));
      fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true, type: 'module', dependencies: { proctree: '*' } }));
      fs.writeFileSync(
        path.join(dir, 'harness.js'),
        `import { run } from 'proctree';
         const r = await run('sh', ['-c', 'echo out; exit 3']);
         console.log(JSON.stringify({ scenario: 'esm', stdout: r.stdout, exitCode: r.exitCode }));`,
      );
      const out = await runScenario(command, args(path.join(dir, 'harness.js')), 'esm', 60_000, env, dir);
      const line = out.stdout.trim().split('\n').reverse().find((l) => l.startsWith('{"scenario"'));
      expect(line, `exit ${out.code ?? out.signal}: ${lastLines(out.stderr)}`).toBeDefined();
      expect(JSON.parse(line as string)).toEqual({ scenario: 'esm', stdout: 'out\n', exitCode: 3 });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('runs its turns where it should: Node\'s own loop under Node, the addon\'s waiter thread elsewhere', async () => {
    // The addon's threads carry their names (proctree-wait, proctree-spawn...):
    // a spawn into a leaf nobody froze needs no thread of its own.
    const script = path.join(os.tmpdir(), `proctree-loop-${process.pid}-${randomInt(1e9)}.cjs`);
    fs.writeFileSync(
      script,
      `const pt = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       const fs = require('fs');
       pt.run('sh', ['-c', 'echo out']).then((r) => {
         // A short-lived thread (proctree-fds grows the descriptor table) may end between the listing and its read.
         const names = fs.readdirSync('/proc/self/task').map((t) => { try { return fs.readFileSync('/proc/self/task/' + t + '/comm', 'utf8').trim(); } catch { return ''; } });
         console.log('{"scenario":"loop","stdout":' + JSON.stringify(r.stdout) + ',"threads":' + JSON.stringify(names) + '}');
       });`,
    );
    try {
      const out = await runScenario(command, args(script), 'loop', 60_000, env);
      const line = JSON.parse(out.stdout.trim().split('\n').reverse().find((l) => l.startsWith('{"scenario"')) ?? 'null') as { stdout: string; threads: string[] } | null;
      expect(line, lastLines(out.stderr)).not.toBeNull();
      expect(line?.stdout).toBe('out\n');
      const nodeLoop = name === 'node' && env.PROCTREE_LOOP !== 'thread';
      expect(line?.threads.includes('proctree-wait')).toBe(!nodeLoop);
    } finally {
      fs.rmSync(script, { force: true });
    }
  }, 90_000);
});

// Node's other release lines (scripts/other-nodes.sh puts official builds
// under PROCTREE_OTHER_NODES as <version>/bin/node): package.json promises
// node >= 18, and the addon finds libuv in the running node at run time.
// Each line runs the scenarios but the two longest (escape and timeout:
// the addon's own ladder, the same in every line), under Node's own loop.
const otherNodesDir = process.env.PROCTREE_OTHER_NODES ?? '';
const otherNodes = otherNodesDir
  ? fs
      .readdirSync(otherNodesDir)
      .filter((v) => /^\d+\.\d+\.\d+$/.test(v) && fs.existsSync(path.join(otherNodesDir, v, 'bin', 'node')))
      .sort((a, b) => Number(a.split('.')[0]) - Number(b.split('.')[0]))
  : [];
const longest = new Set(['escape.mjs', 'timeout.mjs']);

describe('other Node release lines', () => {
  if (otherNodes.length === 0) {
    const why = `no Node builds under PROCTREE_OTHER_NODES (${otherNodesDir || 'unset'}): bash scripts/other-nodes.sh fetches them`;
    if (requireRuntimes) {
      it('are there (PROCTREE_REQUIRE_RUNTIMES=1)', () => {
        throw new Error(why);
      });
    } else {
      it.skip(why, () => {});
    }
    return;
  }
  describe.each(otherNodes)('node %s', (version) => {
    const command = path.join(otherNodesDir, version, 'bin', 'node');
    it.each(scenarios.filter((f) => !longest.has(f)))(
      '%s',
      (file) => runAndCheck(`node ${version}`, 'node', command, (script) => [script], {}, file, version),
      120_000,
    );
  });
});

/** Whether `cmd` is on PATH. */
function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '').split(':').some((d) => d && fs.existsSync(path.join(d, cmd)));
}

// A harness compiled into one executable by `bun build --compile`: the addon
// is embedded through the loader's literal require, the helper as one more
// entry point; at run time the helper is copied out to a private directory
// (lib/binding/index.ts). Run with the repository's build/, prebuilds/, dist/ and
// node_modules/ hidden (tmpfs over each, in a mount namespace of its own)
// when root can, so that only what is inside the executable can be used.
describe('bun build --compile', () => {
  const bun = runtime('bun');
  // The package compiled in: this repository, or PROCTREE_PACKAGE_ROOT as for the scenarios.
  const root = path.resolve(process.env.PROCTREE_PACKAGE_ROOT || path.join(__dirname, '..'));
  if (bun.missing !== undefined) {
    if (requireRuntimes) {
      it('bun is installed (PROCTREE_REQUIRE_RUNTIMES=1)', () => {
        throw new Error(`PROCTREE_REQUIRE_RUNTIMES=1, but ${bun.missing}`);
      });
    } else {
      it.skip(`bun not installed: ${bun.missing}`, () => {});
    }
    return;
  }
  const bunCommand = bun.command;

  it('a single-file harness runs a call, its guardian runs the embedded helper, and the tree is gone', async () => {
    const helper = [path.join(root, 'build', 'Release', 'proctree-helper'), path.join(root, 'prebuilds', `linux-${process.arch}`, 'proctree-helper')].find(
      (f) => fs.existsSync(f),
    );
    expect(helper, 'no proctree-helper built (npm run compile)').toBeDefined();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-bun-compile-'));
    const tag = String(randomInt(100_000_000, 999_999_999));
    try {
      fs.mkdirSync(path.join(dir, 'node_modules'));
      fs.symlinkSync(root, path.join(dir, 'node_modules', 'proctree'));
      fs.copyFileSync(path.join(__dirname, 'runtimes', 'compile', 'harness.ts'), path.join(dir, 'harness.ts'));
      const exe = path.join(dir, 'harness');
      execFileSync(bunCommand, ['build', '--compile', 'harness.ts', helper as string, '--asset-naming=[name].[ext]', '--outfile', exe], {
        cwd: dir,
        stdio: 'pipe',
        timeout: 240_000,
        env: { ...process.env, NO_COLOR: '1' },
      });
      fs.rmSync(path.join(dir, 'node_modules'), { recursive: true });
      fs.rmSync(path.join(dir, 'harness.ts'));
      const hide = process.getuid?.() === 0 && onPath('unshare');
      const hidden = ['build', 'prebuilds', 'dist', 'node_modules'].map((d) => path.join(root, d)).filter((d) => fs.existsSync(d));
      const pids: number[] = [];
      /** Runs the executable (in a mount namespace with the repository's files hidden, when root can): its JSON line. */
      const runExe = async (T: string, env: NodeJS.ProcessEnv = {}): Promise<Record<string, unknown>> => {
        const script = `for d in "$@"; do mount -t tmpfs -o size=1m proctree-hidden "$d" || exit 99; done; exec ${JSON.stringify(exe)} ${T}`;
        const [command, args] = hide ? ['unshare', ['--mount', '--', 'sh', '-c', script, 'sh', ...hidden]] : [exe, [T]];
        const out = await runScenario(command, args as string[], tag, 100_000, env);
        const line = out.stdout.trim().split('\n').find((l) => l.startsWith('{"pid"'));
        if (!line) console.error(`compiled harness stdout:\n${out.stdout.slice(-4000)}\nstderr:\n${out.stderr.slice(-4000)}`);
        expect(line, `exit ${out.code ?? out.signal}: ${lastLines(out.stderr)}`).toBeDefined();
        const r = JSON.parse(line as string) as Record<string, unknown>;
        pids.push(r.pid as number);
        expect(r).toMatchObject({ stdout: 'ok\n', exitCode: 0, reason: 'leftovers', leftovers: 0, verified: 'cgroup.events', tier: 'cgroup', helperProbe: true });
        const pid = r.pid as number;
        const guardians = (): number[] => liveWith(`proctree-${pid}-`, 'proctree-guard');
        await waitUntil(() => liveWith(T).length === 0 && guardians().length === 0 && subtreesOf(pid).length === 0, 5000);
        expect(liveWith(T)).toEqual([]);
        expect(guardians()).toEqual([]);
        expect(subtreesOf(pid)).toEqual([]);
        return r;
      };
      try {
        // The guardian runs the helper copied out of the executable, not the repository's.
        const first = await runExe(`300.${tag}1`);
        expect(first.guardianExe).toMatch(/\/proctree-\d+\/[0-9a-f]{16}\/proctree-helper$/);
        // A shared directory that others can write is never used: a private
        // copy of the process runs instead, removed when it exits.
        const tmp = path.join(dir, 'tmp');
        const uid = process.getuid?.() ?? 0;
        fs.mkdirSync(path.join(tmp, `proctree-${uid}`), { recursive: true });
        fs.chmodSync(path.join(tmp, `proctree-${uid}`), 0o777);
        const second = await runExe(`300.${tag}2`, { TMPDIR: tmp });
        expect(second.guardianExe).toMatch(new RegExp(`^${tmp}/proctree-helper-\\w+/proctree-helper$`));
        expect(fs.readdirSync(path.join(tmp, `proctree-${uid}`))).toEqual([]);
        expect(fs.existsSync(path.dirname(second.guardianExe as string))).toBe(false);
      } finally {
        for (const p of pids) for (const d of subtreesOf(p)) killCgroup(d);
      }
    } finally {
      killLiveWith(`.${tag}`);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
