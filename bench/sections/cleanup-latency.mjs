// 3. Cleanup latency: from the start of cleanup to the tree's cgroup verified
// empty (cgroup.events populated 0), for trees of 1 to 1000 processes that
// honour SIGTERM, and trees that ignore it (so: grace, then SIGKILL).
// Issue 14: terminate() of the 1000-process tree against killpg on the same
// tree, and the event loop watched while proctree's terminate() runs.
import fs from 'node:fs';

import { liveMembers } from '../lib/cgroup.mjs';
import { waitEmpty, which } from '../lib/harness.mjs';
import { watchLoop } from '../lib/loop.mjs';
import { METHODS, settleHarnessHelpers } from '../lib/methods.mjs';
import { methodColors } from '../lib/plot.mjs';
import { cell, num, ratioCell, sleep, summarize, table } from '../lib/stats.mjs';

export const title = 'Cleanup latency vs tree size';

const FANOUT = 10;
// The worker-thread control (methods.mjs), and the margin the issue's gap
// goal had over its own control: 5 ms against 4.1 ms.
const WORKER = 'proctree (worker)';
const CONTROL_MARGIN = 5 / 4.1;
const SIGTERM_BIT = 1n << 14n; // bit (signal number − 1) of /proc/<pid>/status masks

function ignoresTerm(pid) {
  try {
    const m = /^SigIgn:\s*([0-9a-f]+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m !== null && (BigInt(`0x${m[1]}`) & SIGTERM_BIT) !== 0n;
  } catch {
    return false;
  }
}

/**
 * Waits until the whole tree exists and, for `ignore`, every member already
 * ignores SIGTERM: a signal that lands before the program set SIG_IGN would
 * end it early and make the tree look like one that honours TERM.
 */
async function waitTree(dir, size, mode, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const live = liveMembers(dir);
    const ready = live.length >= size && (mode !== 'ignore' || live.every((p) => ignoresTerm(p.pid)));
    if (ready || Date.now() > deadline) return { live, ready };
    await sleep(2);
  }
}

async function trial(size, mode, methodName, job, ctx) {
  const { harness } = ctx;
  const Method = METHODS[methodName];
  const started = performance.now();
  const handle = await Method.start(harness, ctx.bin.tree, ['tree', String(size), String(FANOUT), mode], {
    grace: job.grace,
  });
  try {
    const { live, ready } = await waitTree(handle.treeDir, size, mode, 20000);
    // The loop is watched for every method: a baseline's stalls show what
    // the scheduler alone does to a loop while the tree's processes exit.
    const stopWatch = watchLoop();
    const t0 = performance.now();
    if (Method.stopsItself) {
      await handle.cleanup(job.grace);
    } else {
      // Baselines escalate only if the tree is still populated when grace
      // runs out (the bench's cgroup tells them, which they could not know
      // on their own: this favours them).
      await handle.cleanup(job.grace, () => waitEmpty(handle.treeDir, 60000));
    }
    const verified = await waitEmpty(handle.treeDir, 30000);
    const ms = performance.now() - t0;
    const loop = stopWatch();
    return {
      size,
      mode,
      method: methodName,
      started: live.length,
      // From the method's start call to the start of cleanup.
      startToCleanupMs: t0 - started,
      ready,
      ms,
      verified,
      left: harness.live().length,
      reportMs: handle.report?.durationMs ?? null,
      loop,
    };
  } finally {
    await handle.close();
    await harness.killStrays();
  }
}

export async function run(job, ctx) {
  const helpers = await settleHarnessHelpers(ctx.harness, which('true'));
  const samples = [];
  for (const size of job.sizes) {
    for (const mode of job.modes) {
      for (let rep = 0; rep < job.reps[size]; rep += 1) {
        for (let k = 0; k < job.methods.length; k += 1) {
          const m = job.methods[(k + rep) % job.methods.length];
          if (job.skip?.[m]?.includes(size)) continue;
          const r = await trial(size, mode, m, job, ctx);
          samples.push(r);
          if (size >= 100) ctx.progress(`${size} ${mode} ${m}: ${r.ms.toFixed(1)} ms, ${r.started} started`);
        }
      }
      ctx.progress(`${size} ${mode} done`);
    }
  }
  return { helpers, samples };
}

const MODE_LABEL = {
  term: 'tree honours SIGTERM',
  ignore: 'tree ignores SIGTERM (grace, then SIGKILL)',
};

export function report(results, { job }) {
  const samples = results.flatMap((r) => r.samples);
  const methods = job.methods;
  const sum = {};
  for (const mode of job.modes) {
    sum[mode] = {};
    for (const size of job.sizes) {
      sum[mode][size] = {};
      for (const m of methods) {
        const ss = samples.filter((s) => s.mode === mode && s.size === size && s.method === m);
        sum[mode][size][m] = { ...summarize(ss.map((s) => s.ms)), unverified: ss.filter((s) => !s.verified || s.left > 0).length };
      }
    }
  }
  const header = ['tree', 'processes', ...methods.map((m) => `${METHODS[m].label} (ms)`)];
  const others = methods.filter((m) => m !== 'proctree');
  header.push(...others.map((m) => `${METHODS[m].label} / proctree`));
  const rows = [];
  for (const mode of job.modes) {
    for (const size of job.sizes) {
      const s = sum[mode][size];
      rows.push([
        mode === 'term' ? 'honours TERM' : 'ignores TERM',
        String(size),
        ...methods.map((m) =>
          job.skip?.[m]?.includes(size) ? 'not run¹' : cell(s[m]) + (s[m].unverified ? ` ⚠ ${s[m].unverified} left processes` : ''),
        ),
        ...others.map((m) => ratioCell(s[m].median / s.proctree?.median)),
      ]);
    }
  }
  const plotData = [];
  for (const mode of job.modes) {
    for (const size of job.sizes) {
      for (const m of methods) {
        const s = sum[mode][size][m];
        if (s.n) plotData.push({ method: METHODS[m].label, mode: MODE_LABEL[mode], size, median: s.median, min: s.min, max: s.max });
      }
    }
  }
  const color = { field: 'method', type: 'nominal', scale: methodColors(methods.map((m) => METHODS[m].label)), title: null };
  const x = {
    field: 'size',
    type: 'quantitative',
    scale: { type: 'log', domain: [Math.min(...job.sizes) * 0.8, Math.max(...job.sizes) * 1.25], nice: false },
    title: 'processes in the tree (log)',
  };
  const plot = {
    data: { values: plotData },
    facet: { column: { field: 'mode', type: 'nominal', title: null } },
    spec: {
      width: 320,
      height: 260,
      layer: [
        { mark: { type: 'rule', opacity: 0.5 }, encoding: { x, y: { field: 'min', type: 'quantitative' }, y2: { field: 'max' }, color } },
        {
          mark: { type: 'line', point: true },
          encoding: {
            x,
            y: { field: 'median', type: 'quantitative', scale: { type: 'log' }, title: 'ms to verified empty (log; bar = min–max)' },
            color,
          },
        },
      ],
    },
    title: 'Cleanup latency vs tree size',
  };
  // Issue 14: the largest tree that honours TERM.
  const checks = [];
  const big = Math.max(...job.sizes);
  const bigTerm = sum.term?.[big];
  const loopOf = (mode, size, f, m = 'proctree') =>
    summarize(samples.filter((s) => s.method === m && s.mode === mode && s.size === size).map((s) => s.loop?.[f] ?? NaN));
  if (big >= 1000 && bigTerm?.proctree?.n && bigTerm.killpg?.n) {
    if (bigTerm['cgroup.kill']?.n) {
      const f = bigTerm.proctree.median / bigTerm['cgroup.kill'].median;
      checks.push({
        issue: 29,
        name: 'issue29.terminate1000VsCgroupKill',
        value: f,
        pass: f <= 1.2 && !bigTerm.proctree.unverified,
        text: `terminate() of a ${big}-process tree (honours TERM) to verified empty takes ${num(f)}× the kernel's floor (one cgroup.kill and the wait for the exits): proctree ${cell(bigTerm.proctree)} ms vs ${cell(bigTerm['cgroup.kill'])} ms (required: ≤ 1.2×)`,
      });
    }
    const wallStall = loopOf('term', big, 'longestStallMs');
    const control = loopOf('term', big, 'longestStallMs', WORKER);
    const controlText = control.n
      ? `; the control, the same terminate() on a worker thread with this thread only watching its loop, ${cell(control)} ms`
      : '';
    checks.push({
      issue: 29,
      name: 'issue29.terminate1000LoopGap',
      value: wallStall.median,
      pass: wallStall.median <= 5,
      text: `longest gap between ticks of a 1 ms setInterval while terminate() stops a ${big}-process tree, as a harness sees it (runqueue waits included): ${cell(wallStall)} ms; of that, the process's own (runqueue waits excluded) ${cell(loopOf('term', big, 'longestOwnStallMs'))} ms${controlText} (required: ≤ 5 ms)`,
    });
    if (control.n) {
      // The issue set 5 ms where its worker-thread control gave 4.1 ms: on a
      // machine whose scheduler alone stalls a loop longer, the goal is the
      // same margin over this machine's control.
      const f = wallStall.median / control.median;
      checks.push({
        issue: 29,
        name: 'issue29.terminate1000LoopGapVsControl',
        value: f,
        pass: f <= CONTROL_MARGIN,
        text: `the same gap against its control on this machine (the same terminate() on a worker thread; what the scheduler alone does to a loop while the tree exits): ${num(f)}× (${cell(wallStall)} ms vs ${cell(control)} ms) (required: ≤ ${num(CONTROL_MARGIN)}×, the margin of the 5 ms goal over the 4.1 ms control it was set against)`,
      });
    }
    const own = loopOf('term', big, 'longestOwnStallMs');
    checks.push({
      issue: 14,
      name: 'issue14.terminate1000LoopStall',
      value: own.median,
      pass: own.median <= 5,
      text: `longest event-loop stall while terminate() stops a ${big}-process tree: ${cell(own)} ms, runqueue waits excluded (wall ${cell(loopOf('term', big, 'longestStallMs'))} ms, killpg's on the same tree ${cell(loopOf('term', big, 'longestStallMs', 'killpg'))} ms; monitorEventLoopDelay p99 ${cell(loopOf('term', big, 'p99Ms'))} ms) (required: ≤ 5 ms)`,
    });
  }
  const stallRows = [];
  for (const mode of job.modes) {
    for (const size of job.sizes) {
      stallRows.push([
        mode === 'term' ? 'honours TERM' : 'ignores TERM',
        String(size),
        ...methods.flatMap((m) =>
          job.skip?.[m]?.includes(size)
            ? ['not run', 'not run']
            : [cell(loopOf(mode, size, 'longestOwnStallMs', m)), cell(loopOf(mode, size, 'longestStallMs', m))],
        ),
        cell(loopOf(mode, size, 'p99Ms')),
      ]);
    }
  }
  const stallHeader = [
    'tree',
    'processes',
    ...methods.flatMap((m) => [`${METHODS[m].label}: less runqueue waits (ms)`, `${METHODS[m].label}: wall (ms)`]),
    'proctree: monitorEventLoopDelay p99 (ms)',
  ];
  const reps = job.sizes.map((s) => `${job.reps[s]} at ${s}`).join(', ');
  const startToCleanup = job.sizes
    .map((size) => {
      const ss = samples.filter((s) => s.method === 'proctree' && s.mode === 'term' && s.size === size);
      return `${num(summarize(ss.map((s) => s.startToCleanupMs)).median)} ms at ${size}`;
    })
    .join(', ');
  const markdown = [
    `From the start of cleanup to the tree's cgroup verified empty (cgroup.events \`populated 0\`). Trees of fan-out ${FANOUT}, all processes waiting in pause(); repetitions: ${reps}. Grace ${job.grace} ms. proctree: \`terminate({ grace })\`, which resolves once its own ladder saw the cgroup empty. killpg and tree-kill: SIGTERM, then SIGKILL if the tree is still populated when grace runs out (the bench tells them, which favours them), then the bench waits for \`populated 0\` of the trial cgroup they were started in, polling every 1 ms besides inotify. cgroup.kill (floor): one write of \`cgroup.kill\` on that trial cgroup at once (SIGKILL to every member, no grace), then the same wait: what the kernel needs to empty the tree at all, however it is signalled; a tree whose members keep SIGTERM's default action dies from SIGTERM on the same path as from SIGKILL. proctree's ladder signals each member through a pidfd (a pass over more than 128 members runs on a thread of proctree's own, off the event loop), then, unless the tree dies of that first (it polls emptiness while the first members signalled exit), freezes it, signals those a complete read finds not yet signalled, and thaws; it sees the tree empty when the main process and the members it signalled exit (it watches the pidfds of the first 8 it signalled; once those have exited, the tree is dying, and it re-reads \`cgroup.events\` every 1 ms, at most 64 times, besides the file's inotify events). A freeze completes a moment after the write (each member has to run to stop, and a dying one to exit); the kernel sends the \`frozen\` notification of \`cgroup.events\` at most once per file per \`CGROUP_FILE_NOTIFY_MIN_INTV\` (10 ms, rounded up to jiffies) and has often just sent one for the call's start (\`populated 1\`), so the ladder also re-reads the file at 1, 2, 4 … ms while it waits. The bench starts cleanup as soon as the whole tree exists (median time from start to cleanup, proctree, honours TERM: ${startToCleanup}).`,
    '',
    table(header, rows),
    ...(Object.keys(job.skip ?? {}).length
      ? [
          '',
          `¹ Not run: ${Object.entries(job.skip)
            .map(([m, sizes]) => `${METHODS[m].label} at ${sizes.join(', ')}`)
            .join('; ')}. tree-kill runs one \`ps --ppid\` per process of the tree, nearly all at once, each reading all of /proc, so its time grows faster than the tree (a full run shows 10 and 100); at 1000 processes one repetition takes tens of seconds.`,
        ]
      : []),
    '',
    `Longest event-loop stall over the same stretch, from the start of cleanup to verified empty (see [how the loop is watched](#how-it-measures)). proctree's loop runs its ladder; the control's loop runs nothing of the stop (a worker thread of the same process runs the same terminate()); a baseline's loop reads its tree's members from /proc once (the bench's check that the process group is still its own), sends one signal to the group and runs the bench's wait for \`populated 0\` (a 1 ms poll), so its wall stalls show what a thousand processes woken at once do to any loop through the scheduler:`,
    '',
    table(stallHeader, stallRows),
  ].join('\n');
  return {
    markdown,
    checks,
    plots: [{ file: 'cleanup-latency.svg', title: 'Cleanup latency vs tree size', spec: plot }],
    summary: sum,
  };
}
