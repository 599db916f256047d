// What every scenario shares: the package under test, unique tokens to find
// the scenario's processes in /proc, the kernel's view (cgroup files, /proc),
// and the one JSON line a scenario prints. Plain JS that Node, Bun and Deno
// all run (test/helpers.ts is TypeScript, which Node 20 cannot import
// without a loader, so the few /proc and cgroup readers are here again).
//
// A scenario is `scenario(name, async (t) => { ... })`: `t.check(cond, what)`
// fails it with a reason; it prints {"scenario","runtime","ok":true,...} and
// exits 0, or {"ok":false,"reason"} and exits 1. It exits with
// process.exit(), so the package's exit hook runs in every runtime too; the
// vitest side (test/runtimes.test.ts) then checks that no process carrying
// the scenario's token and no proctree-<pid>- cgroup of it is left.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { current } from '../runtimes.mjs';

export const here = path.dirname(fileURLToPath(import.meta.url));
/** The package: PROCTREE_PACKAGE_ROOT, else this repository (its dist/ and build/ or prebuilds/). */
export const packageRoot = path.resolve(process.env.PROCTREE_PACKAGE_ROOT || path.join(here, '..', '..', '..'));
export const runtimeName = current();

/** require('proctree') from the package root, as a harness that depends on it would. */
export function load() {
  return createRequire(path.join(packageRoot, 'package.json'))(packageRoot);
}

// PROCTREE_SCENARIO_TOKEN: digits the vitest side chose, so that it finds
// every process of this scenario by `.<digits>` in its cmdline.
const tag = process.env.PROCTREE_SCENARIO_TOKEN || String(Math.floor(Math.random() * 1e9) + 1e9);
let count = 0;
/** A unique sleep duration such as `300.48129371`: it shows in /proc/<pid>/cmdline. */
export function token(seconds = 300) {
  count += 1;
  return `${seconds}.${tag}${count}`;
}
/** What every token of this scenario contains. */
export const needle = `.${tag}`;

/** Live (non-zombie) processes whose cmdline contains `text`; with `comm`, only those running that program. */
export function liveWith(text, comm) {
  const found = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmdline.includes(text)) continue;
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const state = stat[close + 2];
      const name = stat.slice(stat.indexOf('(') + 1, close);
      if (state !== 'Z' && (comm === undefined || name === comm)) found.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return found;
}

/** Whether pid runs now (not gone, not a zombie). */
export function running(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/** cgroup.procs of a cgroup and every cgroup below it ([] once it is gone). */
export function cgroupMembers(dir) {
  const out = [];
  const walk = (d) => {
    try {
      for (const line of fs.readFileSync(`${d}/cgroup.procs`, 'utf8').split('\n')) if (line) out.push(Number(line));
      for (const e of fs.readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(`${d}/${e.name}`);
    } catch {
      // removed while we looked
    }
  };
  walk(dir);
  return out;
}

/** The pid's cgroup2 path as /proc/<pid>/cgroup says ('0::/x'), or null. */
export function cgroupOf(pid) {
  try {
    const line = fs
      .readFileSync(`/proc/${pid}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('0::'));
    return line ? line.slice(3) : null;
  } catch {
    return null;
  }
}

/** A call's leaf after 'close': removed, or empty, thawed and with nothing below (kept for the next call). */
export function leafReleased(dir) {
  if (!dir || !fs.existsSync(dir)) return true;
  try {
    const events = fs.readFileSync(`${dir}/cgroup.events`, 'utf8');
    const below = fs.readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory());
    return /^populated 0$/m.test(events) && /^frozen 0$/m.test(events) && below.length === 0;
  } catch {
    return !fs.existsSync(dir);
  }
}

/** Polls `check` every 20 ms until it holds or `ms` pass; what it returned last. */
export async function waitFor(check, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits for at least `n` live processes carrying `text` (running `comm`). */
export async function waitForLive(text, n, comm, ms = 10000) {
  let pids = [];
  await waitFor(() => (pids = liveWith(text, comm)).length >= n, ms);
  return pids;
}

class ScenarioFailure extends Error {}

/**
 * Runs `body(t)` and exits: 0 with {"ok":true} when every check held, 1 with
 * the first failed check's reason (or the error thrown). Bounded: a scenario
 * that hangs fails after `limitMs`.
 */
export function scenario(name, body, limitMs = 90000) {
  const checks = [];
  const extra = {};
  const t = {
    check(cond, what, detail) {
      if (!cond) throw new ScenarioFailure(detail === undefined ? what : `${what}: ${JSON.stringify(detail)}`);
      checks.push(what);
    },
    /** Adds a field to the result line. */
    note(key, value) {
      extra[key] = value;
    },
  };
  const finish = (ok, reason) => {
    const line = { scenario: name, runtime: runtimeName, version: process.versions[runtimeName], pid: process.pid, ok, checks: checks.length, ...extra };
    if (!ok) line.reason = reason;
    fs.writeSync(1, `${JSON.stringify(line)}\n`);
    process.exit(ok ? 0 : 1);
  };
  const limit = setTimeout(() => finish(false, `timed out after ${limitMs} ms; last check passed: ${checks.at(-1) ?? 'none'}`), limitMs);
  // A throw outside the body's promise chain (a stream's callback) still ends in a result line.
  const uncaught = (err) => finish(false, `uncaught after "${checks.at(-1) ?? 'none'}": ${err && err.stack ? err.stack : err}`);
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
  Promise.resolve()
    .then(() => body(t))
    .then(
      () => {
        clearTimeout(limit);
        finish(true);
      },
      (err) => {
        clearTimeout(limit);
        finish(false, err instanceof ScenarioFailure ? err.message : `${err && err.stack ? err.stack : err}`);
      },
    );
}
