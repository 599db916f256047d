// 8. Harness CPU per call (issue 14): N sequential calls of /bin/true, each
// to its end, and the harness process's own CPU time (user + system, every
// thread) divided by N; against the C floor + cgroup measured the same way
// (getrusage of itself around its loop). Both sides exclude the children's
// CPU (their exec, the dynamic loader, their exit), which is shown apart so
// that work moved from the harness into the child before exec would show.
// Extras: system calls per call (strace -c, attached to the harness's
// threads only, when strace is installed) and a V8 CPU profile of proctree's
// calls summarized by function.
//
// Three workers: proctree and its floor in one that never uses child_process
// (the C floor and strace are started with proctree too: while libuv has a
// child of its own alive it takes SIGCHLD, and every exit of any child,
// proctree's too, then costs the harness a signal, a wake-up and a wait4),
// child_process in another, and proctree again in a third that keeps one
// child_process child alive, as a real harness that uses both does (issue 29
// asks for both figures).
import cp from 'node:child_process';
import fs from 'node:fs';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { run as proctreeRun, spawn as proctreeSpawn } from 'proctree';

import { which } from '../lib/harness.mjs';
import { cell, num, ratioCell, sleep, summarize, table } from '../lib/stats.mjs';

export const title = 'Harness CPU per call';

const execFile = promisify(cp.execFile);

/** A helper program (the floor, strace) to its end, started with proctree so that child_process stays unused. */
async function tool(file, args, env) {
  const r = await proctreeRun(file, args, { maxBuffer: 64 << 20, ...(env ? { env: { ...process.env, ...env } } : {}) });
  if (r.exitCode !== 0) throw new Error(`${path.basename(file)} ${args.join(' ')}: exit ${r.exitCode} ${r.stderr}`);
  return r.stdout;
}

const CP_IGNORE = 'proctree, stdio ignored, child_process used';
const CP_RUN = 'proctree run(), child_process used';
const SIGCHLD_FLOOR = 'C floor + cgroup, SIGCHLD handled';

const untilClose = (child) =>
  new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });

// Each starts one call of `file` and resolves when it is over: 'close' (tree
// empty and stdio drained), or run()'s result.
const CALLS = {
  'proctree, stdio ignored': (file) => untilClose(proctreeSpawn(file, [], { stdio: 'ignore' })),
  'proctree run()': (file) => proctreeRun(file),
  [CP_IGNORE]: (file) => untilClose(proctreeSpawn(file, [], { stdio: 'ignore' })),
  [CP_RUN]: (file) => proctreeRun(file),
  'child_process, stdio ignored': (file) => untilClose(cp.spawn(file, [], { stdio: 'ignore' })),
  'child_process execFile()': (file) => execFile(file),
};
const GROUPS = {
  proctree: ['proctree, stdio ignored', 'proctree run()', 'C floor', 'C floor + cgroup'],
  child_process: ['child_process, stdio ignored', 'child_process execFile()'],
  // Real harnesses use both: a child_process child stays alive through the
  // blocks, so libuv's SIGCHLD handling is on while proctree's calls exit.
  // The floor that handles SIGCHLD as libuv then does (bench/c/floor.c):
  // what the kernel charges a process for that handling, next to what the
  // harness's runtime charges.
  'proctree, child_process used': [CP_IGNORE, CP_RUN, SIGCHLD_FLOOR],
};
const FLOORS = { 'C floor': false, 'C floor + cgroup': true, [SIGCHLD_FLOOR]: true };
const FLOOR_ENV = { [SIGCHLD_FLOOR]: { FLOOR_SIGCHLD: '1' } };

// Reaped children's CPU from /proc/self/stat (cutime, cstime), in clock ticks
// of 10 ms (USER_HZ is 100 on Linux): coarse, but over hundreds of calls it
// shows where the children's time goes.
function childrenCpuMs() {
  const text = fs.readFileSync('/proc/self/stat', 'utf8');
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(f[13]) + Number(f[14])) * 10;
}

// No forced gc() before a block: it is a memory-reducing collection that
// also shrinks V8's young generation, so the block after it would pay for
// many more scavenges than a harness that runs for a while ever does (about
// 30 µs per call over a block of 250 calls, measured). The rotating order
// spreads the natural collections over the methods instead.
async function nodeBlock(name, file, n) {
  const kids0 = childrenCpuMs();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < n; i += 1) await CALLS[name](file);
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return {
    method: name,
    calls: n,
    cpuUsPerCall: (cpu.user + cpu.system) / n,
    userUsPerCall: cpu.user / n,
    sysUsPerCall: cpu.system / n,
    childUsPerCall: ((childrenCpuMs() - kids0) * 1000) / n,
    wallUsPerCall: (wallMs * 1000) / n,
  };
}

async function floorBlock(name, file, n, ctx) {
  const parent = FLOORS[name] ? ctx.harness.harness : '-';
  const r = JSON.parse(await tool(ctx.bin.floor, [String(n), '1', '0', parent, file], FLOOR_ENV[name]));
  return {
    method: name,
    calls: n,
    cpuUsPerCall: ((r.cpuUserMs + r.cpuSysMs) * 1000) / n,
    userUsPerCall: (r.cpuUserMs * 1000) / n,
    sysUsPerCall: (r.cpuSysMs * 1000) / n,
    childUsPerCall: ((r.childCpuUserMs + r.childCpuSysMs) * 1000) / n,
    wallUsPerCall: (r.wallMs * 1000) / n,
  };
}

// ---------------------------------------------------------------------------
// strace -c: system calls of the harness's threads (not of the children:
// no -f), per call.

/** strace -c's table: { name: calls } and the total. */
function parseStraceSummary(text) {
  const counts = {};
  let total = 0;
  for (const line of text.split('\n')) {
    const t = line.trim().split(/\s+/);
    if (t.length < 5 || !/^\d/.test(t[0]) || !/^\d+$/.test(t[3])) continue;
    const name = t[t.length - 1];
    if (name === 'total') total = Number(t[3]);
    else counts[name] = Number(t[3]);
  }
  return { counts, total };
}

const tracedBy = (tid) => {
  try {
    return Number(/^TracerPid:\s*(\d+)$/m.exec(fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8'))[1]);
  } catch {
    return -1; // the thread is gone
  }
};

async function straceNode(strace, name, file, n) {
  const out = path.join(os.tmpdir(), `proctree-bench-strace-${process.pid}-${Date.now()}`);
  const tids = fs.readdirSync('/proc/self/task');
  const st = proctreeSpawn(strace, ['-c', '-q', '-o', out, ...tids.flatMap((t) => ['-p', t])], { stdio: 'ignore' });
  const exited = new Promise((resolve) => st.once('close', resolve));
  try {
    const deadline = Date.now() + 10000;
    while (!tids.every((t) => [st.pid, -1].includes(tracedBy(t)))) {
      if (Date.now() > deadline || st.exitCode !== null) throw new Error('strace did not attach');
      await sleep(5);
    }
    for (let i = 0; i < n; i += 1) await CALLS[name](file);
  } finally {
    // strace detaches and writes the summary. A plain kill(2) of its pid and
    // not call.kill(): that freezes strace's cgroup first, and a frozen
    // tracer can never let this thread out of its syscall stop.
    if (st.pid && st.exitCode === null) process.kill(st.pid, 'SIGINT');
    await Promise.race([exited, sleep(10000)]);
  }
  try {
    return parseStraceSummary(fs.readFileSync(out, 'utf8'));
  } finally {
    fs.rmSync(out, { force: true });
  }
}

/** The floor under strace from its start: (N-call run − 1-call run) / (N − 1) drops its own start-up. */
async function straceFloor(strace, name, file, n, ctx) {
  const once = async (k) => {
    const out = path.join(os.tmpdir(), `proctree-bench-strace-${process.pid}-${Date.now()}-${k}`);
    const parent = FLOORS[name] ? ctx.harness.harness : '-';
    await tool(strace, ['-c', '-q', '-o', out, ctx.bin.floor, String(k), '1', '0', parent, file], FLOOR_ENV[name]);
    try {
      return parseStraceSummary(fs.readFileSync(out, 'utf8'));
    } finally {
      fs.rmSync(out, { force: true });
    }
  };
  const a = await once(n);
  const b = await once(1);
  const counts = {};
  for (const k of Object.keys(a.counts)) {
    const d = a.counts[k] - (b.counts[k] ?? 0);
    if (d > 0) counts[k] = d;
  }
  return { counts, total: a.total - b.total, calls: n - 1 };
}

// ---------------------------------------------------------------------------
// A V8 CPU profile of n calls, summarized: self time by function.

async function profileBlock(name, file, n, dumpDir) {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 100 });
    global.gc?.();
    await session.post('Profiler.start');
    for (let i = 0; i < n; i += 1) await CALLS[name](file);
    const { profile } = await session.post('Profiler.stop');
    fs.mkdirSync(dumpDir, { recursive: true });
    const dump = path.join(dumpDir, `cpu-per-call-${name.replace(/[^a-z0-9]+/gi, '-')}.cpuprofile`);
    fs.writeFileSync(dump, JSON.stringify(profile));
    return { method: name, calls: n, dump, ...summarizeProfile(profile) };
  } finally {
    session.disconnect();
  }
}

/** Where a profile node's self time belongs; `caller` labels a nameless native function by who called it. */
function frameLabel(cf, caller) {
  const fn = cf.functionName;
  const url = cf.url ?? '';
  if (fn.startsWith('(') && !url) return { kind: fn, label: fn };
  if (!url) {
    const name = fn || (caller ? `called from ${caller.label}` : '(anonymous)');
    return { kind: 'native (addon or V8 builtin called from JS)', label: `[native] ${name}` };
  }
  const at = `${fn || '(anonymous)'} (${url.startsWith('node:') ? url : path.basename(url)}:${cf.lineNumber + 1})`;
  if (/\/dist\/(cjs|esm)\//.test(url) && !url.includes('node_modules')) return { kind: 'proctree JS', label: at };
  if (url.startsWith('node:')) return { kind: 'Node internals', label: at };
  return { kind: 'other JS (the bench)', label: at };
}

function summarizeProfile(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const labels = new Map();
  const labelOf = (id) => {
    if (!labels.has(id)) {
      const p = parent.get(id);
      labels.set(id, frameLabel(byId.get(id).callFrame, p === undefined ? null : labelOf(p)));
    }
    return labels.get(id);
  };
  const self = new Map();
  const kinds = new Map();
  let busyUs = 0;
  let idleUs = 0;
  // timeDeltas[i + 1] is how long the sample i lasted.
  for (let i = 0; i < profile.samples.length; i += 1) {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const { kind, label } = labelOf(profile.samples[i]);
    if (kind === '(idle)') {
      idleUs += dt;
      continue;
    }
    busyUs += dt;
    self.set(label, (self.get(label) ?? 0) + dt);
    kinds.set(kind, (kinds.get(kind) ?? 0) + dt);
  }
  const top = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15);
  return {
    busyUs,
    idleUs,
    top: top.map(([label, us]) => ({ label, us })),
    kinds: [...kinds.entries()].sort((a, b) => b[1] - a[1]).map(([kind, us]) => ({ kind, us })),
  };
}

// ---------------------------------------------------------------------------

export async function run(job, ctx) {
  const file = which('true');
  const names = GROUPS[job.group];
  // The harness that also uses child_process: one child of its own, alive
  // until the blocks are over (killed by its pid).
  const keeper = job.group === 'proctree, child_process used' ? cp.spawn('sleep', ['3600'], { stdio: 'ignore' }) : null;
  try {
    return await measure(job, ctx, file, names);
  } finally {
    keeper?.kill('SIGKILL');
  }
}

async function measure(job, ctx, file, names) {
  // Warm-up: what happens once per harness (the guardian, V8's tiering up
  // of proctree's and Node's code) is not per call. V8's optimizing
  // compiler keeps working for the first 2000 or so calls (its threads
  // then cost more CPU per call than the calls' own JavaScript), so a short
  // warm-up would count the JIT as a per-call cost. Its CPU per call is
  // reported apart.
  const warmups = [];
  for (const m of names) if (m in CALLS) warmups.push(await nodeBlock(m, file, job.warmupCalls));
  const samples = [];
  for (let rep = 0; rep < job.reps; rep += 1) {
    for (let k = 0; k < names.length; k += 1) {
      const m = names[(k + rep) % names.length];
      const r = m in FLOORS ? await floorBlock(m, file, job.calls, ctx) : await nodeBlock(m, file, job.calls);
      samples.push({ rep, ...r });
      ctx.progress(`${m}: ${r.cpuUsPerCall.toFixed(0)} µs CPU/call`);
    }
  }

  let strace = null;
  let straceSkipped = null;
  if (job.straceCalls > 0) {
    let bin = null;
    try {
      bin = which('strace');
    } catch {
      straceSkipped = 'strace is not installed';
    }
    if (bin) {
      try {
        strace = {};
        for (const m of names) {
          if (m === 'C floor') continue;
          if (m in FLOORS) strace[m] = await straceFloor(bin, m, file, job.straceCalls, ctx);
          else strace[m] = { ...(await straceNode(bin, m, file, job.straceCalls)), calls: job.straceCalls };
        }
      } catch (err) {
        // No ptrace here (not root, yama), or strace failed: an extra, not a reason to lose the section.
        strace = null;
        straceSkipped = `strace failed: ${err.message}`;
      }
    }
  }

  const profiles = [];
  if (job.profileCalls > 0 && job.group === 'proctree') {
    const dumpDir = path.dirname(ctx.bin.floor);
    for (const m of ['proctree, stdio ignored', 'proctree run()']) profiles.push(await profileBlock(m, file, job.profileCalls, dumpDir));
  }
  return { group: job.group, samples, warmups, strace, straceSkipped, profiles };
}

const ROWS = [
  'proctree, stdio ignored',
  'proctree run()',
  CP_IGNORE,
  CP_RUN,
  'child_process, stdio ignored',
  'child_process execFile()',
  'C floor',
  'C floor + cgroup',
  SIGCHLD_FLOOR,
];
const FLOOR = 'C floor + cgroup';

export function report(results, { job }) {
  const samples = results.flatMap((r) => r.samples);
  const warmups = new Map(results.flatMap((r) => r.warmups ?? []).map((w) => [w.method, w]));
  const strace = results.some((r) => r.strace) ? Object.assign({}, ...results.map((r) => r.strace ?? {})) : null;
  const straceSkipped = results.find((r) => r.straceSkipped)?.straceSkipped;
  const profiles = results.flatMap((r) => r.profiles ?? []);
  const pick = (m, f) => summarize(samples.filter((s) => s.method === m).map(f));
  const cpu = (m) => pick(m, (s) => s.cpuUsPerCall);
  const rows = ROWS.map((m) => [
    m,
    cell(cpu(m)),
    cell(pick(m, (s) => s.userUsPerCall)),
    cell(pick(m, (s) => s.sysUsPerCall)),
    m === FLOOR ? '1×' : ratioCell(cpu(m).median / cpu(FLOOR).median),
    cell(pick(m, (s) => s.childUsPerCall)),
    cell(pick(m, (s) => s.wallUsPerCall)),
    strace?.[m] ? num(strace[m].total / strace[m].calls) : '–',
    warmups.has(m) ? num(warmups.get(m).cpuUsPerCall) : '–',
  ]);

  const checks = [];
  const verdict = (m, limit, what) => {
    const v = cpu(m).median / cpu(FLOOR).median;
    if (!Number.isFinite(v)) return;
    checks.push({
      issue: 29,
      name: `issue29.cpuPerCall.${m.includes('run()') ? 'run' : 'ignore'}${m.includes('child_process used') ? '.childProcessUsed' : ''}`,
      value: v,
      pass: v <= limit,
      text: `harness CPU per /bin/true call, ${what}: ${num(v)}× the C floor + cgroup: proctree ${cell(cpu(m))} µs vs floor ${cell(cpu(FLOOR))} µs (required: ≤ ${limit}×)`,
    });
  };
  verdict('proctree, stdio ignored', 1.5, "stdio ignored (spawn(…, { stdio: 'ignore' }) until 'close')");
  verdict('proctree run()', 2.0, 'default pipes (run())');
  verdict(CP_IGNORE, 1.5, 'stdio ignored, in a harness that also has a child_process child alive');
  verdict(CP_RUN, 2.0, 'default pipes (run()), in a harness that also has a child_process child alive');

  const md = [
    `${job.calls} calls of /bin/true one after another per block, ${job.reps} block(s) per method, in a rotating order, after a warm-up of ${job.warmupCalls} calls per method (V8 optimizes the hot code of proctree and of Node over the first 2000 or so calls, and its compiler threads' CPU would otherwise count as per-call cost; the warm-up's own CPU per call, JIT included, is the last column: the first method of each worker also pays for loading its modules); a call is over at 'close' (run(): its result; execFile: its callback). CPU: the harness process's own user + system time over the block, every thread (process.cpuUsage), divided by the calls; the C floor (bench/c/floor.c, the loop of section 2 at concurrency 1) measures itself with getrusage around its loop. "+ cgroup" makes a leaf (mkdir, open), starts into it (CLONE_INTO_CGROUP) and removes it (rmdir) per call: the least a per-call cgroup costs. Neither side counts its children: what a child does before exec, its exec, the dynamic loader and its exit are its own, shown apart ("children": /proc/self/stat cutime + cstime, in 10 ms ticks, or RUSAGE_CHILDREN). proctree and the floors run in a worker that never uses child_process (it starts the floor and strace with proctree): while libuv has a child of its own alive it takes SIGCHLD, and every exit of any child, proctree's too, would cost the harness a signal, a wake-up and a wait4. child_process runs in a worker of its own. "${SIGCHLD_FLOOR}" keeps a child of its own alive and handles SIGCHLD as libuv then does (a handler that writes to a pipe, the pipe read until empty, a waitpid(WNOHANG) of that child): what the kernel charges a process for every child's exit in such a harness, next to what the harness's runtime charges (the rows with child_process used, against the rows without). A clone with exit_signal 0 would not spare it: exec resets a child's exit signal to SIGCHLD.`,
    '',
    table(
      [
        'method',
        'harness CPU µs/call',
        'user µs',
        'system µs',
        'CPU / C floor + cgroup',
        'children CPU µs/call',
        'wall µs/call',
        'syscalls/call (strace)',
        `warm-up CPU µs/call (first ${job.warmupCalls})`,
      ],
      rows,
    ),
  ];
  if (strace) {
    const top = (m) =>
      Object.entries(strace[m].counts)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 14)
        .map(([k, v]) => `${k} ${num(v / strace[m].calls)}`)
        .join(', ');
    md.push(
      '',
      `System calls per call: \`strace -c\` over ${job.straceCalls} calls in a separate block (tracing slows every call; the CPU figures above come from untraced blocks), attached to every thread of the harness and not following children, so only the harness's own calls count (the floor: a run of ${job.straceCalls} minus a run of 1, which drops its start-up). Most frequent:`,
      '',
      ...Object.keys(strace).map((m) => `- ${m}: ${top(m)}`),
    );
  } else if (straceSkipped) {
    md.push('', `System calls per call: not measured (${straceSkipped}).`);
  }
  if (profiles?.length) {
    md.push(
      '',
      `Where proctree's harness time goes: a V8 CPU profile (a sample every 100 µs) of ${profiles[0].calls} more calls, self time by function, idle excluded. The profiler samples the main thread's wall time, not its CPU time: time the thread spends blocked in a system call (the clone with CLONE_VFORK returns only once the child has exec'd) or descheduled by other work on the machine counts, so read the shares, not the µs. A native function called from JS (the addon's, a V8 builtin) owns the time spent in it; "(program)" is native time outside any JS call (libuv, the addon's event handlers before they call into JS). The profiles are left in \`bench/.build/\` for DevTools.`,
    );
    for (const p of profiles) {
      const pct = (us) => `${((100 * us) / p.busyUs).toFixed(1)} %`;
      md.push(
        '',
        `**${p.method}**: ${num(p.busyUs / p.calls)} µs busy per call on the main thread; ${p.kinds.map((k) => `${k.kind} ${pct(k.us)}`).join(', ')}.`,
        '',
        table(
          ['function (self time)', 'µs/call', 'share'],
          p.top.map((t) => [t.label.replace(/\|/g, '\\|'), num(t.us / p.calls), pct(t.us)]),
        ),
      );
    }
  }
  const summary = Object.fromEntries(ROWS.map((m) => [m, { cpuUsPerCall: cpu(m) }]));
  return { markdown: md.join('\n'), checks, summary };
}
