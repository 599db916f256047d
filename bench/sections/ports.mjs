// What asking "what does this tree listen on" costs (issue 28): call.ports()
// on a tree of 100 processes with 10 listening TCP sockets, and the `ready`
// option's wait for a port that never comes.
//
// - ports(): each call's wall time (the answer comes from the addon's ports
//   thread), the JS thread's share of it (the synchronous part of the call,
//   and the longest own stall of the loop over all of them), and the whole
//   process's CPU per call (both threads).
// - ready polling: the harness's CPU per second while a background call waits
//   for `ready: { listening: true }` that never comes, against the same
//   harness idle for as long (the polls back off; no busy loop).
import { run as proctreeRun, spawn } from 'proctree';

import { watchDuring } from '../lib/loop.mjs';
import { cell, num, sleep, summarize, table } from '../lib/stats.mjs';

export const title = 'ports() and ready polling';

// The main process forks the rest; the first `listeners` children listen.
const TREE = String.raw`
import os, socket, sys, time
listeners, total, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for i in range(total - 1):
    if os.fork() == 0:
        if i < listeners:
            s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
        time.sleep(secs); os._exit(0)
time.sleep(secs)
`;

function cpuMs() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

async function until(check, what, ms = 30_000) {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await check()) return;
    await sleep(20);
  }
  throw new Error(`never: ${what}`);
}

async function portsCost(job, ctx) {
  const call = spawn('python3', ['-c', TREE, String(job.listeners), String(job.processes), '600'], { stdio: 'ignore' });
  call.on('error', () => {});
  // proctree's guardian, started by the first call, is the harness's, not a call's.
  ctx.harness.recordHelpers();
  try {
    await until(async () => call.members().length === job.processes && (await call.ports()).length === job.listeners, 'the tree up');
    const wall = [];
    const sync = [];
    const cpu = [];
    const { loop } = await watchDuring(async () => {
      for (let i = 0; i < job.queries; i += 1) {
        const c0 = cpuMs();
        const t0 = performance.now();
        const p = call.ports();
        sync.push(performance.now() - t0);
        const list = await p;
        wall.push(performance.now() - t0);
        cpu.push(cpuMs() - c0);
        if (list.length !== job.listeners) throw new Error(`ports() gave ${list.length} listeners, not ${job.listeners}`);
        // The loop gets a turn between questions, as in a harness.
        await new Promise((r) => setImmediate(r));
      }
    });
    ctx.progress(`ports() ×${job.queries}`);
    return { wall, sync, cpu, loop };
  } finally {
    await call.terminate({ grace: 0 });
  }
}

async function readyCost(job) {
  // The same harness idle for as long, first: what a waiting call adds to it.
  const c0 = cpuMs();
  await sleep(job.readyWaitMs);
  const idle = cpuMs() - c0;
  const c1 = cpuMs();
  const t1 = performance.now();
  const r = await proctreeRun('sleep', ['600'], { background: true, ready: { listening: true, timeout: job.readyWaitMs } });
  const waitedMs = performance.now() - t1;
  const waiting = cpuMs() - c1;
  return { idleCpuMs: idle, waitingCpuMs: waiting, waitedMs, reason: r.cleanup?.reason ?? null };
}

export async function run(job, ctx) {
  return { ports: await portsCost(job, ctx), ready: await readyCost(job), left: ctx.harness.live().length };
}

export function report(results, { job: cfg }) {
  const r = results[0];
  const wall = summarize(r.ports.wall);
  const sync = summarize(r.ports.sync);
  const cpu = summarize(r.ports.cpu);
  const perSec = (ms) => (ms / r.ready.waitedMs) * 1000;
  const rows = [
    ['ports(): wall per call (ms)', cell(wall)],
    ['ports(): JS thread, the synchronous part (ms)', cell(sync)],
    ['ports(): CPU per call, every thread of the harness (ms)', cell(cpu)],
    ['ports(): longest own loop stall over all calls (ms)', num(r.ports.loop.longestOwnStallMs ?? r.ports.loop.longestStallMs)],
    ['ready polling: harness CPU per second of waiting (ms/s)', num(perSec(r.ready.waitingCpuMs))],
    ['the same harness idle (ms/s)', num(perSec(r.ready.idleCpuMs))],
  ];
  const markdown = [
    `A tree of ${cfg.processes} processes with ${cfg.listeners} listening TCP sockets, asked ${r.ports.wall.length} times one after another; then a background call waiting ${num(r.ready.waitedMs)} ms for \`ready: { listening: true }\` that never comes (it ended with \`${r.ready.reason}\`), against the harness idle as long. Processes left after the runs: ${r.left}.`,
    '',
    table(['', 'median (min–max)'], rows),
  ].join('\n');
  const stall = r.ports.loop.longestOwnStallMs ?? r.ports.loop.longestStallMs;
  const pollCost = perSec(r.ready.waitingCpuMs - r.ready.idleCpuMs);
  const checks = [
    {
      issue: 28,
      name: 'issue28.portsCost',
      value: cpu.median,
      pass: cpu.median <= 5 && stall <= 5,
      text: `ports() on a tree of ${cfg.processes} with ${cfg.listeners} listeners: ${cell(cpu)} ms CPU per call (every thread), ${cell(wall)} ms wall, the loop's longest own stall ${num(stall)} ms (required: a few ms at most: ≤ 5 ms CPU and ≤ 5 ms of stall)`,
    },
    {
      issue: 28,
      name: 'issue28.readyPollingCost',
      value: pollCost,
      pass: pollCost <= 50,
      text: `ready polling for a port that never comes: ${num(pollCost)} ms of harness CPU per second of waiting above the idle harness (required: no busy loop: ≤ 50 ms/s, 5 % of a core)`,
    },
  ];
  return { markdown, checks, summary: { wall, sync, cpu, loop: r.ports.loop, ready: r.ready } };
}
