// 6. Shutdown (issue 5): stopping 100 calls of 10 processes each at once,
// proctree's Supervisor#shutdown() against the killpg loop a harness writes
// by hand (detached: true, kill(-pgid, SIGTERM) for every call, SIGKILL after
// grace). Each tree is a shell that starts 9 `setsid sleep` and becomes a
// sleep itself: all honour SIGTERM, so the time is the mechanism's, not the
// grace's; the 9 setsid'd ones per tree are what a killpg loop cannot reach.
// Survivors are counted by membership of the outer cgroup, never by pid.
// Issue 14: the same 100 trees, each in a leaf of one cgroup, stopped by the
// C floor (bench/c/cgkill.c: one cgroup.kill, wait for populated 0, rmdir
// the leaves), and the event loop watched while shutdown() runs.
import cp from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { Supervisor } from 'proctree';

import { cgroupKill, liveMembers } from '../lib/cgroup.mjs';
import { waitEmpty, which } from '../lib/harness.mjs';
import { watchLoop } from '../lib/loop.mjs';
import { settleHarnessHelpers } from '../lib/methods.mjs';
import { cell, num, ratioCell, sleep, summarize, table } from '../lib/stats.mjs';

export const title = 'Shutdown: 100 calls × 10 processes vs a killpg loop';

const LABEL = { proctree: 'proctree', killpg: 'killpg loop', floor: 'C floor (cgroup.kill)' };

const execFile = promisify(cp.execFile);

/** bash that starts perTree − 1 `setsid sleep` in the background and then execs a sleep itself. */
function treeArgv(perTree, lifetimeS) {
  const list = Array.from({ length: perTree - 1 }, (_, i) => i + 1).join(' ');
  return [which('bash'), ['-c', `for i in ${list}; do setsid sleep ${lifetimeS} & done; exec sleep ${lifetimeS}`]];
}

/** Waits until all the trees' processes are sleeps (every shell and setsid has exec'd). */
async function waitReady(harness, expected, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const live = harness.live();
    const ready = live.length === expected && live.every((p) => p.comm === 'sleep');
    if (ready || Date.now() > deadline) return { live, ready };
    await sleep(20);
  }
}

const tally = (procs) => {
  const out = {};
  for (const p of procs) out[`${p.comm}:${p.state}`] = (out[`${p.comm}:${p.state}`] ?? 0) + 1;
  return out;
};

/** Resolves true once check() holds (tested every 1 ms), false after timeoutMs. */
function until(check, timeoutMs) {
  return new Promise((resolve) => {
    if (check()) {
      resolve(true);
      return;
    }
    const done = (v) => {
      clearInterval(poll);
      clearTimeout(timer);
      resolve(v);
    };
    const poll = setInterval(() => check() && done(true), 1);
    const timer = setTimeout(() => done(check()), timeoutMs);
  });
}

async function proctreeTrial(job, ctx, seq) {
  const { harness } = ctx;
  const [file, args] = treeArgv(job.perTree, job.lifetimeS);
  const sup = new Supervisor({ name: `bench-shutdown-${seq}`, grace: job.grace, maxConcurrent: job.trees });
  const errors = [];
  sup.on('error', (err) => errors.push(String(err?.message ?? err)));
  const calls = [];
  let shutDown = false;
  try {
    for (let i = 0; i < job.trees; i += 1) {
      const call = sup.spawn(file, args, { stdio: 'ignore' });
      call.on('error', (err) => errors.push(String(err?.message ?? err)));
      calls.push({ call, closed: once(call, 'close').catch(() => {}) });
    }
    const { live, ready } = await waitReady(harness, job.trees * job.perTree, 30000);
    const mains = new Set(calls.map((c) => c.call.pid));
    const escapedAtStart = live.filter((p) => !mains.has(p.pgid)).length;
    const stopWatch = watchLoop();
    const t0 = performance.now();
    const reports = await sup.shutdown({ grace: job.grace });
    const ms = performance.now() - t0;
    const loop = stopWatch();
    shutDown = true;
    const survivors = harness.live();
    const durations = reports.map((r) => r.durationMs);
    return {
      method: 'proctree',
      started: live.length,
      ready,
      escapedAtStart,
      ms,
      survivors: survivors.length,
      survivorStates: tally(survivors),
      reports: reports.length,
      // Every report must prove its tree empty and name no leftover.
      verified: reports.length === job.trees && reports.every((r) => r.verified === 'cgroup.events' && r.leftovers.length === 0),
      confinement: [...new Set(reports.map((r) => r.confinement))],
      signaled: reports.reduce((a, r) => a + r.signaled, 0),
      killed: reports.reduce((a, r) => a + r.killed, 0),
      escaped: reports.reduce((a, r) => a + r.escaped, 0),
      leftovers: reports.reduce((a, r) => a + r.leftovers.length, 0),
      reportDurationMs: summarize(durations),
      loop,
      errors,
    };
  } finally {
    // On a failure before the measured shutdown: stop the calls anyway.
    if (!shutDown) await Promise.race([sup.shutdown({ grace: 0 }).catch(() => {}), sleep(5000)]);
    if (calls.length) await Promise.race([Promise.all(calls.map((c) => c.closed)), sleep(5000)]);
    await harness.killStrays();
  }
}

/** kill(-pgid, 0) fails with ESRCH once no process (zombies included) is left in the group. */
function groupGone(pgid) {
  try {
    process.kill(-pgid, 0);
    return false;
  } catch (err) {
    if (err.code === 'ESRCH') return true;
    throw err;
  }
}

async function killpgTrial(job, ctx) {
  const { harness } = ctx;
  const [file, args] = treeArgv(job.perTree, job.lifetimeS);
  const dir = harness.openTrial();
  let children = [];
  try {
    // All trees born in one trial cgroup that none of them sees.
    children = harness.startInside(dir, () =>
      Array.from({ length: job.trees }, () => cp.spawn(file, args, { detached: true, stdio: 'ignore' })),
    );
    const errors = [];
    for (const c of children) c.on('error', (err) => errors.push(String(err?.message ?? err)));
    const { live, ready } = await waitReady(harness, job.trees * job.perTree, 30000);
    const groups = children.map((c) => c.pid);
    const groupSet = new Set(groups);
    const escapedAtStart = live.filter((p) => !groupSet.has(p.pgid)).length;
    // Our child holds its pid, and so the group's id, until node reaps it:
    // while it is unreaped the group cannot be someone else's.
    const unreaped = (c) => c.exitCode === null && c.signalCode === null;
    const signal = (c, sig) => {
      if (!unreaped(c)) {
        // Reaped: signal the group only if one of our processes is still in it.
        if (!liveMembers(dir).some((p) => p.pgid === c.pid)) return false;
      }
      try {
        process.kill(-c.pid, sig);
        return true;
      } catch (err) {
        if (err.code !== 'ESRCH') throw err;
        return false;
      }
    };
    const pending = new Set(children);
    const allGone = () => {
      for (const c of pending) if (groupGone(c.pid)) pending.delete(c);
      return pending.size === 0;
    };

    const t0 = performance.now();
    let termSent = 0;
    for (const c of children) if (signal(c, 'SIGTERM')) termSent += 1;
    let gone = await until(allGone, job.grace);
    let killSent = 0;
    if (!gone) {
      for (const c of pending) if (signal(c, 'SIGKILL')) killSent += 1;
      gone = await until(allGone, 5000);
    }
    const ms = performance.now() - t0;
    const survivors = harness.live();
    return {
      method: 'killpg',
      started: live.length,
      ready,
      escapedAtStart,
      ms,
      survivors: survivors.length,
      survivorStates: tally(survivors),
      // The loop's own goal: none of its groups has a live member left in the trial cgroup.
      verified: gone && !liveMembers(dir).some((p) => groupSet.has(p.pgid)),
      termSent,
      killSent,
      errors,
    };
  } finally {
    // The setsid'd survivors go with the trial cgroup (cgroup.kill).
    await harness.closeTrial(dir);
    await harness.killStrays();
  }
}

/**
 * The floor: the same trees, each born in a leaf of one trial cgroup (as
 * proctree's calls are leaves of its supervisor's subtree), stopped by
 * bench/c/cgkill: one cgroup.kill of the trial cgroup, populated 0, and an
 * rmdir per leaf. It measures itself, from the write to the last rmdir.
 */
async function floorTrial(job, ctx) {
  const { harness } = ctx;
  const [file, args] = treeArgv(job.perTree, job.lifetimeS);
  const dir = harness.openTrial();
  const leaves = Array.from({ length: job.trees }, (_, i) => path.join(dir, `l${i}`));
  try {
    for (const leaf of leaves) fs.mkdirSync(leaf);
    const children = leaves.map((leaf) => harness.startInside(leaf, () => cp.spawn(file, args, { stdio: 'ignore' })));
    const errors = [];
    for (const c of children) c.on('error', (err) => errors.push(String(err?.message ?? err)));
    const { live, ready } = await waitReady(harness, job.trees * job.perTree, 30000);
    const { stdout } = await execFile(ctx.bin.cgkill, [dir, ...leaves]);
    const r = JSON.parse(stdout);
    const survivors = harness.live();
    return {
      method: 'floor',
      started: live.length,
      ready,
      ms: r.killToEmptyMs + r.rmdirMs,
      killToEmptyMs: r.killToEmptyMs,
      rmdirMs: r.rmdirMs,
      cpuMs: r.cpuUserMs + r.cpuSysMs,
      survivors: survivors.length,
      survivorStates: tally(survivors),
      verified: r.emptied && r.rmdirFailed === 0,
      errors,
    };
  } finally {
    // Normally cgkill has done all this; after a failure it has not.
    cgroupKill(dir);
    await waitEmpty(dir, 5000);
    for (const leaf of leaves) {
      try {
        fs.rmdirSync(leaf);
      } catch (err) {
        if (err.code !== 'ENOENT') throw err;
      }
    }
    await harness.closeTrial(dir);
    await harness.killStrays();
  }
}

const TRIALS = { proctree: proctreeTrial, killpg: killpgTrial, floor: floorTrial };

export async function run(job, ctx) {
  const helpers = await settleHarnessHelpers(ctx.harness, which('true'));
  const samples = [];
  let seq = 0;
  for (let rep = 0; rep < job.reps; rep += 1) {
    for (let k = 0; k < job.methods.length; k += 1) {
      const m = job.methods[(k + rep) % job.methods.length];
      if (ctx.harness.live().length > 0) await ctx.harness.killStrays();
      const r = await TRIALS[m](job, ctx, (seq += 1));
      r.rep = rep;
      samples.push(r);
      ctx.progress(`${m} rep ${rep}: ${r.ms.toFixed(1)} ms, ${r.survivors}/${r.started} survivors${r.ready ? '' : ' (not ready)'}`);
    }
  }
  return { helpers, samples };
}

export function report(results, { job }) {
  const samples = results.flatMap((r) => r.samples);
  const sum = {};
  for (const m of job.methods) {
    const ss = samples.filter((s) => s.method === m);
    sum[m] = {
      ms: summarize(ss.map((s) => s.ms)),
      survivors: ss.reduce((a, s) => a + s.survivors, 0),
      started: ss.reduce((a, s) => a + s.started, 0),
      unverified: ss.filter((s) => !s.verified || !s.ready).length,
      escalated: ss.filter((s) => (s.killed ?? s.killSent ?? 0) > 0).length,
      n: ss.length,
    };
  }
  const has = (m) => job.methods.includes(m);
  const ratio = has('killpg') ? sum.killpg.ms.median / sum.proctree.ms.median : NaN;
  const timeCell = (s) => cell(s.ms) + (s.unverified ? ` ⚠ ${s.unverified} unverified` : '');
  const survCell = (s) => (s.survivors ? `**${s.survivors}/${s.started}**` : `0/${s.started}`);
  const header = ['calls × processes', ...job.methods.map((m) => `${LABEL[m]} (ms)`)];
  const row = [`${job.trees} × ${job.perTree}`, ...job.methods.map((m) => timeCell(sum[m]))];
  if (has('killpg')) {
    header.push('killpg loop / proctree');
    row.push(ratioCell(ratio));
  }
  if (has('floor')) {
    header.push('proctree / C floor');
    row.push(ratioCell(sum.proctree.ms.median / sum.floor.ms.median));
  }
  header.push(...job.methods.map((m) => `${LABEL[m]} survivors/started`));
  row.push(...job.methods.map((m) => survCell(sum[m])));

  // Issue 14: shutdown() against the cgroup.kill floor, and the loop meanwhile.
  const checks = [];
  const pt = samples.filter((s) => s.method === 'proctree');
  const floor = samples.filter((s) => s.method === 'floor');
  const loop = {
    own: summarize(pt.map((s) => s.loop?.longestOwnStallMs ?? NaN)),
    wall: summarize(pt.map((s) => s.loop?.longestStallMs ?? NaN)),
    p99: summarize(pt.map((s) => s.loop?.p99Ms ?? NaN)),
  };
  let floorText = '';
  if (floor.length) {
    const toEmpty = summarize(floor.map((s) => s.killToEmptyMs));
    const rmdir = summarize(floor.map((s) => s.rmdirMs));
    const v = sum.proctree.ms.median / sum.floor.ms.median;
    checks.push({
      issue: 29,
      name: 'issue29.shutdownVsCgroupKillFloor',
      value: v,
      pass: v <= 1.3 && sum.proctree.unverified === 0,
      text: `Supervisor.shutdown() of ${job.trees} calls × ${job.perTree} processes takes ${num(v)}× the C floor (one cgroup.kill, populated 0, ${job.trees} rmdirs): proctree ${cell(sum.proctree.ms)} ms vs floor ${cell(sum.floor.ms)} ms (required: ≤ 1.3×)`,
    });
    floorText = ` C floor: \`bench/c/cgkill\` on the same ${job.trees} trees, each started (\`child_process.spawn\`) in a leaf of one trial cgroup as proctree's calls are leaves of its supervisor's subtree: one write to that cgroup's \`cgroup.kill\` (every process gets SIGKILL), a wait for \`populated 0\` (inotify on \`cgroup.events\` and a 1 ms re-read), then an rmdir of each leaf; timed inside the program, from the write to the last rmdir: ${cell(toEmpty)} ms to \`populated 0\` plus ${cell(rmdir)} ms of rmdirs.`;
  }
  if (pt.length && pt.every((s) => s.loop)) {
    checks.push({
      issue: 14,
      name: 'issue14.shutdownLoopStall',
      value: loop.own.median,
      pass: loop.own.median <= 5,
      text: `longest event-loop stall during shutdown() of ${job.trees} × ${job.perTree}: ${cell(loop.own)} ms, runqueue waits excluded (wall ${cell(loop.wall)} ms; monitorEventLoopDelay p99 ${cell(loop.p99)} ms) (required: ≤ 5 ms)`,
    });
  }

  const escalated = job.methods
    .filter((m) => m !== 'floor')
    .map((m) => `${LABEL[m]} ${sum[m].escalated} of ${sum[m].n}`)
    .join(', ');
  const markdown = [
    `${job.trees} calls started at once, each \`bash -c 'for i in 1 … ${job.perTree - 1}; do setsid sleep ${job.lifetimeS} & done; exec sleep ${job.lifetimeS}'\`: ${job.perTree} processes, ${job.perTree - 1} of them in sessions of their own, all honouring SIGTERM, so the time is the mechanism's and not the grace's. ${job.reps} repetition(s) per method, rotating which goes first; the clock runs from the start of the stop to done. proctree: the calls in one \`Supervisor\` (\`maxConcurrent: ${job.trees}\`); done when \`shutdown({ grace: ${job.grace} })\` resolves, with every report verified (\`cgroup.events\`, no leftovers). killpg loop: the trees started with \`child_process.spawn\` (\`detached: true\`), \`process.kill(-pid, 'SIGTERM')\` for each, SIGKILL to the groups still there after ${job.grace} ms; done when \`kill(-pid, 0)\` fails with ESRCH for every group (polled every 1 ms).${floorText} Survivors: processes alive (not zombies) in the outer cgroup at that moment, summed over the repetitions; the bench then removes them with cgroup.kill.${ratio < 1 ? ' The killpg loop is done sooner because it ends only the processes still in its groups; the others are its survivors.' : ''} SIGKILL needed: ${escalated}.`,
    '',
    table(header, [row]),
    ...(pt.length && pt.every((s) => s.loop)
      ? [
          '',
          `Event loop while \`shutdown()\` runs (see [how the loop is watched](#how-it-measures)): longest stall ${cell(loop.own)} ms with the kernel's runqueue waits taken out, ${cell(loop.wall)} ms of wall time; \`monitorEventLoopDelay\` p99 ${cell(loop.p99)} ms.`,
        ]
      : []),
  ].join('\n');
  return { markdown, checks, summary: { ...sum, ratioKillpgToProctree: ratio, loop } };
}
