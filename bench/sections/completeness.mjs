// 1. Completeness: how many processes of each escape scenario are still alive
// after each method's cleanup finished, counted by membership of the outer
// cgroup (so no method can hide a survivor) and excluding zombies.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { METHODS, settleHarnessHelpers } from '../lib/methods.mjs';
import { which } from '../lib/harness.mjs';
import { sleep, table } from '../lib/stats.mjs';

export const title = 'Completeness: survivors after cleanup';

// The reference's section 2, each as the idiom a real tool call would use.
// Every process sleeps a bounded time, so a bench killed midway leaves
// nothing running for long.
function scenarios(ctx) {
  const sh = which('sh');
  const bash = which('bash');
  const countFile = path.join(os.tmpdir(), `proctree-bench-forks-${process.pid}`);
  return [
    {
      id: 'double-fork+setsid',
      argv: [sh, ['-c', '(setsid sleep 120 &); exec sleep 120']],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 2,
    },
    {
      id: 'setpgid (job control)',
      argv: [bash, ['-c', 'set -m; sleep 120 & exec sleep 120']],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 2,
    },
    {
      id: 'nohup+disown',
      argv: [bash, ['-c', 'nohup sleep 120 >/dev/null 2>&1 & disown; exec sleep 120']],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 2,
    },
    {
      id: 'TERM ignored',
      argv: [sh, ['-c', "trap '' TERM; sleep 120 & exec sleep 120"]],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 2,
    },
    {
      id: '20-deep setsid chain',
      argv: [ctx.bin.tree, ['chain', '20']],
      started: () => 21,
      ready: (live) => count(live, 'tree') === 21,
    },
    {
      // Cleanup starts while the forker is still at it (bounded: at most
      // 400 children, for at most 3 s).
      id: 'fork every 2 ms',
      argv: [ctx.bin.tree, ['forker', '2000', '400', '3000', countFile]],
      before: () => fs.rmSync(countFile, { force: true }),
      started: () => 2 + Number(fs.readFileSync(countFile, 'utf8').trim() || 0),
      after: () => fs.rmSync(countFile, { force: true }),
      ready: (live) => live.length >= 40,
    },
    {
      id: 'main exits leaving a daemon',
      argv: [sh, ['-c', '(sleep 120 &); exit 0']],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 1,
      mainExits: true,
    },
    {
      id: 'SIGSTOPped escapee',
      argv: [sh, ['-c', `(setsid sh -c 'kill -STOP $$; exec sleep 120' &); exec sleep 120`]],
      started: () => 2,
      ready: (live) => count(live, 'sleep') === 1 && live.some((p) => p.comm === 'sh' && p.state === 'T'),
    },
  ];
}

const count = (live, comm) => live.filter((p) => p.comm === comm).length;

async function waitReady(sc, handle, harness) {
  const deadline = Date.now() + 3000;
  let exitedAt = 0;
  // Every scenario is ready when the processes it is about exist in their
  // final shape (not while the shell that makes them is still forking).
  for (;;) {
    const live = harness.live();
    const mainOk = !sc.mainExits || handle.hasExited();
    if (mainOk && sc.ready(live)) return true;
    if (sc.mainExits && handle.hasExited()) {
      // proctree may already be stopping the leftovers: do not wait for them.
      exitedAt ||= Date.now();
      if (Date.now() - exitedAt > 200) return true;
    }
    if (Date.now() > deadline) return false;
    await sleep(5);
  }
}

async function trial(sc, methodName, job, ctx) {
  const { harness } = ctx;
  if (harness.live().length > 0) await harness.killStrays();
  sc.before?.();
  const Method = METHODS[methodName];
  const [file, args] = sc.argv;
  const handle = Method.start(harness, file, args, { grace: job.grace });
  try {
    const ready = await waitReady(sc, handle, harness);
    const atStart = harness.live().length;
    const t0 = performance.now();
    await handle.cleanup(job.grace);
    const cleanupMs = performance.now() - t0;
    // The same settle time for every method: SIGKILLed processes need a
    // moment to be gone from the cgroup.
    await sleep(job.settleMs);
    const survivors = harness.live();
    const started = sc.started();
    const report = handle.report
      ? { signaled: handle.report.signaled, killed: handle.report.killed, escaped: handle.report.escaped, leftovers: handle.report.leftovers.length }
      : null;
    return {
      scenario: sc.id,
      method: methodName,
      started,
      ready,
      aliveAtCleanupStart: atStart,
      survivors: survivors.length,
      survivorComms: survivors.map((p) => `${p.comm}:${p.state}`),
      cleanupMs,
      report,
      errors: (handle.errors ?? []).map((e) => String(e.message ?? e)),
    };
  } finally {
    await handle.close();
    await harness.killStrays();
    sc.after?.();
  }
}

export async function run(job, ctx) {
  const trials = [];
  const list = scenarios(ctx);
  const helpers = await settleHarnessHelpers(ctx.harness, which('true'));
  for (let rep = 0; rep < job.reps; rep += 1) {
    for (const sc of list) {
      // Rotate the order of methods between repetitions.
      const methods = job.methods.map((_, i) => job.methods[(i + rep) % job.methods.length]);
      for (const m of methods) {
        const r = await trial(sc, m, job, ctx);
        r.rep = rep;
        trials.push(r);
        ctx.progress(`${sc.id} / ${m}: ${r.survivors}/${r.started}`);
      }
    }
  }
  return { helpers, trials };
}

export function report(results, { job }) {
  const trials = results.flatMap((r) => r.trials);
  const scenariosSeen = [...new Set(trials.map((t) => t.scenario))];
  const methods = job.methods;
  const rows = scenariosSeen.map((sc) => [
    sc,
    ...methods.map((m) => {
      const ts = trials.filter((t) => t.scenario === sc && t.method === m);
      if (ts.length === 0) return '–';
      const s = ts.reduce((a, t) => a + t.survivors, 0);
      const n = ts.reduce((a, t) => a + t.started, 0);
      return s === 0 ? `0/${n}` : `**${s}/${n}**`;
    }),
  ]);
  const totals = methods.map((m) => {
    const ts = trials.filter((t) => t.method === m);
    return `${ts.reduce((a, t) => a + t.survivors, 0)}/${ts.reduce((a, t) => a + t.started, 0)}`;
  });
  rows.push(['**all scenarios**', ...totals]);
  const markdown = [
    `Survivors/started, summed over ${job.reps} repetition(s): processes still alive (not zombies) in the outer cgroup ${job.settleMs} ms after the method's cleanup finished. Ladder for every method: graceful signal, up to ${job.grace} ms, SIGKILL.`,
    '',
    table(['scenario', ...methods.map((m) => METHODS[m].label)], rows),
  ].join('\n');
  return { markdown, summary: { rows: Object.fromEntries(rows.map((r) => [r[0], r.slice(1)])) } };
}
