// 4. Throughput: N short calls (/bin/true) at concurrency 1, 8 and 64:
// calls/s and the harness's own CPU time per call, against child_process and
// the C floor; event-loop delay while 64 calls run.
import { execFileSync } from 'node:child_process';
import cp from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';

import { spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { methodColors } from '../lib/plot.mjs';
import { cell, ratioCell, summarize, table } from '../lib/stats.mjs';

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

/**
 * A 1 ms interval whose ticks show how long the loop went without reaching
 * its timers phase. monitorEventLoopDelay cannot show a stall that lasts the
 * whole measurement: it records only when its own timer runs.
 */
function loopProbe() {
  const ticks = [performance.now()];
  const timer = setInterval(() => ticks.push(performance.now()), 1);
  return () => {
    clearInterval(timer);
    ticks.push(performance.now());
    const gaps = ticks.slice(1).map((t, i) => t - ticks[i]);
    return { timerTicks: ticks.length - 2, longestStallMs: Math.max(...gaps) };
  };
}

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
        const delay = monitorEventLoopDelay({ resolution: 1 });
        delay.enable();
        const stopProbe = loopProbe();
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        await pool(job.calls, concurrency, () => STARTERS[m](file));
        const wallMs = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        delay.disable();
        const probe = stopProbe();
        samples.push({
          rep,
          concurrency,
          method: m,
          calls: job.calls,
          wallMs,
          callsPerSec: (job.calls / wallMs) * 1000,
          cpuMsPerCall: (cpu.user + cpu.system) / 1000 / job.calls,
          loopDelayP99Ms: delay.count > 0 ? delay.percentile(99) / 1e6 : null,
          loopDelaySamples: delay.count,
          ...probe,
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
    `${job.calls} calls of /bin/true (stdio ignored) per run, ${job.reps} run(s) per cell; a call counts as done at 'close' (proctree: its cgroup empty and removed). CPU is the harness process's own user+system time (process.cpuUsage; the C floor: getrusage), children excluded. The C floor keeps the same number of clone3 children in flight.`,
    '',
    table(header, rows),
    '',
    `Event loop while ${top} calls run. p99 from \`monitorEventLoopDelay({ resolution: 1 })\`, which only records when its own timer gets to run; "longest stall" is the longest gap between ticks of a 1 ms \`setInterval\` over the same run (the run's start and end included), which also shows a loop that never got back to its timers.`,
    '',
    table(['method', 'p99 delay (ms)', 'delay samples per run', 'longest stall (ms)', 'interval ticks per run', 'run wall time (ms)'], delayRows),
  ].join('\n');
  return {
    markdown,
    plots: [{ file: 'throughput.svg', title: 'Throughput of short calls', spec: plot }],
    summary: Object.fromEntries(
      job.concurrency.map((c) => [c, Object.fromEntries(ROWS.map((m) => [m, { callsPerSec: pick(c, m, rate), cpuMsPerCall: pick(c, m, cpu) }]))]),
    ),
  };
}
