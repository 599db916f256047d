// What spawning off the JS thread (a vfork on the addon's spawner threads)
// guarantees the harness, through the public API, the real addon and the
// real kernel. Each scenario runs in a harness of its own (a child node
// process, the library loaded from PROCTREE_SAFETY_LIB or this checkout's
// dist/), so whatever could kill or wedge a harness never hits the test
// runner; outcomes are proved from cgroup membership and /proc.
//   * OOM: a child held before its exec in a memory-limited (v1) cgroup is
//     not the OOM killer's victim, so the harness is not killed with it.
//   * A worker thread that spawns and ends: no crash, its calls' trees end.
//   * A uid/gid spawn leaves the harness dumpable (PR_GET_DUMPABLE read in
//     the harness by a tiny addon compiled here).
//   * The clone() fallback (clone3 refused by seccomp) into a frozen
//     subtree: spawn() returns, terminate() ends the call.
//   * shutdown() of 20 calls held before their exec does not stall the
//     event loop.
import { type ChildProcess, execFileSync, spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { capabilities } from '../dist/cjs/index.js';
import { cgroupMembers, killCgroup, running, waitUntil } from './helpers';

const root = path.resolve(__dirname, '..');
const lib = process.env.PROCTREE_SAFETY_LIB ?? path.join(root, 'dist', 'cjs', 'index.js');
const cgroupTier = capabilities().tier === 'cgroup';
const isRoot = process.getuid?.() === 0;
const hasCc = (() => {
  try {
    execFileSync('cc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

let work = '';
beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-safety-'));
});

// Every harness, every cgroup the harnesses reported and every subtree the
// test froze: stopped, thawed and removed after the file, even on failure.
const harnesses: ChildProcess[] = [];
const callCgroups: string[] = [];
const frozenSubtrees = new Set<string>();
afterAll(() => {
  for (const s of frozenSubtrees) thaw(s);
  for (const h of harnesses) if (h.exitCode === null && h.signalCode === null) h.kill('SIGKILL');
  for (const cg of callCgroups) killCgroup(cg);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

function freeze(subtree: string): void {
  frozenSubtrees.add(subtree);
  fs.writeFileSync(`${subtree}/cgroup.freeze`, '1');
}
function thaw(subtree: string): void {
  try {
    fs.writeFileSync(`${subtree}/cgroup.freeze`, '0');
  } catch {
    // gone with its supervisor
  }
  frozenSubtrees.delete(subtree);
}

/**
 * What every harness script starts with: the library, `out` (one JSON line
 * on stdout per event) and `cmd` (the next line the test writes on stdin).
 */
const PRELUDE = `
const { Supervisor, capabilities } = require(process.env.PROCTREE_SAFETY_LIB);
const { once } = require('node:events');
const fs = require('node:fs');
const path = require('node:path');
const out = (ev, o = {}) => process.stdout.write(JSON.stringify({ ev, ...o }) + '\\n');
const rl = require('node:readline').createInterface({ input: process.stdin });
const queued = [];
let waiting = null;
rl.on('line', (l) => { if (waiting) { const w = waiting; waiting = null; w(l); } else queued.push(l); });
const cmd = () => (queued.length ? Promise.resolve(queued.shift()) : new Promise((r) => (waiting = r)));
const finish = () => { rl.close(); process.stdin.destroy(); out('done'); };
process.on('unhandledRejection', (e) => { out('failed', { error: String(e && e.stack || e) }); process.exit(3); });
// A call of the supervisor's own keeps its subtree there, and is the
// process's first spawn (which learns how the kernel clones).
async function keeperOf(sup) {
  const keeper = sup.spawn('sleep', ['60'], { stdio: 'ignore' });
  await once(keeper, 'spawn');
  return keeper;
}
`;

type Event = { ev: string; [key: string]: unknown };

/** A harness process: its events in order, and the lines written to it. */
class Harness {
  readonly child: ChildProcess;
  readonly events: Event[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr = '';
  private wake: (() => void) | null = null;

  constructor(script: string, wrapper: string[] = [], env: NodeJS.ProcessEnv = {}) {
    const argv = [...wrapper, process.execPath, '-e', PRELUDE + script];
    this.child = cpSpawn(argv[0], argv.slice(1), {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, PROCTREE_SAFETY_LIB: lib, ...env },
    });
    harnesses.push(this.child);
    readline.createInterface({ input: this.child.stdout! }).on('line', (l) => {
      try {
        this.events.push(JSON.parse(l) as Event);
      } catch {
        this.events.push({ ev: 'text', text: l });
      }
      this.wake?.();
    });
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += String(d)));
    this.exited = new Promise((resolve) =>
      this.child.on('exit', (code, signal) => {
        resolve({ code, signal });
        this.wake?.();
      }),
    );
  }

  /** The first event named `ev`; throws if the harness ends or times out first. */
  async next(ev: string, timeoutMs = 30000): Promise<Event> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find((e) => e.ev === ev);
      if (found) return found;
      const failed = this.events.find((e) => e.ev === 'failed');
      if (failed) throw new Error(`harness failed: ${String(failed.error)}`);
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`harness ended (${this.child.exitCode ?? this.child.signalCode}) before '${ev}'; stderr: ${this.stderr}`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no '${ev}' from the harness within ${timeoutMs} ms; stderr: ${this.stderr}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 200));
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }

  /** Its exit, killing it (by its pid) if it has not ended within timeoutMs. */
  async end(timeoutMs = 30000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), timeoutMs)));
    const r = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (r) return r;
    this.child.kill('SIGKILL');
    throw new Error(`the harness did not end within ${timeoutMs} ms; stderr: ${this.stderr}`);
  }
}

/** Whether every process of `pids` is gone (or a zombie) and `cgroups` have no members. */
function treeGone(pids: number[], cgroups: string[]): boolean {
  return pids.every((p) => !running(p)) && cgroups.every((cg) => cgroupMembers(cg).length === 0);
}

// ------------------------------------------------------------------- OOM

/** The v1 memory hierarchy's mount point and this process's cgroup in it. */
function v1MemoryCgroup(): { dir: string } | { why: string } {
  let mount = '';
  let mountRoot = '/';
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const dash = line.indexOf(' - ');
    if (dash < 0) continue;
    const [fstype, , superOpts = ''] = line.slice(dash + 3).split(' ');
    if (fstype !== 'cgroup' || !superOpts.split(',').includes('memory')) continue;
    const head = line.slice(0, dash).split(' ');
    mountRoot = head[3];
    mount = head[4];
    break;
  }
  if (!mount) return { why: 'no cgroup v1 memory controller mounted' };
  let own = '';
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const parts = line.split(':');
    if (parts.length >= 3 && parts[1].split(',').includes('memory')) own = parts.slice(2).join(':');
  }
  if (!own) return { why: 'this process is in no v1 memory cgroup' };
  if (mountRoot !== '/' && own.startsWith(mountRoot)) own = own.slice(mountRoot.length);
  return { dir: path.join(mount, own) };
}

const memcg = v1MemoryCgroup();
const oomSkip = !isRoot
  ? 'needs root (a v1 memory cgroup of its own)'
  : !cgroupTier
    ? 'no cgroup tier here (the call must be born frozen)'
    : 'why' in memcg
      ? memcg.why
      : null;
if (oomSkip) console.warn(`spawn-safety OOM test skipped: ${oomSkip}`);

function oomKills(dir: string): number {
  const m = /^oom_kill (\d+)$/m.exec(fs.readFileSync(`${dir}/memory.oom_control`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

/** Removes a v1 memory cgroup of the test's, killing its members (ours: the filler, the held child). */
async function removeMemcg(dir: string): Promise<void> {
  const deadline = Date.now() + 10000;
  while (fs.existsSync(dir) && Date.now() < deadline) {
    let members: number[] = [];
    try {
      members = fs.readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number);
    } catch {
      return;
    }
    for (const p of members) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // gone
      }
    }
    try {
      fs.rmdirSync(dir);
    } catch {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

describe('spawn safety', () => {
  it.skipIf(oomSkip !== null)('an OOM in the memory cgroup of a child held before its exec does not kill the harness', async () => {
    const dir = path.join((memcg as { dir: string }).dir, `proctree-safety-${process.pid}-oom`);
    fs.mkdirSync(dir);
    const MiB = 1024 * 1024;
    let filler: ChildProcess | null = null;
    let subtree = '';
    try {
      fs.writeFileSync(`${dir}/memory.limit_in_bytes`, String(64 * MiB));
      // The filler: joins the cgroup, then fills it nearly (its memory is
      // charged there only once it is in), and on "grow" overflows it.
      filler = cpSpawn(
        process.execPath,
        [
          '-e',
          `const rl = require('node:readline').createInterface({ input: process.stdin });
           const held = [];
           rl.on('line', (l) => { held.push(Buffer.alloc(40 << 20, 1)); console.log(l); });`,
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      );
      const fillerOut = readline.createInterface({ input: filler.stdout! });
      const fillerSaid = (word: string): Promise<void> =>
        new Promise((resolve) => fillerOut.on('line', (l) => l === word && resolve()));
      fs.writeFileSync(`${dir}/cgroup.procs`, String(filler.pid));
      const filled = fillerSaid('fill');
      filler.stdin!.write('fill\n');
      await filled;

      // The harness: ~150 MiB touched, a supervisor, and a call born into
      // its frozen subtree whose command allocates 30 MiB once it runs.
      const h = new Harness(`
        const big = Buffer.alloc(150 << 20, 1);
        (async () => {
          const sup = new Supervisor({ name: 'safety-oom-' + process.pid });
          const keeper = await keeperOf(sup);
          out('keeper', { cgroup: keeper.cgroup });
          await cmd();
          const call = sup.spawn('sh', ['-c', 'head -c 30M /dev/zero | tail | wc -c'], { stdio: ['ignore', 'pipe', 'inherit'] });
          let stdout = '';
          call.stdout.on('data', (d) => (stdout += d));
          const closed = new Promise((r) => call.on('close', (code, signal) => r({ code, signal })));
          out('held', { cgroup: call.cgroup, pid: call.pid ?? null });
          await cmd();
          out('closed', { ...(await closed), stdout: stdout.trim() });
          await sup.shutdown({ grace: 0 });
          out('alive', { big: big.length });
          finish();
        })();
      `);
      const keeper = await h.next('keeper');
      callCgroups.push(keeper.cgroup as string);
      subtree = path.dirname(keeper.cgroup as string);
      freeze(subtree);
      h.send('frozen');
      const held = await h.next('held');
      callCgroups.push(held.cgroup as string);
      const members = cgroupMembers(held.cgroup as string);
      expect(members).toHaveLength(1);
      // Held before its exec: still the harness's program and memory.
      expect(fs.readlinkSync(`/proc/${members[0]}/exe`)).toBe(fs.readlinkSync(`/proc/${h.child.pid}/exe`));
      if (held.pid !== null) expect(held.pid).toBe(members[0]);
      fs.writeFileSync(`${dir}/cgroup.procs`, String(members[0]));
      // The filler overflows the limit while the child is held there: the
      // OOM killer picks among the cgroup's tasks (the filler, the child).
      filler.stdin!.write('grow\n');
      await waitUntil(() => oomKills(dir) >= 1, 30000);
      expect(oomKills(dir)).toBeGreaterThanOrEqual(1);
      thaw(subtree);
      h.send('thawed');
      const alive = await h.next('alive');
      expect(alive.big).toBe(150 * MiB);
      const closed = await h.next('closed');
      // The command ran in the limited cgroup (its 30 MiB fit once the filler was gone).
      expect(closed).toMatchObject({ code: 0, stdout: String(30 * MiB) });
      expect(await h.end()).toEqual({ code: 0, signal: null });
    } finally {
      if (subtree) thaw(subtree);
      if (filler && filler.exitCode === null && filler.signalCode === null) filler.kill('SIGKILL');
      await removeMemcg(dir);
    }
  }, 120_000);

  // ------------------------------------------------------- worker threads

  // Ended by worker.terminate(), or by its own process.exit() (its script
  // ending with calls still live).
  it.skipIf(!cgroupTier).each(['terminate', 'exit'] as const)('a worker thread that spawns a call held before its exec and ends (%s): no crash, the call\'s tree ends', async (end) => {
    const h = new Harness(`
      const { Worker } = require('node:worker_threads');
      const worker = new Worker(\`
        const { parentPort } = require('node:worker_threads');
        const { once } = require('node:events');
        const { Supervisor } = require(process.env.PROCTREE_SAFETY_LIB);
        (async () => {
          const sup = new Supervisor({ name: 'safety-worker-' + process.pid });
          const keeper = sup.spawn('sleep', ['60'], { stdio: 'ignore' });
          await once(keeper, 'spawn');
          parentPort.postMessage({ ev: 'keeper', cgroup: keeper.cgroup, pid: keeper.pid });
          await once(parentPort, 'message');
          const call = sup.spawn('sleep', ['60'], { stdio: 'ignore' });
          parentPort.postMessage({ ev: 'held', cgroup: call.cgroup });
          await once(parentPort, 'message');
          process.exit(0);
        })();
      \`, { eval: true });
      worker.on('message', (m) => out(m.ev, m));
      worker.on('error', (e) => out('worker-error', { error: String(e) }));
      (async () => {
        await cmd();
        worker.postMessage('go');
        await cmd();
        if (${JSON.stringify(end)} === 'terminate') {
          await worker.terminate();
        } else {
          worker.postMessage('end');
          await once(worker, 'exit');
        }
        out('terminated');
        await cmd();
        // The harness goes on: its own loop and a spawn of its own still work.
        const sup = new Supervisor({ name: 'safety-after-worker-' + process.pid });
        const r = await sup.run('sh', ['-c', 'echo ok']);
        await sup.shutdown({ grace: 0 });
        out('alive', { stdout: r.stdout.trim() });
        finish();
      })();
    `);
    const keeper = await h.next('keeper');
    callCgroups.push(keeper.cgroup as string);
    const subtree = path.dirname(keeper.cgroup as string);
    try {
      freeze(subtree);
      h.send('frozen');
      const held = await h.next('held');
      callCgroups.push(held.cgroup as string);
      const heldPids = cgroupMembers(held.cgroup as string);
      expect(heldPids).toHaveLength(1);
      expect(fs.readlinkSync(`/proc/${heldPids[0]}/exe`)).toBe(fs.readlinkSync(`/proc/${h.child.pid}/exe`));
      const pids = [...heldPids, ...cgroupMembers(keeper.cgroup as string)];
      h.send('terminate');
      await h.next('terminated');
      thaw(subtree);
      await waitUntil(() => treeGone(pids, [held.cgroup as string, keeper.cgroup as string]), 15000);
      expect(pids.filter(running)).toEqual([]);
      expect(cgroupMembers(held.cgroup as string)).toEqual([]);
      expect(cgroupMembers(keeper.cgroup as string)).toEqual([]);
      h.send('go on');
      expect(await h.next('alive')).toMatchObject({ stdout: 'ok' });
      expect(await h.end()).toEqual({ code: 0, signal: null });
      expect(h.events.filter((e) => e.ev === 'worker-error')).toEqual([]);
    } finally {
      thaw(subtree);
    }
  }, 120_000);

  // ------------------------------------------------------------- dumpable

  it.skipIf(!isRoot || !hasCc)('the harness stays dumpable after a uid/gid spawn (PR_GET_DUMPABLE read in the harness)', async () => {
    // The smallest Node-API addon: one function returning prctl(PR_GET_DUMPABLE).
    // Its few declarations are written out, so no Node header is needed.
    const src = path.join(work, 'dumpable.c');
    const addon = path.join(work, 'dumpable.node');
    fs.writeFileSync(
      src,
      `#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
typedef struct napi_env__* napi_env;
typedef struct napi_value__* napi_value;
typedef struct napi_callback_info__* napi_callback_info;
typedef int napi_status;
extern napi_status napi_create_int32(napi_env, int32_t, napi_value*);
extern napi_status napi_create_function(napi_env, const char*, size_t, napi_value (*)(napi_env, napi_callback_info),
                                        void*, napi_value*);
static napi_value dumpable(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_int32(env, prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), &v);
  return v;
}
__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  (void)exports;
  napi_value f;
  napi_create_function(env, "dumpable", (size_t)-1, dumpable, NULL, &f);
  return f;
}
__attribute__((visibility("default"))) int32_t node_api_module_get_api_version_v1(void) { return 8; }
`,
    );
    execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', addon, src]);
    const h = new Harness(
      `
      const m = { exports: {} };
      process.dlopen(m, process.env.DUMPABLE_ADDON);
      const dumpable = m.exports;
      (async () => {
        const sup = new Supervisor({ name: 'safety-dumpable-' + process.pid });
        const before = dumpable();
        // Not the process's first spawn: that one is the plain case.
        await sup.run('true');
        const r = await sup.run('sh', ['-c', 'test "$(id -u):$(id -g)" = 65534:65534'], { uid: 65534, gid: 65534 });
        const after = dumpable();
        const r2 = await sup.run('true', [], { uid: 65534, gid: 65534 });
        const later = dumpable();
        await sup.shutdown({ grace: 0 });
        out('dumpable', { before, after, later, code: r.exitCode, code2: r2.exitCode });
        finish();
      })();
    `,
      [],
      { DUMPABLE_ADDON: addon },
    );
    expect(await h.next('dumpable')).toEqual({ ev: 'dumpable', before: 1, after: 1, later: 1, code: 0, code2: 0 });
    expect(await h.end()).toEqual({ code: 0, signal: null });
  }, 120_000);

  // ---------------------------------------------------- clone() fallback

  it.skipIf(!cgroupTier || !hasCc)('clone3 refused (seccomp ENOSYS): a spawn into a frozen subtree returns, terminate() ends it, nothing is left', async () => {
    const seccomp = path.join(work, 'seccomp-no-clone3');
    execFileSync('cc', ['-O2', '-o', seccomp, path.join(root, 'test', 'fixtures', 'seccomp-no-clone3.c')]);
    const h = new Harness(
      `
      (async () => {
        const sup = new Supervisor({ name: 'safety-fallback-' + process.pid });
        const keeper = await keeperOf(sup);
        out('keeper', { cgroup: keeper.cgroup, clone: capabilities().clone });
        await cmd();
        const call = sup.spawn('sleep', ['60'], { stdio: 'ignore' });
        out('spawned', { cgroup: call.cgroup });
        // The event loop keeps ticking while the child is held.
        let ticks = 0;
        const timer = setInterval(() => (ticks += 1), 1);
        await new Promise((r) => setTimeout(r, 100));
        out('ticking', { ticks });
        await cmd();
        const report = await call.terminate({ grace: 50 });
        clearInterval(timer);
        if (call.exitCode === null && call.signalCode === null) await once(call, 'close');
        out('terminated', { signal: call.signalCode, leftovers: report.leftovers.length });
        await sup.shutdown({ grace: 0 });
        finish();
      })();
    `,
      [seccomp],
    );
    const keeper = await h.next('keeper');
    expect(keeper.clone).toBe('clone');
    callCgroups.push(keeper.cgroup as string);
    const subtree = path.dirname(keeper.cgroup as string);
    try {
      freeze(subtree);
      h.send('frozen');
      const spawned = await h.next('spawned');
      callCgroups.push(spawned.cgroup as string);
      expect((await h.next('ticking')).ticks).toBeGreaterThan(0);
      // The child joined its leaf itself (clone() cannot place it) and is held there.
      await waitUntil(() => cgroupMembers(spawned.cgroup as string).length === 1, 10000);
      const pids = cgroupMembers(spawned.cgroup as string);
      expect(pids).toHaveLength(1);
      h.send('terminate');
      expect(await h.next('terminated')).toMatchObject({ signal: 'SIGKILL', leftovers: 0 });
      await waitUntil(() => treeGone(pids, [spawned.cgroup as string]), 10000);
      expect(pids.filter(running)).toEqual([]);
      expect(cgroupMembers(spawned.cgroup as string)).toEqual([]);
      thaw(subtree);
      expect(await h.end()).toEqual({ code: 0, signal: null });
    } finally {
      thaw(subtree);
    }
  }, 120_000);

  // ------------------------------------------------------------- shutdown

  it.skipIf(!cgroupTier)('shutdown() of 20 calls held before their exec: the event loop never stalls over 50 ms, every tree ends', async () => {
    // The largest gap between ticks of a 1 ms interval, less the time the
    // harness's JS thread waited for a CPU meanwhile (schedstat's run
    // delay): what the library itself held the loop for, not the load of a
    // shared machine. The calls are past their bounded exec-report wait
    // ('spawn' came): a shutdown sooner may wait for their reports as long
    // as the library allows a ladder to (its own bound).
    const h = new Harness(`
      const runDelayMs = () => Number(fs.readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[1]) / 1e6;
      (async () => {
        const sup = new Supervisor({ name: 'safety-shutdown-' + process.pid });
        const keeper = await keeperOf(sup);
        out('keeper', { cgroup: keeper.cgroup });
        await cmd();
        const calls = [];
        for (let i = 0; i < 20; i += 1) calls.push(sup.spawn('sleep', ['60'], { stdio: 'ignore' }));
        // Counted as started (their reports overdue): from here on nothing
        // waits for an exec report that cannot come.
        await Promise.all(calls.map((c) => once(c, 'spawn')));
        out('held', { cgroups: calls.map((c) => c.cgroup) });
        await cmd();
        let last = performance.now();
        let lastDelay = runDelayMs();
        let maxGap = 0;
        let maxStall = 0;
        const timer = setInterval(() => {
          const now = performance.now();
          const delay = runDelayMs();
          maxGap = Math.max(maxGap, now - last);
          maxStall = Math.max(maxStall, now - last - (delay - lastDelay));
          last = now;
          lastDelay = delay;
        }, 1);
        await sup.shutdown({ grace: 50 });
        // One more tick after it: a stall at its very end counts too.
        await new Promise((r) => setTimeout(r, 5));
        clearInterval(timer);
        out('shut', { maxGap, maxStall, closed: calls.filter((c) => c.exitCode !== null || c.signalCode !== null).length });
        finish();
      })();
    `);
    const keeper = await h.next('keeper');
    callCgroups.push(keeper.cgroup as string);
    const subtree = path.dirname(keeper.cgroup as string);
    try {
      freeze(subtree);
      h.send('frozen');
      const held = await h.next('held');
      const cgroups = held.cgroups as string[];
      callCgroups.push(...cgroups);
      await waitUntil(() => cgroups.every((cg) => cgroupMembers(cg).length === 1), 10000);
      const pids = cgroups.flatMap((cg) => cgroupMembers(cg));
      expect(pids).toHaveLength(20);
      for (const p of pids) expect(fs.readlinkSync(`/proc/${p}/exe`)).toBe(fs.readlinkSync(`/proc/${h.child.pid}/exe`));
      pids.push(...cgroupMembers(keeper.cgroup as string));
      h.send('shutdown');
      const shut = await h.next('shut', 60000);
      console.log(`shutdown of 20 held calls: largest loop gap ${Number(shut.maxGap).toFixed(1)} ms, less run delay ${Number(shut.maxStall).toFixed(1)} ms`);
      expect(shut.maxStall).toBeLessThan(50);
      expect(shut.closed).toBe(20);
      await waitUntil(() => treeGone(pids, [...cgroups, keeper.cgroup as string]), 10000);
      expect(pids.filter(running)).toEqual([]);
      for (const cg of [...cgroups, keeper.cgroup as string]) expect(cgroupMembers(cg)).toEqual([]);
      thaw(subtree);
      expect(await h.end()).toEqual({ code: 0, signal: null });
    } finally {
      thaw(subtree);
    }
  }, 120_000);
});
