// Terminal spawn latency (issue 12): /bin/true on a pseudo-terminal of its
// own, from the spawn call until it is over, proctree's `pty` against
// node-pty, interleaved in the same worker. node-pty reports exit only once
// its terminal socket has closed (all output read), so the fair proctree
// counterpart is 'close' (tree verified empty, terminal read to its end,
// master closed); its 'exit' (the main process reaped) is shown beside it.
import { createRequire } from 'node:module';

import { spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { cell, ratioCell, summarize, table } from '../lib/stats.mjs';

export const title = 'Terminal spawn latency (PTY)';

const require = createRequire(import.meta.url);

function loadNodePty() {
  try {
    return { pty: require('node-pty'), error: null };
  } catch (err) {
    return { pty: null, error: err.message.split('\n')[0] };
  }
}

function proctreeOnce(file) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let exitAt = NaN;
    const call = proctreeSpawn(file, [], { pty: { cols: 80, rows: 24 } });
    call.pty.resume();
    call.once('exit', () => {
      exitAt = performance.now();
    });
    call.once('error', reject);
    call.once('close', () => resolve({ exit: exitAt - t0, close: performance.now() - t0 }));
  });
}

function nodePtyOnce(pty, file) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const term = pty.spawn(file, [], { name: 'xterm-256color', cols: 80, rows: 24, cwd: process.cwd(), env: process.env });
    term.onData(() => {});
    term.onExit(() => resolve({ exit: performance.now() - t0 }));
  });
}

export async function run(job, ctx) {
  const file = which('true');
  const { pty, error } = loadNodePty();
  const starters = { proctree: () => proctreeOnce(file) };
  if (pty) starters['node-pty'] = () => nodePtyOnce(pty, file);
  const names = Object.keys(starters);
  for (let i = 0; i < job.warmup; i += 1) for (const m of names) await starters[m]();
  // proctree's guardian, started by the first call, is the harness's, not a call's.
  ctx.harness.recordHelpers();
  const samples = { 'proctree exit': [], 'proctree close': [], 'node-pty': [] };
  for (let i = 0; i < job.samples; i += 1) {
    // Interleaved, in a rotating order, so drift hits both alike.
    for (let k = 0; k < names.length; k += 1) {
      const m = names[(i + k) % names.length];
      const r = await starters[m]();
      if (m === 'proctree') {
        samples['proctree exit'].push(r.exit);
        samples['proctree close'].push(r.close);
      } else {
        samples['node-pty'].push(r.exit);
      }
    }
    if (i % 50 === 0) ctx.progress(`${i}/${job.samples}`);
  }
  // Every call is over: nothing of either may be left below the outer cgroup.
  const left = ctx.harness.live().length;
  return { samples, nodePtyError: error, nodePtyVersion: pty ? require('node-pty/package.json').version : null, left };
}

export function report(results) {
  const r = results[0];
  const sum = Object.fromEntries(Object.entries(r.samples).map(([k, v]) => [k, summarize(v)]));
  const ratio = sum['node-pty'].median / sum['proctree close'].median;
  const rows = [
    [
      'PTY spawn → exit of /bin/true',
      cell(sum['proctree close']),
      cell(sum['proctree exit']),
      r.nodePtyError ? `not loaded: ${r.nodePtyError}` : cell(sum['node-pty']),
      ratioCell(ratio),
    ],
  ];
  const markdown = [
    `${sum['proctree close'].n} interleaved samples per method, one call at a time, 80×24, the output read. node-pty ${r.nodePtyVersion ?? '(not installed)'} reports exit once its terminal socket closed; proctree's counterpart is 'close' (tree verified empty, terminal read to its end, master closed), its 'exit' (main process reaped) is shown beside it. Processes left after the runs: ${r.left}.`,
    '',
    table(['', "proctree 'close' (ms)", "proctree 'exit' (ms)", 'node-pty onExit (ms)', "node-pty / proctree 'close'"], rows),
  ].join('\n');
  return { markdown, summary: { ...sum, ratio } };
}
