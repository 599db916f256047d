// 4. Throughput: N short calls (/bin/true) at concurrency 1, 8 and 64:
// calls/s and the harness's own CPU time per call, against child_process and
// the C floor; event-loop delay while 64 calls run. Issue 14's verdicts:
// calls/s at concurrency 8 against the C floor + cgroup, and the longest
// loop stall while 64 calls run.
import { execFileSync } from 'node:child_process';
import cp from 'node:child_process';

import { spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { watchLoop } from '../lib/loop.mjs';
import { methodColors } from '../lib/plot.mjs';
import { cell, num, ratioCell, summarize, table } from '../lib/stats.mjs';

export const title = 'Throughput of short calls';

const untilClose = (child) =>
  new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });

const STARTERS = {
  proctree: (file) => untilClose(proctreeSpawn(file, [], { stdio: 'ignore' })),
  child_process: (file) => untilClose(cp.spawn(file, [], { stdio: 'ignore' })),
};

async function pool(n, concurrency, one) {
  let next = 0;
  const lane = async () => {
    while (next < n) {
      next += 1;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
}

export async function run(job, ctx) {
  const file = which('true');
  const samples = [];
  const names = Object.keys(STARTERS);
  for (const m of names) await pool(20, 4, () => STARTERS[m](file)); // warm-up
  for (let rep = 0; rep < job.reps; rep += 1) {
    for (const concurrency of job.concurrency) {
      for (let k = 0; k < names.length; k += 1) {
        const m = names[(k + rep) % names.length];
        global.gc?.();
        const stopWatch = watchLoop();
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        await pool(job.calls, concurrency, () => STARTERS[m](file));
        const wallMs = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        const loop = stopWatch();
        samples.push({
          rep,
          concurrency,
          method: m,
          calls: job.calls,
          wallMs,
          callsPerSec: (job.calls / wallMs) * 1000,
          cpuMsPerCall: (cpu.user + cpu.system) / 1000 / job.calls,
          loopDelayP99Ms: loop.p99Ms,
          loopDelaySamples: loop.delaySamples,
          timerTicks: loop.timerTicks,
          longestStallMs: loop.longestStallMs,
          longestOwnStallMs: loop.longestOwnStallMs,
        });
        ctx.progress(`${m} c=${concurrency}: ${samples.at(-1).callsPerSec.toFixed(0)}/s`);
      }
      for (const [name, parent] of [
        ['C floor', '-'],
        ['C floor + cgroup', ctx.harness.harness],
      ]) {
        const out = execFileSync(ctx.bin.floor, [String(job.calls), String(concurrency), '0', parent, file]);
        const r = JSON.parse(out.toString());
        samples.push({
          rep,
          concurrency,
          method: name,
          calls: job.calls,
          wallMs: r.wallMs,
          callsPerSec: (job.calls / r.wallMs) * 1000,
          cpuMsPerCall: (r.cpuUserMs + r.cpuSysMs) / job.calls,
          loopDelayP99Ms: null,
          loopDelaySamples: null,
          timerTicks: null,
          longestStallMs: null,
          longestOwnStallMs: null,
        });
      }
    }
  }
  return { samples };
}

const ROWS = ['proctree', 'child_process', 'C floor', 'C floor + cgroup'];

export function report(results, { job }) {
  const samples = results.flatMap((r) => r.samples);
  const pick = (c, m, f) => summarize(samples.filter((s) => s.concurrency === c && s.method === m).map(f));
  const rate = (s) => s.callsPerSec;
  const cpu = (s) => s.cpuMsPerCall;
  const rows = job.concurrency.map((c) => [
    String(c),
    ...ROWS.map((m) => cell(pick(c, m, rate))),
    ratioCell(pick(c, 'proctree', rate).median / pick(c, 'child_process', rate).median),
    ...ROWS.map((m) => cell(pick(c, m, cpu))),
  ]);
  const header = [
    'concurrency',
    ...ROWS.map((m) => `${m} calls/s`),
    'proctree / child_process (calls/s)',
    ...ROWS.map((m) => `${m} CPU ms/call`),
  ];
  const top = Math.max(...job.concurrency);
  const atTop = (m) => samples.filter((s) => s.concurrency === top && s.method === m);
  const delayRows = ['proctree', 'child_process'].map((m) => {
    const ss = atTop(m);
    const p99 = summarize(ss.map((s) => s.loopDelayP99Ms ?? NaN));
    return [
      m,
      p99.n ? cell(p99) : 'no sample',
      ss.map((s) => s.loopDelaySamples).join(', '),
      cell(summarize(ss.map((s) => s.longestStallMs))),
      cell(summarize(ss.map((s) => s.longestOwnStallMs ?? NaN))),
      ss.map((s) => s.timerTicks).join(', '),
      cell(summarize(ss.map((s) => s.wallMs))),
    ];
  });
  const plotData = [];
  for (const c of job.concurrency) {
    for (const m of ROWS) {
      const s = pick(c, m, rate);
      if (s.n) plotData.push({ method: m, concurrency: String(c), median: s.median, min: s.min, max: s.max });
    }
  }
  const color = { field: 'method', type: 'nominal', scale: methodColors(ROWS), title: null };
  const plot = {
    data: { values: plotData },
    width: 420,
    height: 260,
    encoding: {
      x: { field: 'concurrency', type: 'ordinal', sort: job.concurrency.map(String), title: 'concurrency' },
      xOffset: { field: 'method', sort: ROWS },
      color,
    },
    layer: [
      { mark: 'bar', encoding: { y: { field: 'median', type: 'quantitative', title: `calls/s (${job.calls} × /bin/true; bar = min–max)` } } },
      { mark: { type: 'rule', color: 'black' }, encoding: { y: { field: 'min', type: 'quantitative' }, y2: { field: 'max' } } },
    ],
    title: 'Throughput of short calls',
  };
  const markdown = [
    `${job.calls} calls of /bin/true (stdio ignored) per run, ${job.reps} run(s) per cell; a call counts as done at 'close' (proctree: its cgroup empty and removed). CPU is the harness process's own user+system time (process.cpuUsage; the C floor: getrusage), children excluded. The C floor keeps the same number of clone3 children in flight and waits for them as an event loop must (their pidfds in one epoll set, then waitid); its CPU is counted over its loop only.`,
    '',
    table(header, rows),
    '',
    `Event loop while ${top} calls run (see [how the loop is watched](#how-it-measures)). p99 from \`monitorEventLoopDelay({ resolution: 1 })\`, which only records when its own timer gets to run; "longest stall" is the longest gap between ticks of a 1 ms \`setInterval\` over the same run (the run's start and end included), which also shows a loop that never got back to its timers; "less runqueue waits" takes out of each gap the time the kernel kept the loop's thread waiting for a CPU while other work ran.`,
    '',
    table(
      ['method', 'p99 delay (ms)', 'delay samples per run', 'longest stall (ms)', 'longest stall less runqueue waits (ms)', 'interval ticks per run', 'run wall time (ms)'],
      delayRows,
    ),
  ].join('\n');

  // Issue 14: concurrency 8 against the C floor + cgroup, and the loop at the top concurrency.
  const checks = [];
  if (job.concurrency.includes(8)) {
    const pt = pick(8, 'proctree', rate);
    const fl = pick(8, 'C floor + cgroup', rate);
    const v = pt.median / fl.median;
    checks.push({
      issue: 29,
      name: 'issue29.callsPerSecAt8',
      value: v,
      pass: v >= 0.8,
      text: `calls/s at concurrency 8 (/bin/true, stdio ignored, to 'close'): ${num(v)}× the C floor + cgroup: proctree ${cell(pt)} vs floor ${cell(fl)} calls/s (required: ≥ 0.8×)`,
    });
  }
  const own = summarize(atTop('proctree').map((s) => s.longestOwnStallMs ?? NaN));
  if (top === 64 && own.n) {
    checks.push({
      issue: 14,
      name: 'issue14.loopStallWhile64Run',
      value: own.median,
      pass: own.median <= 10,
      text: `longest event-loop stall while 64 calls run (${job.calls} calls at concurrency 64): ${cell(own)} ms, runqueue waits excluded (wall ${cell(summarize(atTop('proctree').map((s) => s.longestStallMs)))} ms; monitorEventLoopDelay p99 ${cell(summarize(atTop('proctree').map((s) => s.loopDelayP99Ms ?? NaN)))} ms) (required: ≤ 10 ms)`,
    });
  }
  return {
    markdown,
    checks,
    plots: [{ file: 'throughput.svg', title: 'Throughput of short calls', spec: plot }],
    summary: Object.fromEntries(
      job.concurrency.map((c) => [c, Object.fromEntries(ROWS.map((m) => [m, { callsPerSec: pick(c, m, rate), cpuMsPerCall: pick(c, m, cpu) }]))]),
    ),
  };
}
