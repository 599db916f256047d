// Sealed calls (issue 26): spawn() → exit of /bin/true with `seal: true`
// beside the same call unsealed, interleaved, and the harness's CPU per
// call for each; against two C floors: the plain one (clone3 into a new
// leaf + exec, bench/c/floor.c) and the sealed one (the same leaf, plus the
// user, PID, mount and cgroup namespaces, their uid map, mounts and the
// init that forks the command: bench/c/sealfloor.c). What the namespaces
// cost the kernel itself is the sealed floor over the plain one.
import { execFileSync } from 'node:child_process';

import { capabilities, spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { cell, num, ratioCell, summarize, table } from '../lib/stats.mjs';

export const title = 'Sealed calls';

const MB = 2 ** 20;

function timed(opts, file) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let exitAt = NaN;
    const child = proctreeSpawn(file, [], { stdio: 'ignore', ...opts });
    child.once('exit', () => (exitAt = performance.now()));
    child.once('error', reject);
    child.once('close', () => resolve(exitAt - t0));
  });
}

const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

export async function run(job, ctx) {
  const seal = capabilities().seal;
  if (!seal.available) return { unavailable: seal.why };
  const file = which('true');
  const methods = { unsealed: {}, sealed: { seal: true } };
  for (let i = 0; i < job.warmup; i += 1) for (const opts of Object.values(methods)) await timed(opts, file);
  const samples = { unsealed: [], sealed: [] };
  const cpu = { unsealed: 0, sealed: 0 };
  const names = Object.keys(methods);
  for (let i = 0; i < job.samples; i += 1) {
    for (let k = 0; k < names.length; k += 1) {
      const m = names[(i + k) % names.length];
      const c0 = cpuUs();
      samples[m].push(await timed(methods[m], file));
      cpu[m] += cpuUs() - c0;
    }
    if (i % 50 === 0) ctx.progress(`${i}/${job.samples}`);
  }
  const plain = JSON.parse(
    execFileSync(ctx.bin.floor, [String(job.floorSamples), '1', '50', ctx.harness.harness, file], { maxBuffer: 64 * MB }).toString(),
  );
  const sealed = JSON.parse(execFileSync(ctx.bin.sealfloor, [String(job.floorSamples), ctx.harness.harness, file], { maxBuffer: 64 * MB }).toString());
  return {
    samples: { ...samples, 'C floor + cgroup': plain.exitMs, 'C sealed floor': sealed.exitMs },
    cpuPerCallUs: {
      unsealed: cpu.unsealed / job.samples,
      sealed: cpu.sealed / job.samples,
      'C sealed floor': sealed.selfCpuUs / job.floorSamples,
    },
  };
}

const ROWS = ['unsealed', 'sealed', 'C floor + cgroup', 'C sealed floor'];

export function report(results) {
  const r = results[0];
  if (!r || r.unavailable) {
    return { markdown: `Not measured: sealing is unavailable here (${r?.unavailable ?? 'no result'}).`, checks: [], summary: {} };
  }
  const sum = Object.fromEntries(ROWS.map((m) => [m, summarize(r.samples[m])]));
  const med = (m) => sum[m].median;
  const sealedVsUnsealed = med('sealed') / med('unsealed');
  const floorRatio = med('C sealed floor') / med('C floor + cgroup');
  const sealedVsFloor = med('sealed') / med('C sealed floor');
  const checks = [
    {
      issue: 26,
      name: 'issue26.sealedVsUnsealed',
      value: sealedVsUnsealed,
      pass: sealedVsUnsealed <= 1.5,
      text: `sealed spawn → exit is ${num(sealedVsUnsealed)}× unsealed: ${cell(sum.sealed)} ms vs ${cell(sum.unsealed)} ms (asked: ≤ 1.5×; the kernel's own namespaces make its C floor ${num(floorRatio)}× the plain one)`,
    },
    {
      issue: 26,
      name: 'issue26.sealedVsSealedFloor',
      value: sealedVsFloor,
      pass: sealedVsFloor <= 1.2,
      text: `sealed spawn → exit against the C sealed floor (the same namespaces, mounts and init in a C loop): ${num(sealedVsFloor)}× (${cell(sum.sealed)} ms vs ${cell(sum['C sealed floor'])} ms; required: ≤ 1.2×)`,
    },
  ];
  const rows = ROWS.map((m) => [m, cell(sum[m]), r.cpuPerCallUs[m] === undefined ? '' : num(r.cpuPerCallUs[m])]);
  rows.push(['*sealed / unsealed*', ratioCell(sealedVsUnsealed), ratioCell(r.cpuPerCallUs.sealed / r.cpuPerCallUs.unsealed)]);
  rows.push(['*C sealed floor / C floor + cgroup*', ratioCell(floorRatio), '']);
  rows.push(['*sealed / C sealed floor*', ratioCell(sealedVsFloor), ratioCell(r.cpuPerCallUs.sealed / r.cpuPerCallUs['C sealed floor'])]);
  const markdown = [
    `Interleaved samples: ${r.samples.sealed.length} per method, stdio ignored; the C floors: ${r.samples['C sealed floor'].length} each in their own loops. The C sealed floor is clone3(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS|CLONE_INTO_CGROUP) into a new leaf, its uid and gid maps, unshare(CLONE_NEWCGROUP), a private /, proc and cgroup2 mounted, and an init that forks and waits for /bin/true; the harness CPU column is its own process's CPU per call (the C floor's: getrusage of itself).`,
    '',
    table(['method', 'spawn() → exit of /bin/true (ms)', 'harness CPU per call (µs)'], rows),
  ].join('\n');
  return { markdown, checks, summary: sum };
}
