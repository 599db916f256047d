// 5. Memory: what each live call costs the harness (heap, RSS, file
// descriptors) with N idle calls (sleep) open at once. One worker per method,
// so neither inherits the other's heap. Issue 14: fds per call (spawn with
// default pipes, run() without input), heap per call against child_process,
// and the spawn cost with N live calls against the same with 10.
import cp from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { run as proctreeRun, spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { cell, num, ratioCell, sleep, summarize, table } from '../lib/stats.mjs';

export const title = 'Memory per live call';

const execFile = promisify(cp.execFile);

// The warm-up before the "before" snapshot: calls of `sleep 0`, in bursts.
const WARMUP_CALLS = 500;
const WARMUP_BURST = 50;

// Each opens one idle call and returns { spawned, closed, stop }.
const STARTERS = {
  // The default stdio ('pipe' for all three) of both APIs: what a harness
  // capturing output holds per call.
  proctree: (file, args) => {
    const c = proctreeSpawn(file, args);
    return { child: c, spawned: once(c, 'spawn'), closed: once(c, 'close'), stop: () => c.terminate({ grace: 0 }) };
  },
  // run() without `input`: what a harness that only collects output holds.
  'proctree run()': (file, args) => {
    const ac = new AbortController();
    const done = proctreeRun(file, args, { signal: ac.signal }).catch(() => {});
    // run() gives no handle and no 'spawn': its live calls are counted in the outer cgroup.
    return { spawned: null, closed: done, stop: () => ac.abort() };
  },
  child_process: (file, args) => {
    const c = cp.spawn(file, args);
    return { child: c, spawned: once(c, 'spawn'), closed: once(c, 'close'), stop: () => c.kill('SIGKILL') };
  },
};

// The call whose start is timed with many others live: /bin/true, stdio
// ignored, from the call to its 'spawn' event; each waits for 'close'
// before the next, so the count of live calls stays put.
const PROBES = {
  proctree: (file) => proctreeSpawn(file, [], { stdio: 'ignore' }),
  child_process: (file) => cp.spawn(file, [], { stdio: 'ignore' }),
};

async function spawnTimes(method, file, n) {
  const out = [];
  for (let i = 0; i < n; i += 1) {
    const t0 = performance.now();
    const c = PROBES[method](file);
    const spawned = once(c, 'spawn');
    const closed = once(c, 'close');
    await spawned;
    out.push(performance.now() - t0);
    await closed;
  }
  return out;
}

/**
 * The C floor's start (mkdir, open, clone3 into the leaf) with its leaves
 * made next to the live calls' leaves and as many fds open as this harness
 * has now: clone copies the whole fd table and the child's exec closes every
 * close-on-exec fd while the parent waits, a cost that grows with the fds
 * the live calls hold whoever spawns.
 */
async function floorSpawnTimes(bin, parent, file, n) {
  const fds = fs.readdirSync('/proc/self/fd').length;
  const { stdout } = await execFile(bin, [String(n), '1', '0', parent, file, String(fds)], { maxBuffer: 64 << 20 });
  return { times: JSON.parse(stdout).spawnMs, fds };
}

function snapshot() {
  global.gc?.();
  global.gc?.();
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, external: m.external, rss: m.rss, fds: fs.readdirSync('/proc/self/fd').length };
}

/** Waits until `n` processes named `comm` live in the outer cgroup (run() gives no 'spawn' event). */
async function waitLive(harness, comm, n, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (harness.live().filter((p) => p.comm === comm).length < n && Date.now() < deadline) await sleep(20);
}

export async function run(job, ctx) {
  const sleepBin = which('sleep');
  const trueBin = which('true');
  const start = STARTERS[job.method];
  const probe = job.spawnSamples > 0 && job.method in PROBES;
  // Calls first (and a few probes), so that what is set up once per harness
  // is not counted: 500 in bursts of 50, the same for every method. V8
  // compiles a spawn path's hot functions over its first few hundred calls;
  // after a single one, that machine code (about 0.15–0.2 KiB per call of
  // the burst below, for either API) landed in the heap measured per live
  // call, though a harness pays it once.
  for (let done = 0; done < WARMUP_CALLS; done += WARMUP_BURST) {
    const burst = [];
    for (let i = 0; i < WARMUP_BURST; i += 1) burst.push(start(sleepBin, ['0']));
    await Promise.all(burst.map((c) => c.closed));
  }
  if (probe) await spawnTimes(job.method, trueBin, 20);
  await sleep(100);
  ctx.harness.recordHelpers();
  const before = snapshot();
  const calls = [];
  const t0 = performance.now();
  for (let i = 0; i < job.calls; i += 1) calls.push(start(sleepBin, ['120']));
  if (job.method === 'proctree run()') await waitLive(ctx.harness, 'sleep', job.calls, 30000);
  else await Promise.all(calls.map((c) => c.spawned));
  const spawnAllMs = performance.now() - t0;
  await sleep(200);
  const after = snapshot();
  const live = ctx.harness.live().length;

  // Spawn cost with job.calls live, then with job.fewLive live; the floor in
  // alternating rounds with proctree, so that drift on the machine hits both.
  const spawn = {};
  const floor = {};
  const floorParent = job.method === 'proctree' ? path.dirname(calls[0].child.cgroup) : null;
  const ROUNDS = 4;
  const measure = async (key) => {
    spawn[key] = [];
    floor[key] = floorParent ? [] : null;
    for (let round = 0; round < ROUNDS; round += 1) {
      const n = Math.ceil(job.spawnSamples / ROUNDS);
      spawn[key].push(...(await spawnTimes(job.method, trueBin, n)));
      if (floorParent) {
        const f = await floorSpawnTimes(ctx.bin.floor, floorParent, trueBin, n);
        floor[key].push(...f.times);
        floor[`${key}Fds`] = f.fds;
      }
    }
  };
  if (probe) await measure('many');
  const stopped = async (group) => {
    const t = performance.now();
    await Promise.all(group.map((c) => c.stop()));
    await Promise.all(group.map((c) => c.closed));
    return performance.now() - t;
  };
  let stopAllMs = await stopped(calls.slice(job.fewLive));
  if (probe) {
    await sleep(200);
    await measure('few');
  }
  stopAllMs += await stopped(calls.slice(0, job.fewLive));
  return { method: job.method, calls: job.calls, fewLive: job.fewLive, live, before, after, spawnAllMs, stopAllMs, spawn, floor };
}

export function report(results, { job }) {
  const per = (r, k) => (r.after[k] - r.before[k]) / r.calls;
  const rows = results.map((r) => [
    r.method,
    String(r.live),
    num(per(r, 'heapUsed') / 1024),
    num(per(r, 'external') / 1024),
    num(per(r, 'rss') / 1024),
    num(per(r, 'fds')),
    num(r.spawnAllMs),
    num(r.stopAllMs),
  ]);
  const by = Object.fromEntries(results.map((r) => [r.method, r]));

  // Spawn cost with many calls live against the same with a few.
  const FLOOR = 'C floor + cgroup';
  const spawnRows = [];
  const flat = {};
  for (const r of results) {
    for (const [label, times] of [
      [r.method, r.spawn],
      [FLOOR, r.floor],
    ]) {
      if (!times?.many || !times?.few) continue;
      const many = summarize(times.many);
      const few = summarize(times.few);
      flat[label] = { many, few, ratio: many.median / few.median };
      const name = label === FLOOR ? `${FLOOR}, ${r.floor.fewFds} / ${r.floor.manyFds} fds open, leaves next to proctree's` : label;
      spawnRows.push([name, cell(few), cell(many), ratioCell(many.median / few.median)]);
    }
  }
  // proctree's own growth: its time with many live, less what the kernel
  // alone adds (the floor's growth with the same fds and sibling cgroups),
  // over its time with a few live.
  if (flat.proctree && flat[FLOOR]) {
    const kernel = flat[FLOOR].many.median - flat[FLOOR].few.median;
    flat.proctree.kernelMs = kernel;
    flat.proctree.ownRatio = (flat.proctree.many.median - kernel) / flat.proctree.few.median;
    spawnRows.push([
      "*proctree less the kernel's growth*",
      cell(flat.proctree.few),
      num(flat.proctree.many.median - kernel),
      ratioCell(flat.proctree.ownRatio),
    ]);
  }

  const checks = [];
  const fdCheck = (m, limit, what) => {
    if (!by[m]) return;
    const v = per(by[m], 'fds');
    checks.push({
      issue: 14,
      name: `issue14.fdsPerCall.${m === 'proctree' ? 'spawn' : 'run'}`,
      value: v,
      pass: v <= limit,
      text: `file descriptors per live call, ${what}: ${num(v)} (${by[m].calls} live calls; child_process: ${by.child_process ? num(per(by.child_process, 'fds')) : '–'}) (required: ≤ ${limit})`,
    });
  };
  fdCheck('proctree', 4, 'spawn() with default pipes');
  fdCheck('proctree run()', 3, 'run() without input');
  if (by.proctree && by.child_process) {
    const pt = per(by.proctree, 'heapUsed');
    const cpm = per(by.child_process, 'heapUsed');
    checks.push({
      issue: 29,
      name: 'issue29.heapPerCall',
      value: pt / cpm,
      pass: pt <= cpm,
      text: `JS heap per live call with default pipes: proctree ${num(pt / 1024)} KiB vs child_process ${num(cpm / 1024)} KiB, ${num(pt / cpm)}× (${by.proctree.calls} live calls; required: ≤ child_process's)`,
    });
  }
  if (flat.proctree?.ownRatio !== undefined) {
    const f = flat.proctree;
    checks.push({
      issue: 14,
      name: 'issue14.spawnFlatWithLiveCalls',
      value: f.ownRatio,
      pass: f.ownRatio <= 1.5,
      text: `spawn() → 'spawn' with ${by.proctree.calls} live calls, less what the kernel alone adds (the C floor with the same fds open and its leaves among the live ones: +${num(f.kernelMs)} ms), takes ${num(f.ownRatio)}× the time with ${by.proctree.fewLive} live: ${cell(f.many)} − ${num(f.kernelMs)} ms vs ${cell(f.few)} ms (required: ≤ 1.5×; without the correction ${num(f.ratio)}×, child_process ${flat.child_process ? num(flat.child_process.ratio) : '–'}×)`,
    });
  }

  const markdown = [
    `${job.calls} idle calls (\`sleep 120\`) open at once, default stdio (three pipes; run(): no \`input\`, output collected); per-call cost = (after − before) / ${job.calls}, each side after two forced GCs, one method per fresh worker, "before" after ${WARMUP_CALLS} calls of \`sleep 0\` in bursts of ${WARMUP_BURST} (V8 compiles a spawn path's hot code over its first few hundred calls, once per harness; counted per live call, that code was about 0.15–0.2 KiB of either API's figure). "live" is the count of processes seen in the outer cgroup while they were open. Stop: proctree \`terminate({ grace: 0 })\` on all, run() through its \`signal\`, child_process \`kill('SIGKILL')\` on all, until every 'close'.`,
    '',
    table(['method', 'live', 'heap KiB/call', 'external KiB/call', 'RSS KiB/call', 'fds/call', 'start all (ms)', 'stop all (ms)'], rows),
    ...(spawnRows.length
      ? [
          '',
          `Spawn cost with many calls live: spawn() of /bin/true (stdio ignored) to its 'spawn' event, ${job.spawnSamples} one after another (each waits for 'close', so the count of live calls stays put), first with all ${job.calls} idle calls above live, then after all but ${job.fewLive} were stopped; the C floor in alternating rounds with proctree. Part of the growth is the kernel's and comes with the fds the live calls hold, whoever spawns: a clone without CLONE_FILES copies the whole fd table, and the child's exec closes every close-on-exec fd before the vfork parent resumes. The C floor shows that part: the same start (mkdir, open, clone3 into the leaf), with its leaves made in proctree's subtree next to the live calls' leaves and as many fds open as the harness had at that moment. "Flat" is about proctree's own work per spawn (bookkeeping that grows with the live calls, as the O(live calls) update issue 14 found did), so the verdict takes the floor's growth out: (proctree with ${job.calls} live − (floor with ${job.calls} − floor with ${job.fewLive})) / proctree with ${job.fewLive} ≤ 1.5. The kernel's part is for fewer fds per call to shrink. 1.5 and not closer to 1: these are medians of sub-millisecond times that a busy 2-core machine makes bimodal (the child starting on the other core or on ours), and they move by a third between runs.`,
          '',
          table(['method', `with ${job.fewLive} live (ms)`, `with ${job.calls} live (ms)`, `${job.calls} live / ${job.fewLive} live`], spawnRows),
        ]
      : []),
  ].join('\n');
  return { markdown, checks, summary: { results: results.map(({ spawn, floor, ...r }) => r), flat } };
}
