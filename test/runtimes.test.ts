// Every scenario of test/runtimes/scenarios/ (plain JS programs that check
// themselves and print one JSON line) under Node, Bun and Deno: each must
// pass, and leave nothing behind — no process carrying its token in /proc,
// and no proctree-<pid>- cgroup of its process (or of the harness it
// started) under the cgroup2 mount that holds this process's cgroup.
//
// Bun and Deno are pinned devDependencies (bun, deno: their platform
// binaries come as optional dependencies). A runtime that is not installed
// skips with the reason; CI sets PROCTREE_REQUIRE_RUNTIMES=1 so that it
// cannot.
import { spawn as cpSpawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import fs from 'node:fs';
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
function runScenario(command: string, args: string[], tag: string, limitMs: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = cpSpawn(command, args, {
      cwd: path.resolve(__dirname, '..'),
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PROCTREE_SCENARIO_TOKEN: tag, NO_COLOR: '1' },
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

describe.each(['node', 'bun', 'deno'])('%s', (name) => {
  const rt = runtime(name);
  if (rt.missing) {
    if (requireRuntimes) {
      it('is installed (PROCTREE_REQUIRE_RUNTIMES=1)', () => {
        throw new Error(`PROCTREE_REQUIRE_RUNTIMES=1, but ${rt.missing}`);
      });
    } else {
      it.skip(`not installed: ${rt.missing}`, () => {});
    }
    return;
  }

  it.each(scenarios)(
    '%s',
    async (file) => {
      // Digits: every sleep the scenario starts is `<seconds>.<tag><n>`.
      const tag = String(randomInt(100_000_000, 999_999_999));
      const needle = `.${tag}`;
      const out = await runScenario(rt.command, rt.args(path.join(scenarioDir, file)), tag, 100_000);
      const pids = [out.pid, ...(out.result?.harnessPid ? [out.result.harnessPid] : [])];
      try {
        const why = `${name} ${file}: exit ${out.code ?? out.signal}, ${out.result?.reason?.split('\n')[0] ?? `no result line; stderr: ${lastLines(out.stderr)}`}`;
        if (out.result?.ok !== true) console.error(`${name} ${file} (the whole reason is in its result line) stdout:\n${out.stdout.slice(-4000)}\nstderr:\n${out.stderr.slice(-4000)}`);
        expect(out.result?.ok, why).toBe(true);
        expect(out.code, why).toBe(0);
        expect(out.result?.runtime).toBe(name);
        expect(out.result?.checks).toBeGreaterThan(0);
        // Nothing left: the exit hook's cgroup.kill (or the guardian) is done
        // once every process is gone and every subtree removed.
        await waitUntil(() => liveWith(needle).length === 0 && pids.every((p) => subtreesOf(p).length === 0), 5000);
        expect(liveWith(needle)).toEqual([]);
        for (const p of pids) expect(subtreesOf(p)).toEqual([]);
      } finally {
        // Whatever a failed scenario left: its own processes (by its token)
        // and the subtrees its processes made (deepest first).
        killLiveWith(needle);
        for (const p of pids) {
          for (const dir of subtreesOf(p)) {
            for (const leaf of fs.readdirSync(dir, { withFileTypes: true })) if (leaf.isDirectory()) killCgroup(path.join(dir, leaf.name));
            killCgroup(dir);
          }
        }
      }
    },
    120_000,
  );
});
