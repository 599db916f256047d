#!/usr/bin/env node
// proctree's benchmarks: `npm run bench` (a few minutes, at most 10, on 2 cores) or
// `npm run bench -- --quick` (a few minutes: numbers are printed, never
// asserted), or `npm run bench -- --smoke` (CI: each section once, briefly).
//
// This file is the orchestrator and, started again with
// PROCTREE_BENCH_WORKER set, the worker. The orchestrator makes an outer
// cgroup `<own cgroup>/proctree-bench-<pid>-<t>` and runs each job in a fresh
// worker process that first moves itself into that cgroup's harness leaf, so
// every process any method starts lives below the outer cgroup and is
// counted from the kernel's membership. The orchestrator stays outside and
// removes the outer cgroup on every way out.
import { execFileSync, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const benchDir = path.dirname(fileURLToPath(import.meta.url));

// ---------------------------------------------------------------------------
// What runs, in full and --quick form. Each job runs in its own worker.

const FULL = {
  completeness: { reps: 3, grace: 300, settleMs: 100, methods: ['proctree', 'killpg', 'child.kill', 'execa', 'tree-kill'] },
  // fork() at 4 GB takes a few hundred ms per call: fewer samples there.
  // proctree's worker takes more samples: they are cheap, and fork()'s at 4 GB are not.
  spawnLatency: { tiersMB: [50, 1024, 4096], samples: { 50: 150, 1024: 150, 4096: 50 }, proctreeSamples: 300, warmup: 10, warmupCalls: 2000, floorSamples: 300 },
  cleanupLatency: {
    sizes: [1, 10, 100, 1000],
    // 11 at 1000: issue 29's terminate() verdict is read there, and a
    // thousand exits on two CPUs spread a median of 5 by a quarter.
    reps: { 1: 7, 10: 7, 100: 3, 1000: 11 },
    modes: ['term', 'ignore'],
    grace: 200,
    // cgroup.kill: the kernel's floor (one write, SIGKILL, no grace);
    // proctree (worker): the same terminate() on a worker thread, the
    // control for the event-loop gap.
    methods: ['proctree', 'killpg', 'tree-kill', 'cgroup.kill', 'proctree (worker)'],
    // tree-kill runs one `ps --ppid` per process of the tree, all at once and
    // each reading all of /proc: at 1000 processes that takes minutes.
    skip: { 'tree-kill': [1000] },
  },
  throughput: { calls: 1000, concurrency: [1, 8, 64], reps: 5 },
  // Issue 14: fds and heap per live call, spawn cost with `calls` live vs `fewLive`.
  memory: { calls: 1000, methods: ['proctree', 'proctree run()', 'child_process'], spawnSamples: 200, fewLive: 10 },
  // Issue 5: 100 calls × 10 processes, every one honouring SIGTERM.
  shutdown: { trees: 100, perTree: 10, lifetimeS: 120, reps: 9, grace: 1000, methods: ['proctree', 'killpg', 'floor'] },
  // Issue 12: PTY spawn → exit of /bin/true, proctree vs node-pty.
  ptyLatency: { samples: 200, warmup: 10 },
  // Issue 14: harness CPU per call against the C floor.
  cpuPerCall: { calls: 1000, reps: 5, warmupCalls: 3000, straceCalls: 200, profileCalls: 1000 },
  // Issue 28: ports() on a tree of 100 with 10 listeners; ready polling's cost.
  ports: { processes: 100, listeners: 10, queries: 200, readyWaitMs: 5000 },
  // Issue 26: sealed spawn → exit and CPU per call beside unsealed and the C floors.
  seal: { samples: 200, warmup: 10, floorSamples: 200 },
};

const QUICK = {
  completeness: { ...FULL.completeness, reps: 1, grace: 150, settleMs: 50 },
  spawnLatency: { tiersMB: [50, 1024], samples: { 50: 30, 1024: 30 }, proctreeSamples: 100, warmup: 5, warmupCalls: 2000, floorSamples: 100 },
  cleanupLatency: {
    ...FULL.cleanupLatency,
    // 1000: issue 14's terminate() verdicts.
    sizes: [1, 10, 100, 1000],
    reps: { 1: 2, 10: 2, 100: 1, 1000: 1 },
    skip: { 'tree-kill': [100, 1000] },
  },
  throughput: { calls: 200, concurrency: [1, 8, 64], reps: 2 },
  memory: { ...FULL.memory, spawnSamples: 100 },
  shutdown: { ...FULL.shutdown, reps: 2 },
  ptyLatency: { samples: 30, warmup: 5 },
  cpuPerCall: { calls: 200, reps: 3, warmupCalls: 3000, straceCalls: 100, profileCalls: 0 },
  ports: { ...FULL.ports, queries: 50, readyWaitMs: 2000 },
  seal: { samples: 40, warmup: 5, floorSamples: 40 },
};

// --smoke: every section, with the fewest samples that still make its
// verdicts (but those of a 1 GB harness), for CI, which checks that the
// bench runs (a loaded, shared machine's numbers are no claims; --quick took
// 4-5 minutes there).
const SMOKE = {
  ...QUICK,
  // 50 MB only: growing a harness to 1 GB took most of the section's minute.
  spawnLatency: { ...QUICK.spawnLatency, tiersMB: [50], samples: { 50: 15 }, proctreeSamples: 40, warmupCalls: 300, floorSamples: 40 },
  throughput: { ...QUICK.throughput, calls: 100, reps: 1 },
  memory: { ...QUICK.memory, calls: 300, spawnSamples: 30 },
  // 30 trees, not 100: about 3000 processes fewer to start on a loaded machine.
  shutdown: { ...QUICK.shutdown, reps: 1, trees: 30 },
  // 1000 makes the terminate() verdicts; 10 and 100 add nothing to them.
  cleanupLatency: { ...QUICK.cleanupLatency, sizes: [1, 1000], reps: { 1: 1, 1000: 1 } },
  cpuPerCall: { ...QUICK.cpuPerCall, calls: 100, reps: 1, warmupCalls: 300, straceCalls: 30 },
  ports: { ...QUICK.ports, queries: 20, readyWaitMs: 1000 },
  seal: { ...QUICK.seal, samples: 20, warmup: 3, floorSamples: 20 },
};

// Each section: a module with run(job, ctx) (in a worker) and report(results,
// {job, cfg}) (in the orchestrator); jobs(cfg) splits it into worker runs.
const SECTIONS = [
  { name: 'completeness', module: 'completeness.mjs', jobs: (c) => [c] },
  {
    name: 'spawnLatency',
    module: 'spawn-latency.mjs',
    jobs: (c) =>
      c.tiersMB.flatMap((tierMB) =>
        ['proctree', 'child_process'].map((group) => ({ ...c, tierMB, group, samples: group === 'proctree' ? c.proctreeSamples : c.samples[tierMB] })),
      ),
  },
  { name: 'cleanupLatency', module: 'cleanup-latency.mjs', jobs: (c) => [c] },
  { name: 'throughput', module: 'throughput.mjs', jobs: (c) => [c] },
  { name: 'memory', module: 'memory.mjs', jobs: (c) => c.methods.map((method) => ({ ...c, method })) },
  // Issue 5: "shutdown: 100 calls × 10 processes vs a killpg loop".
  { name: 'shutdown', module: 'shutdown.mjs', jobs: (c) => [c] },
  { name: 'ptyLatency', module: 'pty-latency.mjs', jobs: (c) => [c] },
  // Issue 14: "harness CPU per call within 2× of the C floor".
  {
    name: 'cpuPerCall',
    module: 'cpu-per-call.mjs',
    jobs: (c) => ['proctree', 'child_process', 'proctree, child_process used'].map((group) => ({ ...c, group })),
  },
  // Issue 28: "a ports() call … a few milliseconds at most"; ready polling no busy loop.
  { name: 'ports', module: 'ports.mjs', jobs: (c) => [c] },
  // Issue 26: what sealing costs, against what the kernel's namespaces cost.
  { name: 'seal', module: 'seal.mjs', jobs: (c) => [c] },
];

// ---------------------------------------------------------------------------

async function orchestrate(argv) {
  const smoke = argv.includes('--smoke');
  const quick = smoke || argv.includes('--quick');
  const onlyArg = argv.find((a) => a.startsWith('--only='));
  const only = onlyArg ? onlyArg.slice('--only='.length).split(',') : null;
  // PROCTREE_BENCH_CONFIG='{"section":{...}}' overrides settings, for working on one section.
  const override = JSON.parse(process.env.PROCTREE_BENCH_CONFIG || '{}');
  const base = smoke ? SMOKE : quick ? QUICK : FULL;
  const cfg = Object.fromEntries(Object.entries(base).map(([k, v]) => [k, { ...v, ...override[k] }]));
  const t0 = performance.now();
  const startedAt = new Date().toISOString();
  const loadAtStart = os.loadavg();

  let proctree;
  try {
    proctree = await import('proctree');
  } catch (err) {
    console.error(`proctree is not built (${err.message}). Run \`npm run compile\` first.`);
    process.exit(1);
  }
  const { buildHelpers } = await import('./lib/build-helpers.mjs');
  const { OuterCgroup } = await import('./lib/cgroup.mjs');
  let bin;
  let outer;
  try {
    bin = buildHelpers(benchDir);
  } catch (err) {
    console.error(`Cannot compile the bench's C helpers (${err.message}): a C compiler is needed (cc, or set CC).`);
    process.exit(1);
  }
  try {
    outer = OuterCgroup.create();
  } catch (err) {
    console.error(
      `Cannot make the bench's cgroup (${err.message}): it needs cgroup v2 and write access to its own cgroup (root, or a delegated subtree).`,
    );
    process.exit(1);
  }
  // Every way out removes the outer cgroup and everything below it.
  process.on('exit', () => outer.destroy());
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => process.exit(130));

  const raw = {};
  const reports = {};
  for (const section of SECTIONS) {
    if (only && !only.includes(section.name)) continue;
    if (!section.module) {
      console.error(`[bench] ${section.name}: not implemented yet (issue ${section.issue})`);
      continue;
    }
    const mod = await import(`./sections/${section.module}`);
    const sectionCfg = cfg[section.name];
    raw[section.name] = [];
    const ts = performance.now();
    try {
      for (const job of section.jobs(sectionCfg)) {
        raw[section.name].push(await runWorker(section, job, { outer, bin }));
      }
      reports[section.name] = { title: mod.title, ...mod.report(raw[section.name], { job: sectionCfg }) };
    } catch (err) {
      // One broken section must not cost the others' numbers; the run still fails.
      console.error(`[bench] ${section.name} failed: ${err.stack ?? err}`);
      reports[section.name] = { title: mod.title, markdown: `**Failed:** ${err.message}` };
      process.exitCode = 1;
    }
    console.error(`[bench] ${section.name}: ${((performance.now() - ts) / 1000).toFixed(1)} s`);
  }
  outer.destroy();

  const wallMs = performance.now() - t0;
  const machine = { ...machineInfo(proctree), loadAverage: { start: loadAtStart, end: os.loadavg() } };
  const command = smoke ? 'npm run bench -- --smoke' : quick ? 'npm run bench -- --quick' : 'npm run bench';
  const { writeOutputs } = await import('./lib/output.mjs');
  await writeOutputs({
    benchDir,
    quick,
    partial: only !== null,
    command,
    startedAt,
    wallMs,
    machine,
    cfg,
    raw,
    reports,
  });
}

function machineInfo(proctree) {
  const read = (p) => {
    try {
      return fs.readFileSync(p, 'utf8').trim();
    } catch {
      return null;
    }
  };
  const caps = proctree.capabilities();
  return {
    kernel: os.release(),
    arch: process.arch,
    cores: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? null,
    memTotalGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    pidMax: Number(read('/proc/sys/kernel/pid_max')),
    transparentHugepage: read('/sys/kernel/mm/transparent_hugepage/enabled')?.match(/\[(\w+)\]/)?.[1] ?? null,
    cloneMethod: caps.clone,
    proctree: buildRevision(),
  };
}

// What was measured: the checkout's commit, and whether the sources the build
// comes from differed from it.
function buildRevision() {
  const git = (args) => {
    try {
      return execFileSync('git', args, { cwd: benchDir, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    } catch {
      return null;
    }
  };
  const commit = git(['rev-parse', '--short', 'HEAD']);
  const changed = git(['status', '--porcelain', '--', '../lib', '../native', '../binding.gyp']);
  return { commit, uncommittedSourceChanges: changed === null ? null : changed.split('\n').filter(Boolean).length };
}

function runWorker(section, job, { outer, bin }) {
  return new Promise((resolve, reject) => {
    const spec = {
      module: `./sections/${section.module}`,
      job,
      outer: outer.dir,
      harness: outer.harness,
      home: outer.home,
      bin,
    };
    const child = fork(fileURLToPath(import.meta.url), [], {
      env: { ...process.env, PROCTREE_BENCH_WORKER: JSON.stringify(spec) },
      execArgv: ['--expose-gc'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let result = null;
    // A stuck worker must not stall the run forever: say where it is stuck, then end it.
    const timer = setTimeout(() => {
      console.error(`[bench] ${section.name} worker stuck; its threads:\n${threadStates(child.pid)}`);
      child.kill('SIGKILL');
    }, 5 * 60 * 1000);
    child.on('message', (m) => {
      if (m.progress && process.env.PROCTREE_BENCH_VERBOSE) console.error(`  ${section.name}: ${m.progress}`);
      if (m.result) result = m.result;
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (result) resolve(result);
      else reject(new Error(`${section.name} worker ended with ${signal ?? `code ${code}`} and no result`));
    });
  });
}

function threadStates(pid) {
  try {
    return fs
      .readdirSync(`/proc/${pid}/task`)
      .map((tid) => {
        const at = (f) => fs.readFileSync(`/proc/${pid}/task/${tid}/${f}`, 'utf8').trim();
        const stat = at('stat');
        return `  ${tid} ${at('comm')} state=${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]} wchan=${at('wchan')}`;
      })
      .join('\n');
  } catch (err) {
    return `  (unreadable: ${err.message})`;
  }
}

async function workerMain(spec) {
  // First of all: into the outer cgroup's harness leaf, before anything is
  // started (proctree makes its subtree below the cgroup it finds itself in).
  const { Harness } = await import('./lib/harness.mjs');
  const { destroyTreeSync, joinCgroup } = await import('./lib/cgroup.mjs');
  const harness = new Harness({ outer: spec.outer, harness: spec.harness });
  const mod = await import(spec.module);
  const ctx = { harness, bin: spec.bin, progress: (msg) => process.send({ progress: msg }) };
  // Orphaned (the orchestrator was killed without running its hooks): leave
  // the outer cgroup for the one we came from and remove it ourselves.
  let finishing = false;
  process.on('disconnect', () => {
    if (finishing) return;
    joinCgroup(spec.home);
    destroyTreeSync(spec.outer);
    process.exit(1);
  });
  const result = await mod.run(spec.job, ctx);
  finishing = true;
  process.send({ result }, () => process.exit(0));
}

if (process.env.PROCTREE_BENCH_WORKER) {
  await workerMain(JSON.parse(process.env.PROCTREE_BENCH_WORKER));
} else {
  await orchestrate(process.argv.slice(2));
}
