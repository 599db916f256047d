// 5. Memory: what each live call costs the harness (heap, RSS, file
// descriptors) with N idle calls (sleep) open at once. One worker per method,
// so neither inherits the other's heap.
import cp from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';

import { spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { num, table } from '../lib/stats.mjs';

export const title = 'Memory per live call';

const STARTERS = {
  // The default stdio ('pipe' for all three) of both APIs: what a harness
  // capturing output holds per call.
  proctree: (file, args) => proctreeSpawn(file, args),
  child_process: (file, args) => cp.spawn(file, args),
};

function snapshot() {
  global.gc?.();
  global.gc?.();
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, external: m.external, rss: m.rss, fds: fs.readdirSync('/proc/self/fd').length };
}

export async function run(job, ctx) {
  const sleep = which('sleep');
  const start = STARTERS[job.method];
  // One call first, so that what is set up once per harness is not counted.
  const first = start(sleep, ['0']);
  await once(first, 'close');
  await new Promise((r) => setTimeout(r, 100));
  ctx.harness.recordHelpers();
  const before = snapshot();
  const calls = [];
  const t0 = performance.now();
  for (let i = 0; i < job.calls; i += 1) {
    const c = start(sleep, ['120']);
    calls.push({ child: c, spawned: once(c, 'spawn'), closed: once(c, 'close') });
  }
  await Promise.all(calls.map((c) => c.spawned));
  const spawnAllMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 200));
  const after = snapshot();
  const live = ctx.harness.live().length;

  const t1 = performance.now();
  if (job.method === 'proctree') await Promise.all(calls.map((c) => c.child.terminate({ grace: 0 })));
  else for (const c of calls) c.child.kill('SIGKILL');
  await Promise.all(calls.map((c) => c.closed));
  const stopAllMs = performance.now() - t1;
  return { method: job.method, calls: job.calls, live, before, after, spawnAllMs, stopAllMs };
}

export function report(results, { job }) {
  const rows = results.map((r) => {
    const per = (k) => (r.after[k] - r.before[k]) / r.calls;
    return [
      r.method,
      String(r.live),
      num(per('heapUsed') / 1024),
      num(per('external') / 1024),
      num(per('rss') / 1024),
      num(per('fds')),
      num(r.spawnAllMs),
      num(r.stopAllMs),
    ];
  });
  const markdown = [
    `${job.calls} idle calls (\`sleep 120\`, default stdio: three pipes) open at once; per-call cost = (after − before) / ${job.calls}, each side after two forced GCs, one method per fresh worker. "live" is the count of processes seen in the outer cgroup while they were open. Stop: proctree \`terminate({ grace: 0 })\` on all, child_process \`kill('SIGKILL')\` on all, until every 'close'.`,
    '',
    table(['method', 'live', 'heap KiB/call', 'external KiB/call', 'RSS KiB/call', 'fds/call', `start all (ms)`, `stop all (ms)`], rows),
  ].join('\n');
  return { markdown, summary: results };
}
